"""The tokens that may write an object's key other than at their first byte: a
tokenizer's index for the member watch (members.py), built once per tokenizer and
kept on its token tables (unique._tables).

In compact JSON a key's opening quote follows `{` or `,`, so a token writes a key after
its first byte only there. Indexed: by the key such a token writes whole (a used or
unused name's candidates), by the bytes after its last quote when that quote opens a
key (where a key it opens stops: a dead body's candidates), by where it writes a comma
outside strings (levels up, read from inside a string or from between tokens: an
object whose finite keys are all used), and the few that write one key twice, open an
object and write a key and a comma, or close a key and write another. ~30 ms for
Llama-3.1's 128k tokens.
"""
from __future__ import annotations

from bisect import bisect_left

import numpy as np

from .token_tables import BACKSLASH, QUOTE, _tables

OPEN, CLOSE_OBJ, OPEN_ARR, CLOSE_ARR, COLON, COMMA = 0x7B, 0x7D, 0x5B, 0x5D, 0x3A, 0x2C


class KeyIndex:
    """A tokenizer's tokens that may write a key after their first byte. In compact JSON a
    key's opening quote follows `{` or `,`, so inside a token it is a quote after one of
    those: the tokens with such a quote and a later one, by the bytes between the two
    (`segments`: where such a token completes a key), and the tokens by the bytes after
    their last quote when it is such a quote (`ending_in`: where a key they open stops).
    A key opened by the token's first byte is found by a prefix lookup instead."""

    def __init__(self, info, t):
        tokens = info.token_bytes
        seg: dict[bytes, list] = {}
        tails = []
        for i in t.one_quote.tolist():
            data = tokens[i]
            j = data.find(b'"', 1)
            while j > 0:
                nxt = data.find(b'"', j + 1)
                if data[j - 1] in b"{,":
                    if nxt < 0:
                        tails.append((data[j + 1:], i))
                    else:
                        seg.setdefault(data[j + 1:nxt], []).append(i)
                j = nxt
        self.segments = {k: np.array(v, dtype=np.int64) for k, v in seg.items()}
        tails.sort()
        self.tails = [x[0] for x in tails]
        self.tail_ids = np.array([x[1] for x in tails], dtype=np.int64)
        # once every key of a finite set is used, its comma: the tokens with a comma outside
        # strings d levels up, read from inside a string or between tokens
        commas: dict[tuple, list] = {}
        for i in t.comma.tolist():
            for key in _commas(tokens[i]):
                commas.setdefault(key, []).append(i)
        self.commas = {key: np.array(v, dtype=np.int64) for key, v in commas.items()}
        self.comma = t.comma
        # tokens that may write two keys (four quotes or more: a handful in most vocabularies)
        self.two_keys = np.array([i for i in t.two_quotes.tolist() if tokens[i].count(b'"') >= 4
                                  and _repeats_a_segment(tokens[i])], dtype=np.int64)
        # tokens that open an object, write a whole key and go on to a comma (a finite key
        # set used up at once)
        self.open_write = np.array([i for i in t.comma.tolist() if _opens_and_writes(tokens[i])], dtype=np.int64)
        self.outside = np.union1d(self.two_keys, self.open_write)  # what a token read outside the watch may do
        # inside a key: tokens that close it and write another whole key (checked against it)
        self.close_then_key = np.array([i for i in t.two_quotes.tolist() if tokens[i].count(b'"') >= 3
                                        and _inner_keys(tokens[i])], dtype=np.int64)

    def ending_in(self, prefix: bytes) -> np.ndarray:
        """Tokens whose bytes after their last quote (one after `{` or `,`) start with prefix."""
        lo = bisect_left(self.tails, prefix)
        hi = bisect_left(self.tails, prefix + b"\xff")  # UTF-8 has no 0xFF byte
        return self.tail_ids[lo:hi]


def key_index(info):
    t = _tables(info)
    k = getattr(t, "key_index", None)
    if k is None:
        k = t.key_index = KeyIndex(info, t)
    return k


def _inner_keys(data: bytes) -> list:
    """The whole keys data writes after a quote that follows `{` or `,` (compact JSON)."""
    out, j = [], data.find(b'"', 1)
    while j > 0:
        nxt = data.find(b'"', j + 1)
        if nxt > 0 and data[j - 1] in b"{,":
            out.append(data[j + 1:nxt])
        j = nxt
    return out


def _opens_and_writes(data: bytes) -> bool:
    """Whether data writes `{"key"` and then a comma."""
    j = data.find(b'{"')
    while j >= 0:
        e = data.find(b'"', j + 2)
        if e > 0 and b"," in data[e:]:
            return True
        j = data.find(b'{"', j + 1)
    return False


def _repeats_a_segment(data: bytes) -> bool:
    """Whether data may write one key twice: two equal whole keys after `{` / `,` or its
    first byte."""
    keys = _inner_keys(data)
    if data[:1] == b'"':
        e = data.find(b'"', 1)
        if e > 0:
            keys.append(data[1:e])
    return len(set(keys)) < len(keys)


def _commas(data: bytes):
    """The (starts inside a string, levels up) of each comma data writes outside strings
    at or above the level where it starts, read both from inside a string and from
    between tokens (no escape pending)."""
    out = set()
    for start in (True, False):
        in_string, depth, esc = start, 0, False
        for b in data:
            if in_string:
                if esc:
                    esc = False
                elif b == BACKSLASH:
                    esc = True
                elif b == QUOTE:
                    in_string = False
            elif b == QUOTE:
                in_string = True
            elif b == OPEN or b == OPEN_ARR:
                depth += 1
            elif b == CLOSE_OBJ or b == CLOSE_ARR:
                depth -= 1
            elif b == COMMA and depth <= 0:
                out.add((start, -depth))
    return out
