"""End anchors inside an ECMA-262 pattern, compiled away exactly.

Without the m flag, ECMA's `$` matches only at the end of the input, wherever it is
written: `^(a($|/))*$` accepts "a", "a/a/" and "a/a". A tree holding such an anchor is
split into two anchor-free trees:

    free  the strings of paths that pass no `$`;
    end   the strings of paths that pass a `$` and consume nothing after the first one,
          so the input must end right there.

A top-level alternative with a `$` inside becomes two: `free` with the alternative's own
end (anchored or padded with `.*`), and `end` anchored at the end. The rules, for a node N
(nullable(N): some path through N consumes nothing, `$` counting as nothing):

    chars            free = chars           end = nothing
    $                free = nothing         end = ""
    a b              free = a.free b.free   end = a.free b.end | a.end (if b is nullable)
    a | b            free = a.free | b.free end = a.end | b.end
    a{m,n}           free = a.free{m,n}     end = a.free{j-1} a.end for the iteration j of the
                                                  first `$`: 1 <= j <= n, and j >= m unless a is
                                                  nullable (later iterations then consume nothing)

Python's `$` also matches before a final newline, so the python dialect keeps the
CompileError for an anchor in the middle; `^` in the middle stays a CompileError in both.
"""
from __future__ import annotations

NOTHING = ("alt", [])
EMPTY = ("seq", [])


def has_end_anchor(node) -> bool:
    kind = node[0]
    if kind == "anchor":
        return node[1] == "$"
    if kind in ("seq", "alt"):
        return any(has_end_anchor(n) for n in node[1])
    if kind == "rep":
        return has_end_anchor(node[1])
    return False


def split_end(node):
    """(free, end) trees of `node` (see the module docstring); `^` anchors are kept."""
    kind = node[0]
    if not has_end_anchor(node):
        return node, NOTHING
    if kind == "anchor":
        return NOTHING, EMPTY
    if kind == "alt":
        parts = [split_end(n) for n in node[1]]
        return _alt([p[0] for p in parts]), _alt([p[1] for p in parts])
    if kind == "seq":
        return _split_seq(node[1])
    a, lo, hi = node[1], node[2], node[3]
    free, end = split_end(a)
    if hi == 0 or end == NOTHING:
        return ("rep", free, lo, hi), NOTHING
    first = 0 if nullable(a) else max(lo - 1, 0)
    before = ("rep", free, first, None if hi is None else hi - 1)
    return ("rep", free, lo, hi), _seq([before, end])


def _split_seq(items):
    """(free, end) of a concatenation, folded from the right."""
    free, end, rest_nullable = EMPTY, NOTHING, True
    for item in reversed(items):
        f, e = split_end(item)
        end = _alt([_seq([f, end]), e if rest_nullable else NOTHING])
        free = _seq([f, free])
        rest_nullable = rest_nullable and nullable(item)
    return free, end


def nullable(node) -> bool:
    """Some path through `node` consumes nothing (anchors consume nothing)."""
    kind = node[0]
    if kind == "chars":
        return False
    if kind in ("anchor", "bound"):
        return True
    if kind == "seq":
        return all(nullable(n) for n in node[1])
    if kind == "alt":
        return any(nullable(n) for n in node[1])
    return node[2] == 0 or nullable(node[1])


def _seq(items):
    if any(i == NOTHING for i in items):
        return NOTHING
    flat = [x for i in items for x in (i[1] if i[0] == "seq" else [i])]
    return flat[0] if len(flat) == 1 else ("seq", flat)


def _alt(items):
    kept = [i for i in items if i != NOTHING]
    return kept[0] if len(kept) == 1 else ("alt", kept)
