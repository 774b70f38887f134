"""The translator's grammar -> `furca.constrain.ir`, the byte-level IR the automaton compiles.

The result is the IR that `furca.constrain.gbnf.parse_gbnf` makes of the GBNF text
`render.py` writes for the same rules, without writing and parsing that text: a
literal is its UTF-8 bytes (lone surrogates kept, as the text's ``\\uD800`` escapes
are), a class is `ir.char_class` of its code-point ranges, ``Rep(x, m, n)`` is
``("rep", x, m, n)``, sequences and alternations go through `ir.seq` / `ir.alt` (which
flatten as the parser's do), and the rules come ``root`` first.
(tests/constrain/test_json_schema_ir.py checks the two are equal, schema by schema.)
A compound node shared by several rules is lowered once and its IR shared (IR values are
never mutated in place), and a lasting rule's body (a JSON lexeme) once per process;
literals are lowered where they occur, classes come from
`ir.char_class`'s cache. A key trie (`Keys`) is built from its names by `keys.keys_ir`,
once per distinct set of names.
"""
from __future__ import annotations

from .. import ir
from ..deadline import check as check_deadline
from .grammar import Alt, Cls, Counted, Grammar, Keys, Len, Lit, Ref, Rep, Seq, Tick
from .keys import keys_ir


_LASTING_IR: dict = {}  # a lasting rule body (translator node, Grammar.lasting) -> its IR
MAX_LASTING = 32


def lower(g: Grammar) -> ir.Grammar:
    """`ir.Grammar` (root rule ``root``) of the translator's grammar `g`."""
    memo: dict = {}
    literal, char_class = ir.literal, ir.char_class
    byte_of = ir.BYTE.__getitem__  # a byte's shared ("byte", ((b, b),)) item, as ir.literal spells it

    def conv(node):
        t = type(node)
        if t is Lit:  # leaves: cheap, and classes are cached by ir.char_class
            return literal(node.text.encode("utf-8", "surrogatepass"))
        if t is Cls:
            return char_class(node.ranges)
        if t is Ref:
            return ("ref", node.name, 0)
        if t is Tick:
            return ("tick",)
        hit = memo.get(id(node))
        if hit is not None:
            return hit[1]
        if t is Seq:  # ir.seq of the items' IR, literals spelled straight into it
            check_deadline()
            flat = []
            for x in node.items:
                if type(x) is Lit:
                    flat.extend(map(byte_of, x.text.encode("utf-8", "surrogatepass")))
                    continue
                y = conv(x)
                if y[0] == "seq":
                    flat.extend(y[1])
                else:
                    flat.append(y)
            out = flat[0] if len(flat) == 1 else ("seq", flat)
        elif t is Alt:
            check_deadline()
            out = ir.alt([conv(x) for x in node.items]) if len(node.items) != 1 else conv(node.items[0])
        elif t is Rep:
            out = ("rep", conv(node.item), node.min, node.max)
        elif t is Counted:  # counted on the stack whatever its bounds (nfa.py)
            out = ("rep", conv(node.item), node.min, node.max, "count")
        elif t is Len:
            out = ("len", conv(node.item), node.min, node.max)
        elif t is Keys:
            key = ("keys", node.names)  # equal tries (other Keys objects) share one IR
            hit = memo.get(key)
            out = hit[1] if hit is not None else keys_ir(node, conv)
            memo[key] = (node, out)
        else:
            raise TypeError("not a grammar node: %r" % (node,))
        memo[id(node)] = (node, out)  # the node is kept so that its id is not reused
        return out

    names = ["root"] + [n for n in g.rules if n != "root"]
    try:
        rules = {}
        for n in names:
            body = g.rules[n]
            if n in g.lasting:  # one IR object per lasting body in the process
                out = _LASTING_IR.get(body)
                if out is None:
                    out = conv(body)
                    if len(_LASTING_IR) < MAX_LASTING:
                        _LASTING_IR[body] = out
                rules[n] = out
            else:
                rules[n] = conv(body)
        return ir.Grammar(rules, "root", lasting=set(g.lasting), unique=dict(g.unique),
                           objects=dict(g.objects))
    finally:
        # conv calls itself through its closure cell: a cycle that would keep `memo` (every
        # node and its IR) alive for the cyclic GC to find, a 0.1 s pass on a big schema
        conv = None  # noqa: F841 - break it: reference counting frees memo now

