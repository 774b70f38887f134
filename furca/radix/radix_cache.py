"""Radix-tree prefix cache (RadixAttention): token ids -> KV slot indices.

Each edge holds a run of token ids (`key`) and the KV slots that hold them (`value`,
a 1-D int64 tensor of the same length). The cache owns the slots stored in it; it
gives them back through the `free_slots` callback when it evicts. Locked nodes (and,
through the lock path, all their ancestors) are never evicted.

Sizes are counted in tokens: `evictable_size()` (unlocked) + `locked_size()` ==
`total_size()`. The runtime's invariant is free + evictable + locked + (slots held by
running requests and not yet inserted) == pool capacity.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from furca.errors import FurcaError


class RadixCacheError(FurcaError):
    """The radix cache was misused (bad unlock, foreign node) or its invariants broke."""


class Node:
    __slots__ = ("children", "parent", "key", "value", "lock_ref", "last_access")

    def __init__(self, key: tuple[int, ...], value: torch.Tensor, parent: Node | None, last_access: int):
        self.children: dict[int, Node] = {}
        self.parent = parent
        self.key = key
        self.value = value
        self.lock_ref = 0
        self.last_access = last_access

    def __repr__(self) -> str:
        return f"Node(key_len={len(self.key)}, lock_ref={self.lock_ref}, last_access={self.last_access})"


@dataclass(frozen=True, slots=True)
class MatchResult:
    slot_indices: torch.Tensor  # (prefix_len,) int64
    node: Node
    prefix_len: int


def _as_ids(token_ids: Sequence[int]) -> tuple[int, ...]:
    if hasattr(token_ids, "tolist"):  # torch tensor / numpy array
        token_ids = token_ids.tolist()
    return tuple(token_ids)


def _common_len(key: tuple[int, ...], ids: tuple[int, ...], start: int) -> int:
    n = min(len(key), len(ids) - start)
    if key[:n] == ids[start : start + n]:
        return n
    i = 0
    while key[i] == ids[start + i]:
        i += 1
    return i


class RadixCache:
    def __init__(
        self,
        free_slots: Callable[[torch.Tensor], None],
        *,
        disabled: bool = False,
        device: torch.device | str = "cpu",
    ):
        """`free_slots` receives a 1-D int64 tensor of slots the cache evicted; `device` is
        where empty results live (stored values keep the device they were inserted on).
        With `disabled=True` nothing is stored: match finds nothing, insert returns 0, and
        the caller keeps ownership of (and frees) all its slots."""
        self.free_slots = free_slots
        self.disabled = disabled
        self.device = torch.device(device)
        self._heap_seq = itertools.count()
        self.reset()

    def reset(self) -> None:
        """Drop every node. Does NOT call `free_slots`: the runtime resets its allocator at
        the same time. Nodes handed out before are dead; lock/unlock on them raises."""
        self._tick = 0
        self.root = Node((), torch.empty(0, dtype=torch.int64, device=self.device), None, 0)
        self.root.lock_ref = 1  # permanently held: the root is never evicted
        self._evictable_size = 0
        self._locked_size = 0

    def _empty(self) -> torch.Tensor:
        return torch.empty(0, dtype=torch.int64, device=self.device)

    def _split(self, child: Node, k: int) -> Node:
        """Cut `child`'s edge after k tokens; return the new upper node. `child` keeps its
        identity (handles to it stay valid) and becomes the lower part."""
        mid = Node(child.key[:k], child.value[:k], child.parent, child.last_access)
        mid.lock_ref = child.lock_ref
        mid.children[child.key[k]] = child
        child.parent.children[child.key[0]] = mid
        child.parent = mid
        child.key = child.key[k:]
        child.value = child.value[k:]
        return mid

    def _walk(self, ids: tuple[int, ...]) -> tuple[Node, int, list[torch.Tensor]]:
        """Descend as far as `ids` matches, splitting an edge where the match ends inside
        it; touch every node on the way. Returns (last node, matched length, values)."""
        self._tick += 1
        node, pos, values = self.root, 0, []
        node.last_access = self._tick
        while pos < len(ids):
            child = node.children.get(ids[pos])
            if child is None:
                break
            k = _common_len(child.key, ids, pos)
            is_split = k < len(child.key)
            if is_split:
                child = self._split(child, k)
            child.last_access = self._tick
            values.append(child.value)
            node, pos = child, pos + k
            if is_split:
                break
        return node, pos, values

    def match_prefix(self, token_ids: Sequence[int]) -> MatchResult:
        """Longest cached prefix of `token_ids`: its slots (int64, concatenated), the node
        that ends exactly there (an edge is split if needed) and its length. Touches the
        path for LRU; changes no lock count. The indices are only safe to use while
        `node` is locked: an unlocked node may be evicted and its slots reused."""
        ids = _as_ids(token_ids)
        if self.disabled or not ids:
            return MatchResult(self._empty(), self.root, 0)
        node, pos, values = self._walk(ids)
        slots = torch.cat(values) if values else self._empty()
        return MatchResult(slots, node, pos)

    def insert(self, token_ids: Sequence[int], slot_indices: torch.Tensor) -> int:
        """Store `token_ids` -> `slot_indices` (same length). Returns prefix_len, how many
        leading tokens were ALREADY cached: the tree keeps its own slots for those, so
        the caller still owns `slot_indices[:prefix_len]` and must free every one of them
        that is not the tree's (after match_prefix returned m slots and the node stayed
        locked, free `slot_indices[m:prefix_len]`). The tree takes ownership of
        `slot_indices[prefix_len:]` (copied). Disabled: stores nothing, returns 0."""
        ids = _as_ids(token_ids)
        slot_indices = torch.as_tensor(slot_indices, dtype=torch.int64)
        if slot_indices.dim() != 1 or len(ids) != len(slot_indices):
            raise RadixCacheError(f"insert: {len(ids)} token ids but slot_indices of shape {tuple(slot_indices.shape)}")
        if self.disabled or not ids:
            return 0
        node, pos, _ = self._walk(ids)
        if pos < len(ids):
            value = slot_indices[pos:].clone()
            leaf = Node(ids[pos:], value, node, self._tick)
            node.children[ids[pos]] = leaf
            self._evictable_size += len(leaf.key)
        return pos

    def _path(self, node: Node) -> list[Node]:
        path = []
        while node.parent is not None:
            path.append(node)
            node = node.parent
        if node is not self.root:
            raise RadixCacheError("node is not in this cache (evicted, or the cache was reset)")
        return path

    def lock(self, node: Node) -> None:
        """Protect `node` and its ancestors from eviction (reference counted)."""
        for n in self._path(node):
            if n.lock_ref == 0:
                self._evictable_size -= len(n.key)
                self._locked_size += len(n.key)
            n.lock_ref += 1

    def unlock(self, node: Node) -> None:
        """Undo one `lock(node)`. Raises RadixCacheError (changing nothing) if it was not locked."""
        path = self._path(node)
        if path and path[0].lock_ref <= 0:
            raise RadixCacheError(f"unlock of a node that is not locked ({path[0]!r}): unlock called more than lock")
        for n in path:
            n.lock_ref -= 1
            if n.lock_ref == 0:
                self._evictable_size += len(n.key)
                self._locked_size -= len(n.key)

    def evict(self, num_tokens: int) -> int:
        """Free at least `num_tokens` tokens (fewer only if not that many are evictable),
        least recently used unlocked leaves first, whole edges at a time; a parent left
        childless and unlocked becomes a candidate. Returns tokens freed; their slots go to
        `free_slots` in one call."""
        if num_tokens <= 0:
            return 0
        heap = [(n.last_access, next(self._heap_seq), n) for n in self._nodes() if not n.children and n.lock_ref == 0]
        heapq.heapify(heap)
        freed: list[torch.Tensor] = []
        num_freed = 0
        while heap and num_freed < num_tokens:
            _, _, node = heapq.heappop(heap)
            parent = node.parent
            del parent.children[node.key[0]]
            node.parent = None
            freed.append(node.value)
            num_freed += len(node.key)
            self._evictable_size -= len(node.key)
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, next(self._heap_seq), parent))
        if freed:
            self.free_slots(torch.cat(freed))
        return num_freed

    def evictable_size(self) -> int:
        return self._evictable_size

    def locked_size(self) -> int:
        return self._locked_size

    def total_size(self) -> int:
        return self._evictable_size + self._locked_size

    def _nodes(self):
        """Every non-root node, parents before children."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def all_slots(self) -> torch.Tensor:
        values = [n.value for n in self._nodes()]
        return torch.cat(values) if values else self._empty()

    def check_integrity(self) -> None:
        """Recompute everything from scratch; raise RadixCacheError naming the first broken
        invariant (sizes, links, lengths, keys, lock counts, duplicate slots)."""
        root = self.root

        def fail(msg: str) -> None:
            raise RadixCacheError(f"radix cache integrity: {msg}")

        if root.parent is not None or root.key or len(root.value) or root.lock_ref != 1:
            fail(f"bad root (key_len={len(root.key)}, lock_ref={root.lock_ref}, want 0 and 1)")
        evictable = locked = 0
        stack = [root]
        while stack:
            node = stack.pop()
            child_locks = 0
            for first, child in node.children.items():
                if child.parent is not node:
                    fail(f"{child!r} is a child of {node!r} but its parent link points elsewhere")
                if not child.key or child.key[0] != first:
                    fail(f"{child!r} is keyed by token {first} but its key starts with {child.key[:1]}")
                v = child.value
                if v.dtype != torch.int64 or v.dim() != 1 or len(v) != len(child.key):
                    fail(f"{child!r}: value {v.dtype} shape {tuple(v.shape)}, want int64 ({len(child.key)},)")
                if child.lock_ref < 0:
                    fail(f"{child!r} has a negative lock_ref")
                if child.last_access > node.last_access and node is not root:
                    fail(f"{child!r} was accessed after its parent {node!r}")
                child_locks += child.lock_ref
                if child.lock_ref:
                    locked += len(child.key)
                else:
                    evictable += len(child.key)
                stack.append(child)
            if node is not root and node.lock_ref < child_locks:
                fail(f"{node!r} has lock_ref below its children's total {child_locks}")
        if (evictable, locked) != (self._evictable_size, self._locked_size):
            fail(
                f"sizes (evictable, locked) recorded ({self._evictable_size}, {self._locked_size}) "
                f"but counted ({evictable}, {locked})"
            )
        slots = self.all_slots()
        if len(torch.unique(slots)) != len(slots):
            fail("a slot is stored twice")

    def pretty_print(self) -> str:
        lines = []
        stack = [(self.root, 0)]
        while stack:
            node, depth = stack.pop()
            lines.append(f"{'  ' * depth}{list(node.key)} -> {node.value.tolist()} lock={node.lock_ref} t={node.last_access}")
            stack.extend((c, depth + 1) for c in reversed(node.children.values()))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"RadixCache(evictable={self._evictable_size}, locked={self._locked_size}, disabled={self.disabled})"
        )
