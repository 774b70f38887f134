"""ASGI middleware that guards every route: a request body size limit and the security
headers every answer carries.

`BodyLimitMiddleware`: a body longer than ``max_bytes`` gets 413 (OpenAI's error shape,
``code: "request_too_large"``) before any handler or parser sees it. A declared
``Content-Length`` is checked before a byte is read (the server's HTTP parser holds the
client to it); a body without one (``Transfer-Encoding: chunked``) is read and counted
as it arrives, and refused as soon as it passes the limit, so at most ``max_bytes`` plus
one chunk is ever held. The 413 carries ``Connection: close``: the rest of the body is
never read.

`SecurityHeadersMiddleware`: ``X-Content-Type-Options: nosniff`` (a browser never runs
an answer as anything but its declared type) and ``X-Frame-Options: DENY`` (no page can
frame /docs) on every answer, errors included, unless a handler set them itself.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from furca.server.errors import error_body

SECURITY_HEADERS = ((b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"))


def _content_length(scope: Scope) -> int | None:
    """The declared body length; None when absent, not a number, or beside a
    Transfer-Encoding (which wins over it in HTTP/1.1): the body is counted instead."""
    headers = dict(scope.get("headers") or [])
    if b"transfer-encoding" in headers:
        return None
    try:
        return int(headers[b"content-length"])
    except (KeyError, ValueError):
        return None


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int, on_reject: Callable[[], Any] | None = None):
        self.app, self.max_bytes, self.on_reject = app, max_bytes, on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if length is not None:
            if length > self.max_bytes:
                await self._reject(send, f"the request body is {length} bytes")
                return
            await self.app(scope, receive, send)
            return
        # no declared length: read and count the body before anything parses it
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left: nobody to answer
                return
            body = message.get("body", b"")
            total += len(body)
            if total > self.max_bytes:
                await self._reject(send, f"the request body is more than {self.max_bytes} bytes")
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _reject(self, send: Send, what: str) -> None:
        if self.on_reject is not None:
            self.on_reject()
        body = json.dumps(error_body(413, f"{what}, past this server's limit of {self.max_bytes} bytes "
                                          "(--max-request-bytes)", code="request_too_large")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the whole body once, then the server's own messages (a
    disconnect), so handlers still notice a client that leaves."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                present = {name.lower() for name, _ in headers}
                headers += [h for h in SECURITY_HEADERS if h[0] not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
