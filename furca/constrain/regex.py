"""Regex constraints: a pattern in Python ``re`` syntax -> grammar IR over UTF-8 bytes,
with full-match semantics (the whole output matches, as ``re.fullmatch``).

The parser is regex_syntax.py (dialect "python"; its docstring lists the syntax and the
CompileErrors); this module maps its code-point tree onto ``constrain.ir``: a character
set becomes ``ir.char_class`` (UTF-8 byte-range sequences), the rest keeps its shape.
Anchors at the ends of top-level alternatives change nothing under full match.
"""

from __future__ import annotations

from . import ir
from .regex_syntax import parse


def parse_regex(pattern: str, what: str = "regex"):
    """IR expression for the whole pattern; CompileError names `what` and the position."""
    branches = [to_ir(b.node) for b in parse(pattern, "python", what)]
    return ir.alt(branches) if len(branches) > 1 else branches[0]


def regex_grammar(pattern: str) -> ir.Grammar:
    """A one-rule grammar ("root") for the pattern."""
    return ir.Grammar({"root": parse_regex(pattern)}, "root")


def to_ir(node):
    """constrain.ir expression of a regex_syntax tree (code points -> UTF-8 bytes)."""
    kind = node[0]
    if kind == "chars":
        return ir.char_class(node[1])
    if kind == "seq":
        return ir.seq([to_ir(n) for n in node[1]])
    if kind == "alt":
        return ir.alt([to_ir(n) for n in node[1]])
    return ("rep", to_ir(node[1]), node[2], node[3])
