"""ECMA-262 regular expressions (JSON Schema `pattern`, `patternProperties`) -> grammar IR.

The parser is furca.constrain.regex_syntax (dialect "ecma"; its docstring lists the
syntax, how it differs from the python dialect, and the CompileErrors). This module
gives the JSON-Schema meaning: a pattern is unanchored ("abc" means "contains abc"), so
a top-level alternative not anchored by `^` / `$` gets `.*` (any character, newlines
too) at that end; minLength/maxLength apply where they can; and every character is
encoded as it appears inside a JSON string (`"` as \\", controls escaped).

Lookaheads right after a `^` are read (regex_syntax's `looks`): `^(?=Y)(?!X)R` is the
strings of R (padded) that start with a string of Y and not with one of X, a
`difference.Bool` of the three IR nodes, which difference.py's product construction
takes wherever it takes a pattern (`(?!X)` as a whole-string difference is exact:
the lookahead is tried at position 0 only). A positive lookahead ending an unanchored
alternative is inline (regex_syntax); other lookaheads stay CompileErrors.

Word boundaries (`\\b`, `\\B`) become `Bound` nodes, and their pattern a one-part Bool, so
that only difference.py's automata (lengths.Glushkov reads them) see it; a pattern with
them alone is written as rules over its Glushkov positions (`bounded_rules`).
"""
from __future__ import annotations

from furca.errors import CompileError

from ..regex_syntax import parse
from .encoding import encode_chars
from .grammar import EMPTY, Bound, Ref, alt, cls, rep, seq
from .difference import ANY, ANY_CHAR, Bool, both, difference, either, live_states, negation
from .lengths import Glushkov, TooBig, bounded_chars, has_bound

BOUND_POSITIONS = 4000  # positions of a pattern with word boundaries written as rules (bounded_rules)


def pattern_grammar(pattern: str, where: str, min_len: int = 0, max_len: int | None = None, grammar=None):
    """JSON string content (without quotes) whose decoded value matches `pattern`
    (unanchored, as JSON Schema means it) and has min_len..max_len characters.
    `grammar` receives helper rules when the length bound needs an automaton."""
    node = pattern_chars(pattern, where)
    if isinstance(node, Bool):
        plain = _with_bounds(node)
        if plain is not None and grammar is not None and not min_len and max_len is None:
            return bounded_rules(plain, grammar, where)
        if grammar is None:
            raise CompileError("%s: pattern %r with a lookahead or word boundary cannot be enforced here"
                               % (where, pattern))
        also = [rep(ANY_CHAR, min_len, max_len)] if min_len or max_len is not None else []
        return difference(node, [], grammar, where, also=also)
    return bounded_chars(node, min_len, max_len, grammar, where, "pattern %r" % pattern)


def string_minus(pattern, min_len: int, max_len, names, patterns, grammar, where: str, also_patterns=()):
    """JSON string content of min_len..max_len characters, matching `pattern` (None: any
    string) and every one of `also_patterns` (allOf's), none of the strings in `names` and
    none of the `patterns` (oneOf's other branches, a `not`)."""
    node = pattern_chars(pattern, where + "/pattern") if pattern is not None else ANY
    also = [rep(ANY_CHAR, min_len, max_len)] if min_len or max_len is not None else []
    also += [pattern_chars(p, where + "/allOf") for p in also_patterns]
    return difference(node, [literal_chars(n) for n in names] + [pattern_chars(p, where) for p in patterns],
                      grammar, where, also=also)


def one_of_patterns(patterns, grammar, where: str):
    """JSON string content of the strings exactly one of `patterns` matches (a oneOf of
    pattern-only string branches): one product of the patterns' automata, each built
    once, whose minimised states become one set of rules, instead of a product per
    branch (each of all n patterns) read side by side: maskbench-dev o65510's five
    `contains` branches made a string's first mask walk five rule sets at once (108 ms,
    543 states). Where that product outgrows its limit, the branches' own products."""
    nodes = [pattern_chars(p, "%s/oneOf/%d/pattern" % (where, i)) for i, p in enumerate(patterns)]
    only = [both(n, negation(Bool("or", nodes[:i] + nodes[i + 1:]))) for i, n in enumerate(nodes)]
    try:
        return difference(Bool("or", only), [], grammar, where)
    except CompileError:
        return alt(*[difference(n, nodes[:i] + nodes[i + 1:], grammar, where) for i, n in enumerate(nodes)])


