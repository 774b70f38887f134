"""The values watch's reader (unique_values.py): a watched array's items read from
the accepted bytes, each completed item's value as a key.

A watch state is immutable: (used keys, the used texts without whitespace outside
strings (sorted), the item's text so far or None between items, that text without such
whitespace, its open levels, inside a string, after a backslash, a bare item, after a
comma). Items: a string or container closed at the item's level, or a bare number or
literal ended by `,`, `]` or whitespace.
"""
from __future__ import annotations

import json
from bisect import bisect_left, insort
from decimal import Decimal

from .token_tables import BACKSLASH, CLOSE, COMMA, QUOTE

OPEN_OBJ, CLOSE_OBJ, OPEN_ARR = 0x7B, 0x7D, 0x5B
_WS = frozenset(b" \t\n\r")


def value_key(text: bytes):
    """A hashable key of the JSON value text spells, equal for equal values in JSON
    Schema's sense (numbers by value, true apart from 1, members in any order)."""
    return _key(json.loads(text, parse_float=Decimal, parse_int=Decimal))


def _key(v):
    if isinstance(v, dict):
        return ("o", frozenset((k, _key(x)) for k, x in v.items()))
    if isinstance(v, list):
        return ("a", tuple(_key(x) for x in v))
    if isinstance(v, Decimal):  # Decimal("1.0") == Decimal("1"), equal hashes
        return ("x", v)
    if isinstance(v, str):
        return ("s", v)
    return ("l", v)  # true, false, null


START = (frozenset(), (), None, b"", 0, False, False, False, False)


def _read(w, data: bytes, i: int, stop: bool, keys: dict):
    """Reads data[i:] as the array's items from watch state w: (state, position, how):
    how "end" when the array closed (position past its `]`), "repeat" when an item
    completed a used one (only with stop), None when data was read whole. keys: a cache
    of value_key by text."""
    used, norms, cur, norm, depth, ins, esc, bare, comma = w
    n = len(data)
    while i < n:
        b = data[i]
        one = data[i:i + 1]
        i += 1
        if cur is None:
            if b in _WS:
                continue
            if b == CLOSE:
                return (used, norms, None, b"", 0, False, False, False, comma), i, "end"
            if b == COMMA:
                comma = True
                continue
            cur = norm = one
            comma = esc = False
            ins, depth, bare = (True, 0, False) if b == QUOTE else (False, 1, False) if b in b"{[" else (
                False, 0, True)
            continue
        if bare:
            if not (b == COMMA or b == CLOSE or b in _WS):
                cur += one
                norm += one
                continue
        elif esc:
            esc = False
            cur += one
            norm += one
            continue
        elif ins:
            if b == BACKSLASH:
                esc = True
            elif b == QUOTE:
                ins = False
            cur += one
            norm += one
            if ins or depth:
                continue
        else:
            cur += one
            if b in _WS:
                continue
            norm += one
            if b == QUOTE:
                ins = True
            elif b == OPEN_OBJ or b == OPEN_ARR:
                depth += 1
            elif b == CLOSE_OBJ or b == CLOSE:
                depth -= 1
            if depth:
                continue
        # an item completed: cur (a bare one before the delimiter b)
        k = keys.get(cur)
        if k is None:
            try:
                k = value_key(cur)
            except ValueError:  # not JSON (a grammar never writes it): never a repeat
                k = ("?", cur)
            if len(keys) >= 4096:
                keys.clear()
            keys[cur] = k
        if k in used:
            if stop:
                return (used, norms, cur, norm, depth, ins, esc, bare, comma), i, "repeat"
        else:
            used = used | {k}
            lst = list(norms)
            insort(lst, norm)
            norms = tuple(lst)
        cur, norm, depth, ins, esc = None, b"", 0, False, False
        if bare:
            bare = False
            if b == CLOSE:
                return (used, norms, None, b"", 0, False, False, False, False), i, "end"
            comma = b == COMMA
    return (used, norms, cur, norm, depth, ins, esc, bare, comma), i, None


def _on_used(norms, norm: bytes) -> bool:
    """Whether norm is a prefix of a used item's text."""
    i = bisect_left(norms, norm)
    return i < len(norms) and norms[i].startswith(norm)
