"""`create_app(engine_or_args)`: the FastAPI application.

Given an `Engine`, the app serves it at once (the caller owns it). Given
`ServerArgs`, the app starts listening immediately and loads the model in a worker
thread; until the model is loaded and has run one warm-up generation, every route
but /health (503) and /metrics answers 503. The app shuts the engine down when it
stops (only an engine it created).

Once serving, the app registers `Metrics.observe_step` as the engine's step observer
(removed when the app stops). Middleware, outermost first: CORS (with
``allowed_origins``; Starlette's CORSMiddleware wraps everything, the API-key check
included, so a browser's preflight is answered and error answers, 401 too, carry the
CORS headers the browser needs to read them), the security headers, the API-key check
(with ``api_key``; the docs stay behind it unless ``public_docs``), the body size limit
(``max_request_bytes``, 413), then the routes (protections.py, auth.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import PlainTextResponse, Response

import furca
from furca.auth import APIKeyMiddleware
from furca.errors import FurcaError
from furca.server import errors, openapi_doc
from furca.server.args import ServerArgs
from furca.server.jsonout import FiniteJSONResponse
from furca.server.metrics import CONTENT_TYPE_LATEST, Metrics
from furca.server.native_api import router as native_router
from furca.server.openai_api import router as openai_router
from furca.server.sessions_api import router as sessions_router
from furca.server.protections import BodyLimitMiddleware, SecurityHeadersMiddleware
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
        gc.collect()  # the model, tokenizer and grammar tables live as long as the process: full
        gc.freeze()   # collections skip them (else 0.1-0.6 s pauses, GIL held; bench/server_fairness.py)
        _observe_steps(state)
        state.ready = True
        logger.info("furca serving %s (context %d, %d KV slots)", state.model_name, engine.context_length,
                    engine.capacity)
    except Exception as e:  # noqa: BLE001 - /health reports it (`furca serve` exits)
        state.load_error = e
        if isinstance(e, FurcaError):
            logger.error("the model failed to load: %s: %s", type(e).__name__, e)
        else:
            logger.exception("the model failed to load")


def _observe_steps(state: ServerState) -> None:
    """Feed the per-step metrics from the engine (an engine without the seam: none)."""
    add = getattr(state.engine, "add_step_observer", None)
    if add is not None:
        state.step_observer = state.metrics.observe_step  # one bound method: removed by identity
        add(state.step_observer)


def _stop_observing(state: ServerState) -> None:
    if state.step_observer is not None and state.engine is not None:
        state.engine.remove_step_observer(state.step_observer)
        state.step_observer = None


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
            _observe_steps(state)
            state.ready = True
        try:
            yield
        finally:
            state.draining = True
            if loader is not None:
                with contextlib.suppress(BaseException):
                    await loader
            _stop_observing(state)
            if owns_engine and state.engine is not None:
                await asyncio.to_thread(state.engine.shutdown)

    app = FastAPI(title="furca", version=furca.__version__, lifespan=lifespan,
                  default_response_class=FiniteJSONResponse,  # logprobs may be -inf
                  description="OpenAI-compatible and SGLang-native API over the furca runtime")
    app.state.furca = state
    errors.install(app)
    openapi_doc.install(app)  # the document as the server answers (no 422s)
    app.include_router(openai_router)
    app.include_router(native_router)
    app.include_router(sessions_router)

    @app.get("/metrics", include_in_schema=True, response_class=PlainTextResponse)
    async def metrics(request: Request):
        if state.ready:
            info = await asyncio.to_thread(state.engine.get_server_info)
            state.metrics.update_from_engine(info)
        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    # middleware, innermost first: the body limit sees only requests that passed the key
    # check; the security headers go on every answer (401 and 413 too); CORS wraps all
    app.add_middleware(BodyLimitMiddleware, max_bytes=args.max_request_bytes,
                       on_reject=state.metrics.rejected.labels(status="413").inc)
    if args.api_key:
        app.add_middleware(APIKeyMiddleware, api_key=args.api_key, public_docs=args.public_docs)
    app.add_middleware(SecurityHeadersMiddleware)
    if args.allowed_origins:  # added last: the outermost layer, around the key check
        app.add_middleware(CORSMiddleware, allow_origins=list(args.allowed_origins),
                           allow_methods=list(args.allowed_methods), allow_headers=list(args.allowed_headers),
                           allow_credentials=args.allow_credentials)
    return app
