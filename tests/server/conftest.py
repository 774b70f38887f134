"""Live-server fixtures: `furca serve` in a subprocess on a free port, on the default model.

One main server is shared by the whole session (starting one costs ~20 s on 2 cores);
tests that need other options (queue limits, SIGTERM) start their own with
`ServerProcess`. Outputs are kept short (max_tokens of a few tokens) everywhere.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import CLIENT_TIMEOUT, READY_TIMEOUT

API_KEY = "sk-furca-test"
MODEL_NAME = "furca-test-model"
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """``furca serve`` in a subprocess; ``url``, ``wait_ready()``, ``stop()``."""

    def __init__(self, *extra: str, api_key: str | None = API_KEY, max_total_tokens: int = 16384):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        cmd = [sys.executable, "-m", "furca.server", "--port", str(self.port), "--served-model-name", MODEL_NAME,
               "--max-total-tokens", str(max_total_tokens), "--log-level", "warning", *extra]
        if api_key:
            cmd += ["--api-key", api_key]
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"furca-serve-{self.port}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.read_log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=30).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"server not ready after {timeout} s:\n{self.read_log()}")

    def read_log(self) -> str:
        self.log.flush()
        return self.log_path.read_text()[-5000:]

    def stop(self, timeout: float = 120.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    srv = ServerProcess()
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def http(server):
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=CLIENT_TIMEOUT) as c:
        yield c


@pytest.fixture(scope="session")
def client(server):
    import openai

    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.api_key, max_retries=0, timeout=CLIENT_TIMEOUT)


def wait_idle(http: httpx.Client, timeout: float = 120.0) -> dict:
    """Poll /server_info until nothing runs or waits and every KV slot is free or
    evictable (no lock held); return the last info."""
    deadline = time.monotonic() + timeout
    while True:
        info = http.get("/server_info").json()
        idle = (info["num_running"] == 0 and info["num_waiting"] == 0 and info["locked"] == 0
                and info["free"] + info["evictable"] == info["capacity"]
                and info["server"]["num_inflight"] == 0)
        if idle or time.monotonic() > deadline:
            return info
        time.sleep(0.1)


def assert_idle(http: httpx.Client, timeout: float = 120.0) -> dict:
    info = wait_idle(http, timeout)
    assert info["num_running"] == 0 and info["num_waiting"] == 0, info
    assert info["locked"] == 0, info
    assert info["free"] + info["evictable"] == info["capacity"], info
    assert info["server"]["num_inflight"] == 0 and info["server"]["num_active_rids"] == 0, info
    return info


def _runtime_fixtures():
    """tests/runtime/conftest.py as a module: its tiny-model builders."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "runtime" / "conftest.py"
    spec = importlib.util.spec_from_file_location("furca_runtime_test_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def save_tiny_llama(out: Path) -> Path:
    """A tiny random Llama with a real BPE tokenizer saved as an HF directory at `out`."""
    fx = _runtime_fixtures()
    tok = fx.build_tiny_hf_tokenizer()
    fx.build_tiny_hf_model("llama", len(tok), seed=1).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A tiny random Llama with a real BPE tokenizer, loaded once per test module (for
    in-process servers over a real `Engine`)."""
    from furca.runtime.loader import load_model

    out = save_tiny_llama(tmp_path_factory.mktemp("server-tiny") / "tiny-llama")
    return load_model(out, dtype="float32", device="cpu")
