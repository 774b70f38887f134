"""The replicas behind the router: their state and the health checks that keep it.

A replica starts down and is up once its ``/health`` answers 200. While up it gets new
requests; ``load`` counts the requests the router has in flight there (its running plus
queued ones, as far as this router knows). A check that fails marks it unavailable for new
requests at once; it is declared *down* (``down`` set, its in-flight requests failed with a
503, its prefix tree cleared, since a restarted replica has an empty cache) when a
connection to it is refused (the process is gone) or after ``health_failures`` consecutive
checks without an answer (it hangs). A replica that answers /health with an error (loading,
draining, its engine dead) gets no new requests but keeps its in-flight ones: it ends them
itself. A check that passes again brings it back.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import httpx

from furca.router.config import RouterConfig
from furca.router.prefix_tree import PrefixTree

logger = logging.getLogger("furca.router")


@dataclass(eq=False)
class Replica:
    url: str
    index: int
    tree: PrefixTree
    healthy: bool = False  # gets new requests
    seen_up: bool = False  # its /health has answered 200 at least once
    load: int = 0  # requests in flight through this router
    routed: int = 0  # requests sent here, all time
    failed: int = 0  # requests that ended in a router error (the replica unreachable or down)
    failures: int = 0  # consecutive failed health checks
    last_error: str | None = None
    down: asyncio.Event = field(default_factory=asyncio.Event)  # set: in-flight requests fail

    def describe(self) -> dict:
        return {"url": self.url, "index": self.index, "healthy": self.healthy, "load": self.load,
                "routed": self.routed, "failed": self.failed, "tree_chars": self.tree.size,
                "last_error": self.last_error}


class Replicas:
    """Every replica and the health-check loop (`run_checks`, one asyncio task)."""

    def __init__(self, config: RouterConfig, client: httpx.AsyncClient):
        self.config, self.client = config, client
        self.all = [Replica(url, i, PrefixTree(config.max_tree_chars)) for i, url in enumerate(config.workers)]

    def healthy(self) -> list[Replica]:
        return [r for r in self.all if r.healthy]

    def mark_up(self, replica: Replica) -> None:
        if not replica.healthy:
            logger.info("replica %s is up", replica.url)
        replica.healthy, replica.seen_up, replica.failures, replica.last_error = True, True, 0, None
        replica.down = asyncio.Event() if replica.down.is_set() else replica.down

    def mark_failed(self, replica: Replica, why: str, *, refused: bool = False, answered: bool = False) -> None:
        """One failed check (or a refused connection while forwarding); `answered`: the
        replica answered, with an error status."""
        replica.failures = 0 if answered else replica.failures + 1
        replica.last_error = why
        was_healthy, replica.healthy = replica.healthy, False
        if was_healthy:
            logger.warning("replica %s gets no new requests: %s", replica.url, why)
        if answered or replica.down.is_set():
            return
        if refused or replica.failures >= self.config.health_failures:
            (logger.error if replica.seen_up else logger.debug)(
                "replica %s is down (%s): its in-flight requests fail", replica.url, why)
            replica.tree.clear()
            replica.down.set()

    async def check(self, replica: Replica) -> None:
        try:
            resp = await self.client.get(f"{replica.url}/health", timeout=self.config.health_timeout)
        except httpx.ConnectError as e:
            self.mark_failed(replica, f"connection refused ({e})", refused=True)
            return
        except httpx.HTTPError as e:
            self.mark_failed(replica, f"/health failed: {type(e).__name__}: {e}")
            return
        if resp.status_code == 200:
            self.mark_up(replica)
        else:
            self.mark_failed(replica, f"/health answered {resp.status_code}: {resp.text[:200]}", answered=True)

    async def run_checks(self) -> None:
        while True:
            await asyncio.gather(*(self.check(r) for r in self.all))
            await asyncio.sleep(self.config.health_interval)
