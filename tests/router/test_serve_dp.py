"""`furca serve --dp 2` on a tiny random Llama: two replica processes behind the router on
the public port; a replica that dies is reported and the other keeps serving; SIGTERM
stops every process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import CLIENT_TIMEOUT, wait_until
from tests.server.conftest import REPO, free_port, save_tiny_llama


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("dp-tiny") / "tiny-llama")


def _generate(url: str) -> httpx.Response:
    return httpx.post(f"{url}/generate", timeout=CLIENT_TIMEOUT,
                      json={"input_ids": [5, 6, 7, 8], "sampling_params": {"max_new_tokens": 2}})


def test_serve_dp_runs_replicas_behind_the_router_and_sigterm_stops_all(tiny_dir):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"furca-dp-{port}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "furca.server", str(tiny_dir), "--dp", "2", "--port", str(port),
                                 "--max-total-tokens", "2048", "--log-level", "warning"],
                                cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            def up():
                assert proc.poll() is None, log_path.read_text()[-3000:]
                try:
                    return [w for w in httpx.get(f"{url}/workers", timeout=30).json()["workers"] if w["healthy"]]
                except httpx.HTTPError:
                    return []

            wait_until(lambda: len(up()) == 2, "both replicas healthy behind the router", interval=0.2)
            replicas = psutil.Process(proc.pid).children()
            assert len(replicas) == 2
            assert _generate(url).status_code == 200

            ports = {int(w["url"].rsplit(":", 1)[1]): w["url"] for w in up()}
            victim = next(p for p in replicas if any(c.laddr.port in ports for c in p.net_connections("inet")
                                                      if c.status == psutil.CONN_LISTEN))
            victim.send_signal(signal.SIGKILL)
            victim.wait(60)
            wait_until(lambda: "exited with status -9" in log_path.read_text(), "the dead replica reported")
            wait_until(lambda: len(up()) == 1, "the dead replica marked down", interval=0.2)
            answer = _generate(url)
            assert answer.status_code == 200, answer.text

            proc.send_signal(signal.SIGTERM)
            assert proc.wait(CLIENT_TIMEOUT) == 0, log_path.read_text()[-3000:]
            survivors = [p for p in replicas if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
            assert survivors == []
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
