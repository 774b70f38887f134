"""Forwarding one request to one replica, JSON or SSE, and failing it cleanly.

The request's body and headers go through unchanged (hop-by-hop headers aside), and so
does the replica's answer: its status, its body, and an SSE stream event by event (whole
events only, so a stream cut by a dead replica never ends in half an event). The router
adds ``x-furca-replica`` (the replica's URL) to every answer it forwards.

Failures are the router's own answers, OpenAI-shaped (``{"error": {...}}``):
- the replica refuses the connection: it is marked down and the request goes to another
  healthy replica (nothing was sent, so nothing runs twice);
- the client goes away while a JSON answer is awaited: the request to the replica is
  closed, so the replica aborts it (an SSE stream: Starlette notices and closes it);
- the replica drops the connection or is declared down while the request is in flight:
  502 (the connection broke) or 503 (declared down); a stream already under way ends with
  that error as its last event, then ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Awaitable, TypeVar

import httpx
from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from furca.router.replicas import Replica

T = TypeVar("T")

# not forwarded: they describe one connection, not the message (RFC 9110 7.6.1), or httpx sets them
_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
        "transfer-encoding", "upgrade", "host", "content-length"}
_TYPES = {502: "BadGatewayError", 503: "ServiceUnavailableError", 413: "RequestTooLarge"}


class ReplicaDown(Exception):
    """The replica was declared down while a request was in flight there."""


class ReplicaRefused(Exception):
    """The replica refused the connection: the request was not sent."""


class ClientGone(Exception):
    """The client disconnected before the answer was ready."""


class Lease:
    """One request's share of a replica's ``load``, from routing to the end of its answer
    (`release` is idempotent: every way out calls it)."""

    def __init__(self, replica: Replica):
        self.replica, self.done = replica, False
        replica.load += 1
        replica.routed += 1

    def release(self) -> None:
        if not self.done:
            self.done = True
            self.replica.load -= 1


def error_body(status: int, message: str, code: Any = None) -> dict[str, Any]:
    """The router's error answer, in the shape of furca.server's (the router does not
    import the server package, whose import loads the runtime)."""
    return {"error": {"message": message, "type": _TYPES.get(status, "Error"), "param": None,
                      "code": code if code is not None else status}}


def error_response(status: int, message: str, code: Any = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, code), status_code=status, headers=headers)


def forward_headers(headers: Any) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _HOP}


async def _disconnected(request: Request) -> None:
    """Return when the client disconnects (the body must have been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def until_down(replica: Replica, awaitable: Awaitable[T], request: Request | None = None) -> T:
    """Await `awaitable`, or raise ReplicaDown as soon as `replica` is declared down (or
    ClientGone as soon as `request`'s client disconnects, when given)."""
    task = asyncio.ensure_future(awaitable)
    down = asyncio.ensure_future(replica.down.wait())
    gone = asyncio.ensure_future(_disconnected(request)) if request is not None else None
    try:
        done, _ = await asyncio.wait({task, down, *([gone] if gone else [])}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (down, gone):
            if t is not None:
                t.cancel()
        if not task.done():
            task.cancel()
    if task in done:
        return task.result()
    if down in done:
        raise ReplicaDown
    raise ClientGone


async def send(client: httpx.AsyncClient, replica: Replica, request: Request, path: str, body: bytes,
               headers: dict[str, str]) -> httpx.Response:
    """Send `request` on to `replica` (stream mode: the answer's body is read later);
    ReplicaRefused if the connection was refused, ClientGone, ReplicaDown or
    httpx.HTTPError otherwise."""
    upstream = client.build_request(request.method, replica.url + path, content=body, headers=headers,
                                    params=request.query_params)
    try:
        return await until_down(replica, client.send(upstream, stream=True), request)
    except httpx.ConnectError as e:
        raise ReplicaRefused(str(e)) from e


def _failure(replica: Replica, e: BaseException) -> tuple[int, str]:
    replica.failed += 1
    if isinstance(e, ReplicaDown):
        return 503, f"replica {replica.url} went down while the request was in flight ({replica.last_error})"
    return 502, f"replica {replica.url} failed while the request was in flight: {type(e).__name__}: {e}"


async def relay(request: Request, upstream: httpx.Response, lease: Lease) -> Response:
    """The replica's answer as the router's; the lease is released once the answer is done
    (read whole, streamed to the end, failed, or the client gone)."""
    replica = lease.replica
    headers = forward_headers(upstream.headers)
    headers.pop("content-encoding", None)  # httpx decodes the body
    headers["x-furca-replica"] = replica.url
    if not upstream.headers.get("content-type", "").startswith("text/event-stream"):
        try:
            body = await until_down(replica, upstream.aread(), request)
        except ClientGone:
            return Response(status_code=499)  # nobody reads it; the replica saw the connection close
        except (ReplicaDown, httpx.HTTPError) as e:
            status, message = _failure(replica, e)
            return error_response(status, message, headers={"x-furca-replica": replica.url})
        finally:
            await upstream.aclose()
            lease.release()
        return Response(body, status_code=upstream.status_code, headers=headers)
    return StreamingResponse(_events(lease, upstream), status_code=upstream.status_code, headers=headers)


async def _events(lease: Lease, upstream: httpx.Response) -> AsyncIterator[bytes]:
    replica = lease.replica
    buffer = b""
    chunks = upstream.aiter_bytes()
    try:
        while True:
            try:
                chunk = await until_down(replica, chunks.__anext__())
            except StopAsyncIteration:
                break
            buffer += chunk
            cut = buffer.rfind(b"\n\n")
            if cut >= 0:
                yield buffer[:cut + 2]
                buffer = buffer[cut + 2:]
        if buffer:
            yield buffer
    except (ReplicaDown, httpx.HTTPError) as e:
        status, message = _failure(replica, e)
        yield f"data: {json.dumps(error_body(status, message))}\n\ndata: [DONE]\n\n".encode()
    finally:
        await upstream.aclose()
        lease.release()
