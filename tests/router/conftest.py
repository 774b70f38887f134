"""Router fixtures: the router as a subprocess (`furca router`), in front of replicas
started as `furca serve` subprocesses (tests/server/conftest.py's `ServerProcess`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import wait_until
from tests.server.conftest import REPO, free_port


class RouterProcess:
    """``furca router --worker URL ... [--api-key KEY]`` in a subprocess; ``url``,
    ``wait_healthy(n)``, ``stop()``."""

    def __init__(self, workers: list[str], *extra: str, api_key: str | None = None):
        self.port = free_port()
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "furca.cli", "router", "--port", str(self.port), "--log-level", "warning",
               "--health-interval", "0.5", *extra]
        if api_key:
            cmd += ["--api-key", api_key]
        for w in workers:
            cmd += ["--worker", w]
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"furca-router-{self.port}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)

    def workers(self) -> list[dict]:
        return httpx.get(f"{self.url}/workers", headers=self.headers, timeout=30).json()["workers"]

    def wait_healthy(self, count: int) -> None:
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"router exited with {self.proc.returncode}:\n{self.read_log()}")
            try:
                return sum(w["healthy"] for w in self.workers()) == count
            except httpx.HTTPError:
                return False

        wait_until(ready, f"{count} healthy replicas behind the router", interval=0.2)

    def read_log(self) -> str:
        self.log.flush()
        return self.log_path.read_text()[-5000:]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode
