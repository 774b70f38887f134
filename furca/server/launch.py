"""Run the app under uvicorn, with a graceful drain on SIGTERM.

SIGTERM (or a first Ctrl+C): stop admitting (new requests get 503, /health 503), let
running requests finish for up to ``shutdown_grace_period`` seconds, abort the rest,
then stop uvicorn, which closes the connections and shuts the engine down; the process
exits with status 0. A second signal exits at once.

A server that cannot start exits: if the model fails to load (a missing path, an
unsupported architecture, an engine option the engine rejects only once it knows the
model and the device, such as a context length past the model's), the server stops and
`run` raises that error: ``furca serve`` prints it as one line on stderr and exits with
status 1. An address it cannot listen on (a port in use) is found before the model
starts loading, the same way.

A server whose engine dies (its scheduler thread ended on an error that may have
corrupted shared state; one request's own failure never does that) answers every request
and /health with 503 "the engine died: <cause>", logs one line with the cause and exits
with status ``EXIT_ENGINE_DIED`` (70) within a second, so a supervisor restarts it; a
SIGTERM while it is dead exits with that status too.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from types import FrameType

import uvicorn

from furca.errors import FurcaError
from furca.server.app import create_app
from furca.server.args import ServerArgs
from furca.server.state import ServerState, drain

logger = logging.getLogger("furca.server")

EXIT_ENGINE_DIED = 70  # sysexits' EX_SOFTWARE: the engine's scheduler died (a bug or a device fault)
DEATH_POLL_S = 0.2  # how often the server checks that its engine is alive


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state: ServerState, grace: float):
        super().__init__(config)
        self.state, self.grace = state, grace
        self.loop: asyncio.AbstractEventLoop | None = None
        self.is_draining = False

    async def startup(self, sockets=None) -> None:
        self.loop = asyncio.get_running_loop()
        self._load_watch = asyncio.ensure_future(self._exit_if_load_fails())
        self._death_watch = asyncio.ensure_future(self._exit_if_engine_dies())
        await super().startup(sockets=sockets)

    async def _exit_if_load_fails(self) -> None:
        while not self.state.ready and self.state.load_error is None:
            await asyncio.sleep(0.05)
        if self.state.load_error is not None:
            self.should_exit = True

    async def _exit_if_engine_dies(self) -> None:
        """A dead engine serves nothing: say why in one line and stop (`run` returns
        EXIT_ENGINE_DIED), so a supervisor restarts the server."""
        while self.state.engine_death is None:
            await asyncio.sleep(DEATH_POLL_S)
        logger.error("the engine died (%s): furca serve exits with status %d", self.state.engine_death,
                     EXIT_ENGINE_DIED)
        self.should_exit = True

    async def shutdown(self, sockets=None) -> None:
        self._load_watch.cancel()
        self._death_watch.cancel()
        await super().shutdown(sockets=sockets)

    def handle_exit(self, sig: int, _frame: FrameType | None) -> None:
        if self.is_draining or self.loop is None:
            self.force_exit = self.is_draining
            self.should_exit = True
            return
        self.is_draining = True
        logger.info("received %s: draining", signal.Signals(sig).name)
        self.loop.call_soon_threadsafe(self._begin_drain)

    def _begin_drain(self) -> None:
        async def run() -> None:
            try:
                await drain(self.state, self.grace)
            finally:
                self.should_exit = True

        self._drain_task = asyncio.ensure_future(run())


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def check_listen(host: str, port: int) -> None:
    """Raise FurcaError (one line) if `host`:`port` cannot be listened on, trying every
    address the host resolves to as the server will; port 0 (any free one) always can."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as e:
        raise FurcaError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as e:
                raise FurcaError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def run(args: ServerArgs) -> int:
    configure_logging(args.log_level)
    check_listen(args.host, args.port)  # before the model loads: a port in use fails at once
    app = create_app(args)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            timeout_graceful_shutdown=5, access_log=args.log_requests)
    server = DrainingServer(config, app.state.furca, args.shutdown_grace_period)
    server.run()
    error = server.state.load_error
    if isinstance(error, FurcaError):
        raise error
    if error is not None:
        raise FurcaError(f"the model failed to load: {error!r}") from error
    if server.state.engine_death is not None:  # whether it exited on its own or on SIGTERM
        return EXIT_ENGINE_DIED
    return 0
