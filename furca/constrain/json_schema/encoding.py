"""Characters as they are written inside a JSON string."""
from __future__ import annotations

from .grammar import NOTHING, TICK, Cls, Lit, Alt, Rep, Seq, alt, chars, cls, normalize, rep, seq, subtract

_NAMED = {0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}
HEX = cls([(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)])


def _hex_nibble(n: int):
    d = "0123456789abcdef"[n]
    return cls(chars(d + d.upper()))


def encode_chars(ranges):
    """IR for one character of `ranges` as written inside a JSON string."""
    raw = subtract(ranges, normalize([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]))
    parts = [cls(raw)] if raw else []
    members = [cp for lo, hi in ranges if lo <= 0x5C for cp in range(lo, min(hi, 0x5C) + 1)
               if cp < 0x20 or cp in (0x22, 0x5C)]
    if 0x22 in members:
        parts.append(Lit('\\"'))
    if 0x5C in members:
        parts.append(Lit("\\\\"))
    ctl = [cp for cp in members if cp < 0x20]
    if len(ctl) == 32:
        parts.append(seq(Lit("\\"), cls(chars("bfnrt"))))
        parts.append(seq(Lit("\\u00"), cls(chars("01")), HEX))
    else:
        for cp in ctl:
            if cp in _NAMED:
                parts.append(Lit(_NAMED[cp]))
            parts.append(seq(Lit("\\u00"), _hex_nibble(cp >> 4), _hex_nibble(cp & 15)))
    return alt(*parts) if parts else NOTHING


def encode(node, memo=None, tick=False):
    """Map decoded-character IR to JSON-string-content IR; tick: each character's
    encoding is preceded by TICK (the body of a grammar.Len: one escape sequence such as
    \\u00e9 or \\n counts as one character)."""
    memo = {} if memo is None else memo
    if isinstance(node, Cls):
        if node not in memo:
            memo[node] = seq(TICK, encode_chars(node.ranges)) if tick else encode_chars(node.ranges)
        return memo[node]
    if isinstance(node, Lit):
        if tick:
            return seq(*(seq(TICK, encode_chars(chars(c))) for c in node.text))
        return seq(*(encode_chars(chars(c)) for c in node.text))
    out = memo.get(node)  # compound nodes too: a format's IR shares its parts (a DAG)
    if out is None:
        if isinstance(node, Seq):
            out = seq(*(encode(i, memo, tick) for i in node.items))
        elif isinstance(node, Alt):
            out = alt(*(encode(i, memo, tick) for i in node.items))
        elif isinstance(node, Rep):
            out = rep(encode(node.item, memo, tick), node.min, node.max)
        else:
            raise TypeError(node)
        memo[node] = out
    return out


