"""The router's FastAPI app: the replicas' routes, forwarded.

`create_router_app(config)`:
- ``POST /v1/chat/completions``, ``/v1/completions``, ``/generate``: routed by the policy
  on the prompt's text (`keys.routing_key`), among the healthy replicas;
- ``POST /open_session`` goes to the idlest replica, which then gets every ``/generate``
  and ``/close_session`` naming that session (the session's KV lives there);
- ``POST /abort_request`` and ``/flush_cache`` go to every healthy replica;
- ``GET /health``: 200 while at least one replica is healthy, else 503; ``GET /workers``:
  each replica's state; ``GET /metrics``: the router's counters and every replica's
  metrics labelled ``replica="URL"``;
- any other route goes to the idlest healthy replica (``/v1/models``, ``/server_info``,
  ``/tokenize``, ...), so the router answers what a replica answers.

No healthy replica: 503 with Retry-After. With ``api_key`` the router checks the key itself
(`furca.auth`, as a replica does: every route but ``/health`` and ``/metrics``), so a
request without it is refused before it is routed (it neither enters a replica's
prefix tree nor counts in the load) and ``/workers`` does not show the replicas'
addresses to it; the client's Authorization header reaches the replicas unchanged.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from furca.auth import APIKeyMiddleware
from furca.router import metrics as router_metrics
from furca.router.config import RouterConfig
from furca.router.keys import routing_key
from furca.router.policy import make_policy
from furca.router.proxy import (ClientGone, Lease, ReplicaDown, ReplicaRefused, error_response, forward_headers,
                                relay, send)
from furca.router.replicas import Replica, Replicas

MAX_SESSIONS = 1 << 18  # session -> replica entries kept (oldest forgotten first)
ROUTED = ("/v1/chat/completions", "/v1/completions", "/generate")


class Router:
    """The routing state of one app: replicas, policy, sessions."""

    def __init__(self, config: RouterConfig, client: httpx.AsyncClient):
        self.config, self.client = config, client
        self.replicas = Replicas(config, client)
        self.policy = make_policy(config)
        self.sessions: OrderedDict[str, Replica] = OrderedDict()

    def choose(self, path: str, body: Any) -> Replica | None:
        healthy = self.replicas.healthy()
        if not healthy:
            return None
        session = body.get("session_id") if isinstance(body, dict) else None
        if isinstance(session, str) and session in self.sessions and self.sessions[session].healthy:
            return self.sessions[session]
        if path in ROUTED:
            return self.policy.pick(healthy, routing_key(path, body))
        return min(healthy, key=lambda r: (r.load, r.index))

    async def forward(self, request: Request, path: str) -> Response:
        body = await request.body()
        if len(body) > self.config.max_request_bytes:
            return error_response(413, f"the request body is larger than {self.config.max_request_bytes} bytes")
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None  # the replica says what is wrong with it
        headers = forward_headers(request.headers)
        tried: set[int] = set()
        while True:
            replica = self.choose(path, parsed)
            if replica is None or replica.index in tried:
                return error_response(503, "no healthy replica to serve the request", headers={"Retry-After": "5"})
            tried.add(replica.index)
            lease = Lease(replica)
            try:
                upstream = await send(self.client, replica, request, path, body, headers)
            except ReplicaRefused as e:
                lease.release()
                self.replicas.mark_failed(replica, f"connection refused ({e})", refused=True)
                continue  # nothing was sent: another replica may take it
            except ClientGone:
                lease.release()
                return Response(status_code=499)  # nobody reads it
            except (ReplicaDown, httpx.HTTPError) as e:
                lease.release()
                replica.failed += 1
                status = 503 if isinstance(e, ReplicaDown) else 502
                return error_response(status, f"replica {replica.url} failed: {type(e).__name__}: {e}",
                                      headers={"x-furca-replica": replica.url})
            except BaseException:
                lease.release()
                raise
            if path == "/open_session" and upstream.status_code == 200:
                return await self._remember_session(request, upstream, lease)
            if path == "/close_session" and isinstance(parsed, dict):
                self.sessions.pop(str(parsed.get("session_id")), None)
            return await relay(request, upstream, lease)

    async def _remember_session(self, request: Request, upstream: httpx.Response, lease: Lease) -> Response:
        replica = lease.replica
        response = await relay(request, upstream, lease)
        try:
            session = json.loads(response.body)
        except ValueError:
            return response
        if isinstance(session, str):
            self.sessions[session] = replica
            while len(self.sessions) > MAX_SESSIONS:
                self.sessions.popitem(last=False)
        return response

    async def broadcast(self, request: Request, path: str) -> Response:
        """Send to every healthy replica; 200 if any answered 200 (an abort finds its rid on
        one replica only), else the first answer."""
        healthy = self.replicas.healthy()
        if not healthy:
            return error_response(503, "no healthy replica to serve the request", headers={"Retry-After": "5"})
        body, headers = await request.body(), forward_headers(request.headers)

        async def one(r: Replica) -> httpx.Response | None:
            try:
                return await self.client.request(request.method, r.url + path, content=body, headers=headers)
            except httpx.HTTPError:
                return None

        answers = [a for a in await asyncio.gather(*(one(r) for r in healthy)) if a is not None]
        if not answers:
            return error_response(502, f"no replica answered {path}")
        best = next((a for a in answers if a.status_code == 200), answers[0])
        return Response(best.content, status_code=best.status_code,
                        media_type=best.headers.get("content-type"))

    async def metrics(self) -> str:
        async def one(r: Replica) -> tuple[str, str]:
            try:
                resp = await self.client.get(f"{r.url}/metrics", timeout=self.config.health_timeout)
                return r.url, resp.text if resp.status_code == 200 else ""
            except httpx.HTTPError:
                return r.url, ""

        texts = await asyncio.gather(*(one(r) for r in self.replicas.healthy()))
        own = router_metrics.router_metrics([r.describe() for r in self.replicas.all])
        return own + router_metrics.merge(texts)


def create_router_app(config: RouterConfig) -> FastAPI:
    if not config.workers:
        raise ValueError("the router needs at least one worker URL")
    holder: dict[str, Router] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0), limits=limits) as client:
            router = Router(config, client)
            holder["router"] = app.state.router = router
            checks = asyncio.ensure_future(router.replicas.run_checks())
            try:
                yield
            finally:
                checks.cancel()

    app = FastAPI(title="furca router", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    if config.api_key:
        app.add_middleware(APIKeyMiddleware, api_key=config.api_key)

    @app.get("/health")
    async def health():
        if holder["router"].replicas.healthy():
            return Response(status_code=200)
        return error_response(503, "no healthy replica")

    @app.get("/workers")
    async def workers():
        router = holder["router"]
        return JSONResponse({"policy": config.policy, "workers": [r.describe() for r in router.replicas.all]})

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics():
        return PlainTextResponse(await holder["router"].metrics(), media_type="text/plain; version=0.0.4")

    @app.post("/abort_request")
    @app.post("/flush_cache")
    async def broadcast(request: Request):
        return await holder["router"].broadcast(request, request.url.path)

    @app.api_route("/{path:path}", methods=["GET", "POST", "DELETE"])
    async def forward(request: Request, path: str):
        return await holder["router"].forward(request, "/" + path)

    return app
