"""Server-sent events and client disconnects.

A client that goes away must abort its request. `SSEResponse` streams an async
iterator while listening for ``http.disconnect``; whichever ends first cancels the
other, and the iterator is always closed, so the generator's ``finally`` (which
aborts the engine request) runs at once, not at garbage collection.
`cancel_on_disconnect` does the same for a non-streaming handler's coroutine.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Awaitable, Callable, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from furca.server.jsonout import json_text

T = TypeVar("T")


def sse(obj: Any) -> str:
    return f"data: {json_text(obj, ensure_ascii=False)}\n\n"


SSE_DONE = "data: [DONE]\n\n"


class ClientDisconnected(Exception):
    """The client closed the connection before the response was ready."""


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _race(main: asyncio.Task, receive: Receive) -> bool:
    """Wait for `main` or a disconnect; cancel the loser. True if the client left first."""
    watcher = asyncio.ensure_future(_wait_for_disconnect(receive))
    try:
        await asyncio.wait({main, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the server itself is cancelling us
        main.cancel()
        raise
    finally:
        if not watcher.done():
            watcher.cancel()
    if main.done():
        return False
    main.cancel()
    try:
        await main
    except (asyncio.CancelledError, Exception):  # noqa: BLE001 - the client is gone anyway
        pass
    return True


class SSEResponse(Response):
    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[str], status_code: int = 200, headers: dict | None = None,
                 on_close: Callable[[], Awaitable[None]] | None = None):
        self.body_iterator = content
        self.on_close = on_close
        self.status_code = status_code
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})})

    async def _stream(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for chunk in self.body_iterator:
            await send({"type": "http.response.body", "body": chunk.encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.ensure_future(self._stream(send))
        try:
            await _race(task, receive)
            if task.done() and not task.cancelled() and task.exception() is not None:
                exc = task.exception()
                if not isinstance(exc, OSError):  # OSError: the socket closed under us
                    raise exc
        finally:
            try:
                aclose = getattr(self.body_iterator, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                if self.on_close is not None:  # runs even if the iterator never started
                    await self.on_close()


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Run `work`; if the client disconnects first, cancel it (which aborts its engine
    requests) and raise ClientDisconnected."""
    task = asyncio.ensure_future(work)
    if await _race(task, request.receive):
        raise ClientDisconnected()
    return task.result()
