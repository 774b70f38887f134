"""`create_app(engine_or_args)`: the FastAPI application.

Given an `Engine`, the app serves it at once (the caller owns it). Given
`ServerArgs`, the app starts listening immediately and loads the model in a worker
thread; until the model is loaded and has run one warm-up generation, every route
but /health (503) and /metrics answers 503. The app shuts the engine down when it
stops (only an engine it created).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

import furca
from furca.server import errors
from furca.server.args import ServerArgs
from furca.server.auth import APIKeyMiddleware
from furca.server.metrics import CONTENT_TYPE_LATEST, Metrics
from furca.server.native_api import router as native_router
from furca.server.openai_api import router as openai_router
from furca.server.state import ServerState

logger = logging.getLogger("furca.server")


def _load_engine(args: ServerArgs) -> Any:
    from furca.runtime.engine import Engine

    return Engine(args.model, **args.engine_kwargs())


def _warm_up(engine: Any) -> None:
    engine.generate(input_ids=[engine.tokenizer.eos_token_ids[0]],
                    sampling_params={"max_new_tokens": 2, "temperature": 0.0})


async def _start(state: ServerState, args: ServerArgs) -> None:
    try:
        engine = await asyncio.to_thread(_load_engine, args)
        await asyncio.to_thread(_warm_up, engine)
        await asyncio.to_thread(state.attach, engine)
        state.ready = True
        logger.info("furca serving %s (context %d, %d KV slots)", state.model_name, engine.context_length,
                    engine.capacity)
    except Exception as e:  # noqa: BLE001 - /health reports it
        state.load_error = e
        logger.exception("the model failed to load")


def create_app(engine_or_args: Any = None, *, args: ServerArgs | None = None) -> FastAPI:
    """``engine_or_args``: an `Engine` (served as is; ``args`` sets the HTTP options) or
    `ServerArgs` (the app loads the model itself); None: the default model."""
    owns_engine = not hasattr(engine_or_args, "async_generate")
    if owns_engine:
        args = engine_or_args or args or ServerArgs()
    args = args or ServerArgs()
    state = ServerState(args, Metrics())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        loader = None
        if owns_engine:
            loader = asyncio.create_task(_start(state, args))
        else:
            state.attach(engine_or_args)
            state.ready = True
        try:
            yield
        finally:
            state.draining = True
            if loader is not None:
                with contextlib.suppress(BaseException):
                    await loader
            if owns_engine and state.engine is not None:
                await asyncio.to_thread(state.engine.shutdown)

    app = FastAPI(title="furca", version=furca.__version__, lifespan=lifespan,
                  description="OpenAI-compatible and SGLang-native API over the furca runtime")
    app.state.furca = state
    errors.install(app)
    app.include_router(openai_router)
    app.include_router(native_router)

    @app.get("/metrics", include_in_schema=True)
    async def metrics(request: Request):
        if state.ready:
            info = await asyncio.to_thread(state.engine.get_server_info)
            state.metrics.update_from_engine(info)
        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    if args.api_key:
        app.add_middleware(APIKeyMiddleware, api_key=args.api_key)
    return app
