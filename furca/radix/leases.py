"""Sessions and their leases: a running program pins its KV in the radix tree between
its own calls.

A session (``open``) is a lease holder with a TTL. Each request of the session that
finishes moves the session's pin to the tree node ending its prompt + output (``pin``),
so the conversation so far (and, for forks, their shared prefix: an ancestor of every
branch) stays locked in the tree, never evicted, until the next call extends it. The pin
goes when the session is closed (``close``), when its TTL passes without a call
(``expire``: a crashed client cannot pin memory forever), or when the pool cannot
otherwise make progress (``shed``: a request that cannot run at all outranks a pin).

Pinned tokens (distinct tokens on the pinned paths) never exceed ``share`` of the pool:
a pin that would pass it keeps the session's previous pin instead and is counted as
refused (the request itself runs as usual).

Threads: ``open``, ``touch`` and the read-only views run on any thread (a lock guards the
session table); everything that locks or unlocks tree nodes (``pin``, ``close``,
``expire``, ``shed``, ``drop_pins``) runs on the scheduler thread only, like the tree.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from furca.errors import InvalidRequestError
from furca.radix.radix_cache import Node, RadixCache


MAX_SESSIONS = 65536  # open at once: each is a few hundred bytes, a pin is bounded by the share


class SessionError(InvalidRequestError):
    """A session id that is not open: never opened, closed, or expired (its TTL passed
    without a call), or one that cannot be opened. ``param`` is ``"session_id"``."""

    param = "session_id"


class SessionLimitError(SessionError):
    """`MAX_SESSIONS` sessions are open already."""


@dataclass(eq=False)
class Lease:
    """One session: its TTL (seconds), the monotonic time it expires at, and the tree node
    it pins (None: nothing pinned yet, or the pin was shed)."""

    session_id: str
    ttl: float
    deadline: float
    node: Node | None = None
    pins_refused: int = 0


def _check_ttl(ttl: Any) -> float:
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not (0 < ttl < float("inf")):
        raise SessionError(f"timeout must be a number of seconds > 0, got {ttl!r}")
    return float(ttl)


class LeaseTable:
    """The sessions of one engine over ``tree`` (a pool of ``capacity`` tokens): at most
    ``share`` of it pinned, each lease living ``ttl`` seconds after its last call."""

    def __init__(self, tree: RadixCache, capacity: int, share: float, ttl: float,
                 clock: Callable[[], float] = time.monotonic):
        self.tree = tree
        self.limit = int(share * capacity)  # most pinned tokens
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, Lease] = {}
        # no lease expires before this (a lower bound: a call only moves a deadline later),
        # so `expire`, called every scheduler step, scans the table only when one may have
        self._earliest = float("inf")
        self.stats = {"sessions_opened": 0, "sessions_closed": 0, "sessions_expired": 0,
                      "pins_refused": 0, "pins_shed": 0}

    # -- any thread ------------------------------------------------------------------------

    def open(self, session_id: str | None = None, ttl: float | None = None) -> str:
        """Open a session; returns its id (a fresh one when ``session_id`` is None).
        Raises `SessionError` for an id already open or a bad ``ttl``."""
        ttl = self.ttl if ttl is None else _check_ttl(ttl)
        if session_id is not None and (not isinstance(session_id, str) or not session_id):
            raise SessionError(f"session_id must be a non-empty string, got {session_id!r}")
        sid = session_id or uuid.uuid4().hex
        with self._lock:
            if sid in self._sessions:
                raise SessionError(f"session {sid!r} is already open")
            if len(self._sessions) >= MAX_SESSIONS:
                raise SessionLimitError(f"{MAX_SESSIONS} sessions are open; close one (or let one expire) first")
            lease = self._sessions[sid] = Lease(sid, ttl, self.clock() + ttl)
            self._earliest = min(self._earliest, lease.deadline)
            self.stats["sessions_opened"] += 1
        return sid

    def touch(self, session_id: str) -> None:
        """A call of the session: refresh its TTL. Raises `SessionError` when it is not open
        (an expired one not yet reaped counts as expired)."""
        now = self.clock()
        with self._lock:
            lease = self._sessions.get(session_id)
            if lease is None or lease.deadline <= now:
                raise SessionError(self._unknown(session_id, lease))
            lease.deadline = now + lease.ttl

    def _unknown(self, session_id: str, lease: Lease | None) -> str:
        why = "expired (no call within its timeout)" if lease is not None else "not open (never opened, closed or expired)"
        return f"session_id {session_id!r} is {why}"

    def info(self) -> dict[str, Any]:
        """Open sessions, the pin limit, and the counters."""
        with self._lock:
            num = len(self._sessions)
        return {"open": num, "pinned_limit": self.limit, **self.stats}

    def next_deadline_in(self) -> float | None:
        """Seconds until the earliest lease expires (>= 0), or None without sessions."""
        with self._lock:
            if not self._sessions:
                return None
            return max(min(s.deadline for s in self._sessions.values()) - self.clock(), 0.0)

    # -- scheduler thread ------------------------------------------------------------------

    def pinned_tokens(self) -> int:
        """Distinct tokens on the paths of every pinned node."""
        with self._lock:
            nodes = [s.node for s in self._sessions.values() if s.node is not None]
        return self._distinct(nodes)

    @staticmethod
    def _distinct(nodes: Sequence[Node]) -> int:
        seen: set[int] = set()
        total = 0
        for node in nodes:
            while node.parent is not None and id(node) not in seen:
                seen.add(id(node))
                total += len(node.key)
                node = node.parent
        return total

    def pin(self, session_id: str, token_ids: Sequence[int]) -> dict[str, Any] | None:
        """Move the session's pin to the node ending ``token_ids`` (cached in the tree just
        before). Returns the session's ``meta_info`` entries (``session_id``,
        ``pinned_tokens``: the length of the path it pins, ``pin_refused``: whether this
        pin would have passed the share, so the previous one stays), or None when the
        session is no longer open. The lease's TTL starts again (a call ended)."""
        with self._lock:
            lease = self._sessions.get(session_id)
            if lease is not None:
                lease.deadline = max(lease.deadline, self.clock() + lease.ttl)
        if lease is None or self.tree.disabled:
            return None if lease is None else self._meta(lease, refused=False)
        node = self.tree.match_prefix(token_ids).node
        old, refused = lease.node, False
        if node is not old and node is not self.tree.root:
            with self._lock:
                others = [s.node for s in self._sessions.values() if s is not lease and s.node is not None]
            if self._distinct([*others, node]) > self.limit:
                refused = True
                lease.pins_refused += 1
                self.stats["pins_refused"] += 1
            else:
                self.tree.lock(node)
                if old is not None:
                    self.tree.unlock(old)
                lease.node = node
        return self._meta(lease, refused)

    def _meta(self, lease: Lease, refused: bool) -> dict[str, Any]:
        return {"session_id": lease.session_id, "pinned_tokens": self._distinct([lease.node] if lease.node else []),
                "pin_refused": refused}

    def close(self, session_id: str) -> None:
        """End the session and release its pin. Raises `SessionError` when it is not open."""
        with self._lock:
            lease = self._sessions.pop(session_id, None)
            if lease is None:
                raise SessionError(self._unknown(session_id, None))
            self.stats["sessions_closed"] += 1
        self._unpin(lease)

    def expire(self) -> int:
        """Release every lease whose TTL passed; returns how many."""
        now = self.clock()
        if now < self._earliest:
            return 0
        with self._lock:
            gone = [s for s in self._sessions.values() if s.deadline <= now]
            for lease in gone:
                del self._sessions[lease.session_id]
            self._earliest = min((s.deadline for s in self._sessions.values()), default=float("inf"))
            self.stats["sessions_expired"] += len(gone)
        for lease in gone:
            self._unpin(lease)
        return len(gone)

    def shed(self) -> bool:
        """Release the pin of the lease called least recently (the pool cannot otherwise
        make progress); the session stays open. Returns whether a pin was released."""
        with self._lock:
            pinned = [s for s in self._sessions.values() if s.node is not None]
        if not pinned:
            return False
        self._unpin(min(pinned, key=lambda s: s.deadline - s.ttl))
        self.stats["pins_shed"] += 1
        return True

    def drop_pins(self) -> None:
        """Forget every pin without unlocking: the tree was reset (its nodes are gone)."""
        with self._lock:
            for lease in self._sessions.values():
                lease.node = None

    def _unpin(self, lease: Lease) -> None:
        if lease.node is not None:
            node, lease.node = lease.node, None
            self.tree.unlock(node)
