"""A format that must also match a start-anchored prefix pattern ("^https?://").

JSON Schema's `pattern` is unanchored, so `^P` (no `$`) means "starts with a string of
P". When P is a finite language (a few literal alternatives, as in `^https?://` or
`^(wss?|wss?\\+unix)://`), the strings of a format language F that start with P are
exactly the union over the words p of P of p · (the derivative of F by p): the
Brzozowski derivative, computed on the decoded-character IR (grammar.py), which
stays a regular IR of about F's size. `prefixed(F, pattern)` returns that IR, or
None when the pattern is not of that shape (the caller then reports the pair).

`pattern_words` gives the strings of a pattern that matches a finite set ("^(a|b)$"),
so that such patternProperties become declared properties (containers.py).
"""
from __future__ import annotations

from ..regex_syntax import parse
from .grammar import EMPTY, NOTHING, Alt, Cls, Lit, Rep, Seq, alt, lit, rep, seq
from .numeric import nullable
from .regex import chars_ir

MAX_WORDS = 64
MAX_WORD_LEN = 64


def prefixed(format_ir, pattern: str, where: str):
    """IR of the strings of `format_ir` that `pattern` matches, or None (see module)."""
    words = _anchored_words(pattern, where, end=False)
    if words is None:
        return None
    by_rest = {}  # derivative -> the words sharing it (one copy of the rest each)
    # a word that extends another adds nothing: "starts with p" already covers it
    for p in sorted(words):
        if any(q != p and p.startswith(q) for q in words):
            continue
        d = format_ir
        try:
            for ch in p:
                d = derive(d, ord(ch))
                if d == NOTHING:
                    break
        except TypeError:  # the format IR names a rule: not derivable here
            return None
        by_rest.setdefault(d, []).append(p)
    return alt(*[seq(alt(*[lit(p) for p in ps]), d) for d, ps in by_rest.items()])


def pattern_words(pattern: str, where: str):
    """The strings `pattern` matches when they are a finite set (every alternative
    anchored by both ^ and $: "^(a|b)$"), else None."""
    return _anchored_words(pattern, where, end=True)


def _anchored_words(pattern, where, end: bool):
    """The words of `pattern` when every alternative starts with ^ (and ends with $
    exactly when `end`) and they are a finite set of at most MAX_WORDS, else None."""
    branches = parse(pattern, "ecma", where, lookahead=True, boundaries=True)  # a Bound: no words
    if not branches or not all(b.start and b.end == end and not b.looks for b in branches):
        return None
    words = set()
    for b in branches:
        w = _words(chars_ir(b.node))
        if w is None:
            return None
        words |= w
    return words if len(words) <= MAX_WORDS else None


def _words(node):
    """The finite set of strings of a Ref-free IR node, or None when too many / infinite."""
    if isinstance(node, Lit):
        return {node.text}
    if isinstance(node, Cls):
        n = sum(hi - lo + 1 for lo, hi in node.ranges)
        return None if n > MAX_WORDS else {chr(c) for lo, hi in node.ranges for c in range(lo, hi + 1)}
    if isinstance(node, Alt):
        out = set()
        for item in node.items:
            w = _words(item)
            if w is None:
                return None
            out |= w
        return out
    if isinstance(node, Seq):
        out = {""}
        for item in node.items:
            w = _words(item)
            if w is None:
                return None
            out = {a + b for a in out for b in w}
            if len(out) > MAX_WORDS or any(len(a) > MAX_WORD_LEN for a in out):
                return None
        return out
    if isinstance(node, Rep) and node.max is not None:
        return _words(seq(*[alt(EMPTY, node.item)] * (node.max - node.min), *[node.item] * node.min)) \
            if node.max <= 8 else None
    return None


def derive(node, c: int):
    """The strings s with chr(c) + s in `node` (Brzozowski derivative)."""
    if isinstance(node, Lit):
        return lit(node.text[1:]) if node.text and ord(node.text[0]) == c else NOTHING
    if isinstance(node, Cls):
        return EMPTY if any(lo <= c <= hi for lo, hi in node.ranges) else NOTHING
    if isinstance(node, Alt):
        return alt(*[derive(i, c) for i in node.items])
    if isinstance(node, Seq):
        items = node.items
        parts = []
        for k, item in enumerate(items):
            parts.append(seq(derive(item, c), *items[k + 1:]))
            if not nullable(item):
                break
        return alt(*parts)
    if isinstance(node, Rep):
        if node.max == 0:
            return NOTHING
        rest = rep(node.item, max(node.min - 1, 0), None if node.max is None else node.max - 1)
        return seq(derive(node.item, c), rest)
    raise TypeError(node)
