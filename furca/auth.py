"""API-key check (ASGI middleware) for the server and the router: ``Authorization: Bearer
KEY`` (or ``x-api-key: KEY``) on every route except `ALWAYS_PUBLIC` (/health for probes, /metrics for scrapers: counts
and latencies only, no prompt, model path or key) and, with ``public_docs``, the API
docs (`DOCS_PATHS`). A browser's preflight (OPTIONS) passes: it carries no key, and
no route answers it but CORS.

The comparison is constant-time: both sides are hashed (SHA-256 of the raw header bytes
and of the key's UTF-8 bytes) and the digests compared with `hmac.compare_digest`, so
neither the key's content nor its length shows in the timing. Any header value
(missing, empty, ``Bearer`` alone, non-ASCII bytes, another scheme) is just a wrong key:
401 with ``WWW-Authenticate: Bearer``, never an error.

A leaf module (the standard library and starlette's types): the router imports it without
the server's code. The 401 body has the OpenAI error shape ``furca.server.errors`` uses.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send


ALWAYS_PUBLIC = frozenset({"/health", "/metrics"})
DOCS_PATHS = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})


def presented_key(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The key a request presents: the Bearer token, else ``x-api-key``; None: none."""
    found = dict(headers)
    auth = found.get(b"authorization")
    if auth is not None and auth[:7].lower() == b"bearer ":
        return auth[7:].strip()
    return found.get(b"x-api-key")


class APIKeyMiddleware:
    def __init__(self, app: ASGIApp, api_key: str, public_docs: bool = False):
        self.app = app
        self.digest = hashlib.sha256(api_key.encode("utf-8")).digest()
        self.public = ALWAYS_PUBLIC | DOCS_PATHS if public_docs else ALWAYS_PUBLIC

    def _authorized(self, scope: Scope) -> bool:
        key = presented_key(scope.get("headers") or [])
        if key is None:
            return False
        return hmac.compare_digest(hashlib.sha256(key).digest(), self.digest)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.public or scope.get("method") == "OPTIONS":
            await self.app(scope, receive, send)
            return
        if self._authorized(scope):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": {"message": "Incorrect or missing API key: send 'Authorization: Bearer <key>'",
                                     "type": "AuthenticationError", "param": None,
                                     "code": "invalid_api_key"}}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})
