"""Sessions over the native API, with SGLang's route and field names: ``POST /open_session``
(returns the session id, a JSON string) and ``POST /close_session``; ``/generate`` takes
the id as ``session_id``. A session's calls keep their KV pinned in the radix cache
between them (furca/radix/leases.py, docs/runtime.md "Sessions").

An id that is not open (never opened, closed, or expired: no call within its timeout) is
a 404 naming ``session_id`` with code ``session_not_found``; opening an id already open
is a 400, opening past `MAX_SESSIONS` open a 503. POST only: a cross-site GET must not change state.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response
from pydantic import Field

from furca.radix.leases import SessionError, SessionLimitError
from furca.server import openapi_doc as doc
from furca.server.errors import APIError
from furca.server.protocol_native import Count
from furca.server.request_fields import RequestBody
from furca.server.state import ServerState

router = APIRouter()


class OpenSessionRequest(RequestBody):
    """SGLang's ``OpenSessionReqInput``: ``session_id`` (a fresh one when absent) and
    ``timeout`` (seconds without a call before it expires; the server's --session-ttl
    when absent). ``capacity_of_str_len`` and ``streaming`` are accepted for SGLang's
    clients and unused: furca's sessions do not rebuild prompts server side."""

    session_id: str | None = Field(default=None, min_length=1, max_length=256)
    timeout: float | None = Field(default=None, gt=0, le=7 * 24 * 3600)
    capacity_of_str_len: Count | None = None
    streaming: bool | None = None


class CloseSessionRequest(RequestBody):
    session_id: str = Field(min_length=1, max_length=256)


def session_not_found(e: SessionError) -> APIError:
    return APIError(404, str(e), param="session_id", code="session_not_found")


def check_session(state: ServerState, session_id: str | None) -> None:
    """A `/generate` call of ``session_id``: refresh its lease, or answer 404."""
    if session_id is None:
        return
    try:
        state.require_engine().touch_session(session_id)
    except SessionError as e:
        raise session_not_found(e) from None


@router.post("/open_session", responses=doc.TAKES_BODY)
async def open_session(req: OpenSessionRequest, request: Request) -> str:
    engine = request.app.state.furca.require_engine()
    try:
        return engine.open_session(req.session_id, timeout=req.timeout)
    except SessionLimitError as e:
        raise APIError(503, str(e), code="too_many_sessions", headers={"Retry-After": "5"}) from None
    except SessionError as e:
        raise APIError(400, str(e), param="session_id", code="session_exists") from None


@router.post("/close_session", response_class=Response,
             responses={**doc.NO_BODY, **doc.error_responses(400, 401, 404, 413, 503)})
async def close_session(req: CloseSessionRequest, request: Request):
    engine = request.app.state.furca.require_engine()
    try:
        await asyncio.to_thread(engine.close_session, req.session_id)
    except SessionError as e:
        raise session_not_found(e) from None
    return Response(status_code=200)
