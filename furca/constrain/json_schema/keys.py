"""JSON object keys that are none of a given set of names.

Keys are written in canonical JSON (what json.dumps writes with ensure_ascii=False:
only `"`, `\\` and control characters escaped, \\uXXXX in lower case), so each decoded
key has exactly one spelling and excluding the declared names is exact. The grammar
is a trie of the names: at each node, either stop (when the prefix is not a name),
follow a child, or leave the trie with any other character and then anything.
"""
from __future__ import annotations

from .grammar import NOTHING, alt, chars, cls, complement, lit, normalize, rep, seq, subtract

_SPECIAL = normalize([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])
_NAMED = {0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t", 0x22: '"', 0x5C: "\\"}


def _escapes(members):
    """Canonical escapes of the special code points in `members`."""
    named = [ch for cp, ch in _NAMED.items() if cp in members]
    parts = [seq(lit("\\"), cls(chars("".join(named))))] if named else []
    for hi in (0, 1):
        lows = [cp & 15 for cp in members if cp >> 4 == hi and cp < 0x20 and cp not in _NAMED]
        if lows:
            digits = "".join("0123456789abcdef"[x] for x in lows)
            parts.append(seq(lit("\\u00%d" % hi), cls(chars(digits))))
    return alt(*parts) if parts else NOTHING


def canonical_unit(ranges):
    """IR for one character of `ranges` in canonical JSON-string spelling."""
    raw = subtract(ranges, _SPECIAL)
    members = {cp for lo, hi in ranges if lo <= 0x5C for cp in range(lo, min(hi, 0x5C) + 1)
               if cp < 0x20 or cp in (0x22, 0x5C)}
    parts = [cls(raw)] if raw else []
    if members:
        parts.append(_escapes(members))
    return alt(*parts) if parts else NOTHING


def key_not_in(c, names):
    """A quoted JSON key (canonical spelling) whose value is not in `names`.
    `c` is the compiler (for the shared rules `key-esc` and `key-rest`)."""
    def build():
        trie = {}
        for n in names:
            node = trie
            for ch in n:
                node = node.setdefault(ch, {})
            node[None] = True
        esc = c.named("key-esc", _escapes(set(range(0x20)) | {0x22, 0x5C}))
        rest = c.named("key-rest", seq(rep(alt(cls(complement(_SPECIAL)), esc), 0, None), lit('"')))
        return seq(lit('"'), _rest(trie, esc, rest))
    return c.cached(("key_not_in",) + tuple(names), build)


def _rest(node, esc, rest):
    parts = []
    if None not in node:
        parts.append(lit('"'))
    kids = [k for k in node if k is not None]
    for ch in kids:
        parts.append(seq(canonical_unit(chars(ch)), _rest(node[ch], esc, rest)))
    others = subtract(complement(normalize((ord(k), ord(k)) for k in kids)), _SPECIAL)
    leave = [cls(others)] if others else []
    if not any(ord(k) < 0x20 or k in '"\\' for k in kids):
        leave.append(esc)
    else:
        spec = {cp for lo, hi in _SPECIAL for cp in range(lo, hi + 1)} - {ord(k) for k in kids}
        if spec:
            leave.append(_escapes(spec))
    if leave:
        parts.append(seq(alt(*leave), rest))
    return alt(*parts)
