"""An approximate radix tree of the prompt text the router sent to one replica.

It stands in for the replica's own radix KV cache, which the router cannot see: the
longest prefix of a new prompt found here is (roughly) the prefix that replica still has
cached. Text, not tokens: the router never loads a tokenizer, and a shared text prefix is
a shared token prefix up to the last token or two.

Memory is bounded: past ``max_chars`` characters, `insert` evicts the least recently
matched or inserted leaves until the tree holds ``EVICT_TO`` of the bound (the replica's
own cache evicts its least recently used leaves the same way).
"""

from __future__ import annotations

import heapq
import itertools
import os

EVICT_TO = 0.9  # after an eviction the tree holds at most this share of max_chars


class _Node:
    __slots__ = ("edge", "children", "parent", "stamp")

    def __init__(self, edge: str, parent: "_Node | None", stamp: int):
        self.edge, self.parent, self.stamp = edge, parent, stamp
        self.children: dict[str, _Node] = {}


class PrefixTree:
    """`match(text)` -> the length of the longest prefix of `text` held; `insert(text)`;
    ``size``: the characters held (the sum of edge lengths). Not thread-safe: the router
    calls it from its event loop only."""

    def __init__(self, max_chars: int):
        if not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"max_chars must be an int >= 1, got {max_chars!r}")
        self.max_chars = max_chars
        self.size = 0
        self._clock = itertools.count(1)
        self._root = _Node("", None, 0)

    def _walk(self, text: str, touch: int | None) -> tuple[_Node, int, int]:
        """Follow `text` down: the last node reached, the characters matched up to and
        including it (``depth``), and how far into the next edge the match went."""
        node, depth = self._root, 0
        while depth < len(text):
            child = node.children.get(text[depth])
            if child is None:
                return node, depth, 0
            common = len(os.path.commonprefix([child.edge, text[depth:depth + len(child.edge)]]))
            if common < len(child.edge):  # the edge's tail is not used: its stamp stays
                return child, depth, common
            if touch is not None:
                child.stamp = touch
            node, depth = child, depth + common
        return node, depth, 0

    def match(self, text: str) -> int:
        """The number of leading characters of `text` the tree holds (marks them used)."""
        _, depth, partial = self._walk(text, next(self._clock))
        return depth + partial

    def insert(self, text: str) -> None:
        """Add `text` (marking its path used), then evict past ``max_chars``."""
        stamp = next(self._clock)
        node, depth, partial = self._walk(text, stamp)
        if partial:  # split `node`'s edge where `text` leaves it
            parent = node.parent
            head = _Node(node.edge[:partial], parent, stamp)
            parent.children[head.edge[0]] = head
            node.edge = node.edge[partial:]
            node.parent = head
            head.children[node.edge[0]] = node
            node, depth = head, depth + partial
        if depth < len(text):
            leaf = _Node(text[depth:], node, stamp)
            node.children[leaf.edge[0]] = leaf
            self.size += len(leaf.edge)
        if self.size > self.max_chars:
            self.evict(int(self.max_chars * EVICT_TO))

    def evict(self, target: int) -> None:
        """Drop least recently used leaves until at most `target` characters remain."""
        heap = [(n.stamp, id(n), n) for n in self._leaves()]
        heapq.heapify(heap)
        while self.size > target and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            del parent.children[leaf.edge[0]]
            self.size -= len(leaf.edge)
            if parent is not self._root and not parent.children:
                heapq.heappush(heap, (parent.stamp, id(parent), parent))

    def clear(self) -> None:
        self._root = _Node("", None, 0)
        self.size = 0

    def _leaves(self) -> list[_Node]:
        out, stack = [], list(self._root.children.values())
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            else:
                out.append(node)
        return out
