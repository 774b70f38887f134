"""Run the app under uvicorn, with a graceful drain on SIGTERM.

SIGTERM (or a first Ctrl+C): stop admitting (new requests get 503, /health 503), let
running requests finish for up to ``shutdown_grace_period`` seconds, abort the rest,
then stop uvicorn, which closes the connections and shuts the engine down; the process
exits with status 0. A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from types import FrameType

import uvicorn

from furca.server.app import create_app
from furca.server.args import ServerArgs
from furca.server.state import ServerState, drain

logger = logging.getLogger("furca.server")


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state: ServerState, grace: float):
        super().__init__(config)
        self.state, self.grace = state, grace
        self.loop: asyncio.AbstractEventLoop | None = None
        self.is_draining = False

    async def startup(self, sockets=None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().startup(sockets=sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
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


def run(args: ServerArgs) -> int:
    configure_logging(args.log_level)
    app = create_app(args)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            timeout_graceful_shutdown=5, access_log=args.log_requests)
    server = DrainingServer(config, app.state.furca, args.shutdown_grace_period)
    server.run()
    return 0
