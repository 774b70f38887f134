"""``furca serve --tp 2``: the OpenAI API answered by a two-rank engine (a tiny random
Llama: the default model's 9 attention heads do not split in two), SIGTERM ending every
rank, and a killed rank making the server exit with an error."""

from __future__ import annotations

import os
import signal
import time

import httpx
import psutil
import pytest

from furca.server.launch import EXIT_ENGINE_DIED
from tests.conftest import CLIENT_TIMEOUT
from tests.runtime.conftest import build_tiny_hf_model, build_tiny_hf_tokenizer
from tests.server.conftest import MODEL_NAME, ServerProcess

DEADLINE = 60.0  # seconds: generous, the machine is shared


@pytest.fixture
def tiny_model_dir(tmp_path):
    tok = build_tiny_hf_tokenizer()
    build_tiny_hf_model("qwen2", len(tok)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    return tmp_path


def _start(model_dir) -> tuple[ServerProcess, list[psutil.Process]]:
    srv = ServerProcess(str(model_dir), "--tp", "2", "--dtype", "float32", max_total_tokens=2048)
    srv.wait_ready()
    workers = psutil.Process(srv.proc.pid).children(recursive=True)
    ranks = [p for p in workers if "spawn_main" in " ".join(p.cmdline())]
    assert len(ranks) == 1, [p.cmdline() for p in workers]
    return srv, ranks


def _complete(srv: ServerProcess) -> httpx.Response:
    return httpx.post(f"{srv.url}/v1/completions", headers=srv.headers, timeout=CLIENT_TIMEOUT, json={
        "model": MODEL_NAME, "prompt": "The quick brown fox", "max_tokens": 4, "temperature": 0})


def test_serve_tp2_answers_and_sigterm_stops_every_rank(tiny_model_dir):
    srv, ranks = _start(tiny_model_dir)
    try:
        r = _complete(srv)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["usage"]["completion_tokens"] == 4 and body["choices"][0]["text"]
    finally:
        code = srv.stop()
    assert code == 0, srv.read_log()
    psutil.wait_procs(ranks, timeout=DEADLINE)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in ranks)


def test_serve_tp2_exits_with_an_error_when_a_rank_dies(tiny_model_dir):
    srv, ranks = _start(tiny_model_dir)
    try:
        os.kill(ranks[0].pid, signal.SIGKILL)
        deadline = time.monotonic() + DEADLINE
        while srv.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert srv.proc.returncode == EXIT_ENGINE_DIED, srv.read_log()
        assert "tensor-parallel rank 1" in srv.read_log()
    finally:
        srv.stop()


def test_serve_tp2_under_torchrun(tiny_model_dir):
    """torchrun starts both ranks: rank 0 serves, rank 1 runs its shard; SIGTERM to
    torchrun reaches both, rank 0 drains and stops rank 1, and no process is left."""
    import subprocess
    import sys

    from tests.server.conftest import REPO, free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                             "--master-port", str(free_port()), "-m", "furca.server", str(tiny_model_dir),
                             "--tp", "2", "--port", str(port), "--dtype", "float32", "--max-total-tokens", "2048",
                             "--served-model-name", MODEL_NAME, "--log-level", "warning"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        ranks = psutil.Process(proc.pid).children(recursive=True)
        assert len(ranks) == 2, proc.poll()
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=CLIENT_TIMEOUT, json={
            "model": MODEL_NAME, "prompt": "The quick brown fox", "max_tokens": 4, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 4
        proc.send_signal(signal.SIGTERM)
        proc.wait(DEADLINE)
        gone, alive = psutil.wait_procs(ranks, timeout=DEADLINE)
        assert not alive
        assert "could not tell the tensor-parallel workers to stop" not in proc.stdout.read()  # STOP reached rank 1
    finally:
        if proc.poll() is None:
            proc.kill()