def pattern_minus_names(pattern: str, names, grammar, where: str):
    """JSON string content matching `pattern`, none of the strings in `names` (the
    declared property names a patternProperties key may not spell)."""
    return difference(pattern_chars(pattern, where), [literal_chars(n) for n in names], grammar, where)


def literal_chars(name: str):
    """Decoded-char IR of exactly the string `name`."""
    return seq(*(cls(((ord(ch), ord(ch)),)) for ch in name))


def pattern_chars(pattern: str, where: str):
    """Decoded-character IR of the strings `pattern` matches (unanchored ends padded);
    a difference.Bool of such nodes when it has lookaheads (see the module)."""
    return either(*[_branch_chars(b) for b in parse(pattern, "ecma", where, lookahead=True, boundaries=True)])


def _branch_chars(b):
    node = seq(EMPTY if b.start else ANY, chars_ir(b.node), EMPTY if b.end else ANY)
    looks = [alt(*[seq(chars_ir(x.node), EMPTY if x.end else ANY) for x in inner]) for _, inner in b.looks]
    f = both(node, *[y if positive else negation(y) for y, (positive, _) in zip(looks, b.looks)])
    if not isinstance(f, Bool) and has_bound(node):
        return Bool("and", (f,))  # a word boundary: difference.py's automata alone read it
    return f


def _with_bounds(f):
    """The IR of a Bool that pattern_chars made only to carry word boundaries (an "and"
    of one IR node, or an "or" of such), or None (a lookahead: a real formula)."""
    if not isinstance(f, Bool):
        return f
    if f.op == "and" and len(f.parts) == 1 and not isinstance(f.parts[0], Bool):
        return f.parts[0]
    if f.op == "or":
        parts = [_with_bounds(x) for x in f.parts]
        return None if None in parts else alt(*parts)
    return None


def bounded_rules(node, grammar, where: str):
    """JSON string content of the decoded-char IR `node` with word boundaries (Bound), as
    right-linear rules over its positions (lengths.Glushkov with words=True, the
    boundaries removed): an NFA, one rule per position from which the end is reachable,
    that the lazy automaton determinises only where walked. A pattern alone needs no
    product: `...[a-zA-Z0-9()]{1,6}\\b(...)` after a `{1,256}` repetition (JsonSchemaStore
    dein) determinises past difference.py's 3,000 states. More than BOUND_POSITIONS
    positions: CompileError."""
    g = Glushkov(BOUND_POSITIONS, words=True)
    try:
        nullable, first, last = g.boundaries(*g.build(node))
    except TooBig:
        raise CompileError("%s: pattern with a word boundary too large (more than %d positions)"
                           % (where, BOUND_POSITIONS)) from None
    live = live_states(range(len(g.follow)), g.follow, last)
    names = {p: grammar.new_name("bound") for p in sorted(live)}

    def body(succ, accepts):
        parts = [EMPTY] if accepts else []
        parts += [seq(encode_chars(g.classes[q]), Ref(names[q])) for q in sorted(succ) if q in live]
        return alt(*parts)

    for p, name in names.items():
        grammar.define(name, body(g.follow[p], p in last))
    return body(first, nullable)


def chars_ir(node):
    """Decoded-character IR (grammar.py) of a regex_syntax tree."""
    kind = node[0]
    if kind == "chars":
        return cls(node[1])
    if kind == "seq":
        return seq(*(chars_ir(n) for n in node[1]))
    if kind == "alt":
        return alt(*(chars_ir(n) for n in node[1]))
    if kind == "bound":
        return Bound(node[1])
    return rep(chars_ir(node[1]), node[2], node[3])
