"""Running the router: `furca router --worker URL ...` and `furca serve --dp N`.

`run_router(config, host, port)`: the router app under uvicorn; SIGTERM stops it (uvicorn
lets open requests finish for a few seconds).

`serve_dp(replica_argv, dp, config, host, port)`: N replicas, each a full ``furca serve``
(``python -m furca.server`` with `replica_argv`, listening on a free port of 127.0.0.1), and
the router in this process on the public address. The replicas die with this process
(SIGTERM forwarded; on Linux also ``PR_SET_PDEATHSIG``, so a killed router leaves none
behind). A replica that exits is logged with its status; the router stops sending it
requests through its health checks. When every replica has exited the router exits with
status 1 (nothing left to serve; e.g. the model failed to load).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import subprocess
import sys

import uvicorn

from furca.errors import FurcaError
from furca.router.app import create_router_app
from furca.router.config import RouterConfig

logger = logging.getLogger("furca.router")
REPLICA_STOP_S = 60.0  # seconds replicas get to drain on SIGTERM before they are killed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_port(host: str, port: int) -> None:
    """FurcaError (one line) if `host`:`port` is taken; the router checks before any replica
    starts loading (furca.server.launch has the full check, but importing it loads torch)."""
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as e:
        raise FurcaError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def _die_with_parent() -> None:  # runs in the child between fork and exec
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class _RouterServer(uvicorn.Server):
    """uvicorn that also watches the replica processes it fronts (when it has any)."""

    def __init__(self, config: uvicorn.Config, procs: list[subprocess.Popen], urls: list[str]):
        super().__init__(config)
        self.procs, self.urls, self.exit_code = procs, urls, 0
        self._watch: asyncio.Future | None = None  # the replica watcher's task (held: a task nobody holds may be collected)

    async def startup(self, sockets=None) -> None:
        if self.procs:
            self._watch = asyncio.ensure_future(self._watch_replicas())
        await super().startup(sockets=sockets)

    async def shutdown(self, sockets=None) -> None:
        if self._watch is not None:
            self._watch.cancel()
        await super().shutdown(sockets=sockets)

    def handle_exit(self, _sig: int, _frame) -> None:
        """Stop serving; unlike uvicorn's own handler, do not re-raise the signal once
        stopped, so `serve_dp` still stops its replicas and the exit status is ours."""
        self.force_exit = self.should_exit
        self.should_exit = True

    async def _watch_replicas(self) -> None:
        reported: set[int] = set()
        while True:
            for i, proc in enumerate(self.procs):
                if i not in reported and proc.poll() is not None:
                    reported.add(i)
                    logger.error("replica %d (%s) exited with status %s", i, self.urls[i], proc.returncode)
            if len(reported) == len(self.procs):
                logger.error("every replica has exited: the router stops")
                self.exit_code, self.should_exit = 1, True
                return
            await asyncio.sleep(0.5)


def _serve(config: RouterConfig, host: str, port: int, log_level: str,
           procs: list[subprocess.Popen] | None = None) -> int:
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    check_port(host, port)
    app = create_router_app(config)
    server = _RouterServer(uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                                          timeout_graceful_shutdown=5), procs or [], list(config.workers))
    server.run()
    return server.exit_code


def run_router(config: RouterConfig, host: str, port: int, log_level: str = "info") -> int:
    if not config.workers:
        raise FurcaError("furca router needs at least one --worker URL")
    return _serve(config, host, port, log_level)


def serve_dp(replica_argv: list[str], dp: int, config: RouterConfig, host: str, port: int,
             log_level: str = "info") -> int:
    """Start `dp` replicas (``python -m furca.server *replica_argv --host 127.0.0.1 --port P``)
    and the router in front of them; return the router's exit status once every replica
    has stopped."""
    check_port(host, port)  # before any replica starts loading
    ports = [_free_port() for _ in range(dp)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    config = RouterConfig(**{**config.__dict__, "workers": tuple(urls)})
    procs = []
    preexec = _die_with_parent if sys.platform.startswith("linux") else None
    try:
        for p in ports:
            cmd = [sys.executable, "-m", "furca.server", *replica_argv, "--host", "127.0.0.1", "--port", str(p)]
            procs.append(subprocess.Popen(cmd, preexec_fn=preexec))
        logger.info("started %d replicas: %s", dp, ", ".join(urls))
        return _serve(config, host, port, log_level, procs)
    finally:
        _stop(procs)


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(REPLICA_STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
