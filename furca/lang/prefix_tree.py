"""Cache-aware batch order: a depth-first walk over the programs' prefix tree.

``run_batch`` traces every program of a batch with its own arguments; each trace's
``constant_prefix`` (the text the program sends before its first gen or select) is one
path of a character trie. Submitting the programs in the trie's depth-first order puts
programs with a common prefix next to each other, so the radix cache holds that prefix
while all of them use it (the SGLang paper shows a DFS order reaches the optimal hit
rate when the cache holds the longest path; its LPM scheduling approximates it).

The plan also names the shared prefixes worth computing once ahead of the batch
(``warm``): the deepest branching points of the trie (warming one computes every
shorter shared prefix on its path), each cut back to a word boundary, kept when at
least ``min_chars`` long.

Contract: ``plan_batch(prefixes)`` is pure and deterministic. ``order`` is a
permutation of ``range(len(prefixes))``; siblings keep input order (a batch without any
shared prefix keeps its order); ``warm`` lists texts in the order the DFS reaches them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Sequence


@dataclass
class _Node:
    edge: str = ""  # the text on the edge into this node
    depth: int = 0  # characters from the root to the end of ``edge``
    items: list[int] = field(default_factory=list)  # programs whose prefix ends here
    children: dict[str, "_Node"] = field(default_factory=dict)  # first character -> child
    count: int = 0  # programs in this subtree


def _insert(root: _Node, text: str, item: int) -> None:
    node, pos = root, 0
    node.count += 1
    while pos < len(text):
        child = node.children.get(text[pos])
        if child is None:
            node.children[text[pos]] = _Node(text[pos:], len(text), [item], {}, 1)
            return
        shared = len(os.path.commonprefix([child.edge, text[pos:]]))
        if shared < len(child.edge):  # split the edge where the texts part
            head = _Node(child.edge[:shared], child.depth - len(child.edge) + shared, [], {}, child.count)
            child.edge = child.edge[shared:]
            head.children[child.edge[0]] = child
            node.children[text[pos]] = head
            child = head
        child.count += 1
        node, pos = child, pos + shared
    node.items.append(item)


def _word_boundary(text: str) -> str:
    """``text`` up to its last whitespace: a BPE tokenizer splits the text there as it
    splits every longer text through that point, so the warmed tokens are the ones the
    programs' prompts begin with (a cut inside a word may end on a different token)."""
    for i in range(len(text) - 1, -1, -1):
        if text[i].isspace():
            return text[:i].rstrip()
    return ""


@dataclass(frozen=True)
class BatchPlan:
    order: tuple[int, ...]  # indices of the batch's items, in submission order
    warm: tuple[str, ...]  # shared prefixes to compute once before the batch


def plan_batch(prefixes: Sequence[str], min_chars: int = 64) -> BatchPlan:
    """The DFS order of ``prefixes``' trie and the shared prefixes to warm."""
    root = _Node()
    for i, text in enumerate(prefixes):
        _insert(root, text, i)
    order: list[int] = []
    branching: list[str] = []
    stack: list[tuple[_Node, str]] = [(root, "")]
    while stack:
        node, text = stack.pop()
        order.extend(node.items)
        if node is not root and node.count > 1:
            ways = len(node.children) + len(node.items)
            if ways > 1 and node.depth >= min_chars:
                branching.append(text)
        # reversed, so the first-inserted child is walked first
        stack.extend((child, text + child.edge) for child in reversed(list(node.children.values())))
    # preorder: a text's deeper branching points come right after it
    deepest = [t for t, after in zip(branching, branching[1:] + [""]) if not after.startswith(t)]
    cuts = list(dict.fromkeys(c for c in map(_word_boundary, deepest) if len(c) >= min_chars))
    ordered = sorted(cuts)  # a text is a prefix of another iff of its successor here
    covered = {t for t, after in zip(ordered, ordered[1:]) if after.startswith(t)}
    warm = [t for t in cuts if t not in covered]
    return BatchPlan(tuple(order), tuple(warm))


__all__ = ["BatchPlan", "plan_batch"]
