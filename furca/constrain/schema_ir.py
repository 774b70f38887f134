"""The JSON schema translator's grammar object -> IR, without the GBNF text round trip.

json_schema builds its grammar as nodes (json_schema/grammar.py: Lit, Cls, Seq, Alt,
Rep, Ref; rules in a dict, ``root`` first) and renders them as GBNF text, which
gbnf.py then parses back (a few µs per character: ~0.1-0.2 s for the largest
MaskBench grammars, a third of their compile). ``ir_from_rules`` converts the nodes
directly, with the same meaning as rendering + parsing: a literal is its UTF-8 bytes,
a class goes through ir.char_class, ``{m,n}`` / ``*`` / ``+`` / ``?`` are ("rep", x, m,
n). Nodes are matched by class name (duck typing), so this module does not import the
translator. GrammarCompiler uses it when json_schema offers ``schema_to_grammar``
(returning its Grammar object); otherwise it parses the text.
"""

from __future__ import annotations

from furca.errors import CompileError

from . import ir
from .deadline import check as check_deadline


def ir_from_rules(rules: dict, root: str = "root") -> ir.Grammar:
    memo: dict = {}

    def conv(node):
        key = id(node)
        hit = memo.get(key)
        if hit is not None:
            return hit[1]
        kind = type(node).__name__
        if kind == "Lit":
            out = ir.literal(node.text.encode("utf-8", "surrogatepass"))
        elif kind == "Cls":
            out = ir.char_class(node.ranges)
        elif kind == "Ref":
            out = ("ref", node.name, 0)
        elif kind == "Seq":
            check_deadline()
            out = ir.seq([conv(x) for x in node.items]) if node.items else ir.EMPTY
        elif kind == "Alt":
            check_deadline()
            items = [conv(x) for x in node.items]
            out = ir.alt(items) if len(items) != 1 else items[0]
        elif kind == "Rep":
            out = ("rep", conv(node.item), int(node.min), None if node.max is None else int(node.max))
        else:
            raise CompileError(f"unknown grammar node {kind!r} from the JSON schema translator")
        memo[key] = (node, out)  # keep node alive so its id is not reused
        return out

    if root not in rules:
        raise CompileError(f"the translated grammar has no {root!r} rule")
    return ir.Grammar({name: conv(body) for name, body in rules.items()}, root)
