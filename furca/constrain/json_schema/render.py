"""The translator's grammar as GBNF text (llama.cpp's dialect): `schema_to_gbnf`'s output.

The compile path does not go through this text (`lower.py` builds `furca.constrain.ir`
from the same rules); it is what a user reads to see the grammar of a schema, and what
the tests' reference matcher checks. Rule names match [a-zA-Z0-9-]+; literals use the
escapes \\n \\t \\r \\" \\\\ \\xHH \\uHHHH; classes ``[...]`` (ranges, ``^``); ``( )``,
``* + ?``, ``{m}`` ``{m,}`` ``{m,n}``.
"""
from __future__ import annotations

from furca.errors import CompileError

from ..deadline import check as check_deadline
from .grammar import MAX_CP, Alt, Cls, Grammar, Keys, Len, Lit, Ref, Rep, Seq, complement
from .keys import trie

_LIT_ESC = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_CLS_SPECIAL = set("]\\^-[")


def _esc_cp(cp: int, in_class: bool) -> str:
    c = chr(cp)
    if in_class:
        if c in "-^":  # llama.cpp's parser knows no \- or \^ escape
            return "\\x%02x" % cp
        if c in _CLS_SPECIAL:
            return "\\" + c
        if c in "\n\t\r":
            return _LIT_ESC[c]
    elif c in _LIT_ESC:
        return _LIT_ESC[c]
    if cp < 0x20 or cp == 0x7F:
        return "\\x%02x" % cp
    if 0xD800 <= cp <= 0xDFFF or (0x80 <= cp < 0xA0) or cp in (0x2028, 0x2029, 0xFEFF):
        return "\\u%04x" % cp
    return c


def render_node(node) -> str:
    """GBNF text of a node, parenthesised as needed."""
    return _render(node, 0)


def _render(node, prec: int) -> str:
    # prec: 0 = inside alternation, 1 = inside sequence, 2 = needs an atom
    if isinstance(node, Lit):
        return '"' + "".join(_esc_cp(ord(c), False) for c in node.text) + '"'
    if isinstance(node, Cls):
        return _render_cls(node.ranges)
    if isinstance(node, Ref):
        return node.name
    if isinstance(node, Seq):
        s = " ".join(_render(i, 1) for i in node.items)
        return s if prec <= 1 else "(" + s + ")"
    if isinstance(node, Alt):
        check_deadline()
        if not node.items:
            raise ValueError("NOTHING cannot be rendered")
        s = " | ".join(_render(i, 1) for i in node.items)
        return s if prec == 0 else "(" + s + ")"
    if isinstance(node, Rep):
        inner = _render(node.item, 2)
        lo, hi = node.min, node.max
        if (lo, hi) == (0, None):
            q = "*"
        elif (lo, hi) == (1, None):
            q = "+"
        elif (lo, hi) == (0, 1):
            q = "?"
        elif hi is None:
            q = "{%d,}" % lo
        elif lo == hi:
            q = "{%d}" % lo
        else:
            q = "{%d,%d}" % (lo, hi)
        return inner + q
    if isinstance(node, Keys):
        return _render(trie(node), prec)
    if isinstance(node, Len):  # counted by the automaton's length frame: GBNF cannot say it
        raise CompileError("a pattern or format with minLength %d / maxLength %s too large for a GBNF "
                           "product of the two" % (node.min, node.max))
    raise TypeError(node)


def _render_cls(ranges) -> str:
    pos = ranges
    neg = complement(ranges)
    use_neg = len(neg) < len(pos) or (pos and pos[-1][1] == MAX_CP and neg)
    body_ranges = neg if use_neg else pos
    parts = []
    for lo, hi in body_ranges:
        if lo == hi:
            parts.append(_esc_cp(lo, True))
        elif hi == lo + 1:
            parts.append(_esc_cp(lo, True) + _esc_cp(hi, True))
        else:
            parts.append(_esc_cp(lo, True) + "-" + _esc_cp(hi, True))
    return "[" + ("^" if use_neg else "") + "".join(parts) + "]"


def render(g: Grammar) -> str:
    """GBNF text of every rule of `g`, ``root`` first."""
    out = []
    for n in ["root"] + [n for n in g.rules if n != "root"]:
        if n in g.rules:
            check_deadline()
            out.append("%s ::= %s\n" % (n, render_node(g.rules[n])))
    return "".join(out)
