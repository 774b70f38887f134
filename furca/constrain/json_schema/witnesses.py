"""Objects that must hold some member: `x-furca-some-member` (logic.SOME_MEMBER).

logic.negate writes the complement of patternProperties, additionalProperties and
propertyNames as a requirement [{names, value}]: an object with a member whose name the
`names` schema (a propertyNames schema, names.py) allows and whose value `value`
accepts. oneOf's exclusivity then has complements for closed objects too
(exclusive.py), and `not` of those keywords compiles. Several requirements (a merge of
several complements) must all be met, by one member or by several.

Each requirement is met either by a declared member (one alternative per declared name
the requirement allows: that member required, its value merged with `value`) or by an
extra member. The alternatives are the product of those choices (MAX_ALTERNATIVES at
most). Where extra members must meet a set W of requirements, the extras' tail walks a
state per subset S of W met so far (2^|W| rules at most, |W| <= MAX_REQUIREMENTS): any
extra member keeps S; a member meeting the requirements T (names met, values merged:
`ways`) moves to S | T; the object may close once S = W. In `properties` order only,
without maxProperties or minProperties above 1 (the counted layouts take no witness).
"""
from __future__ import annotations

from itertools import product

from .grammar import NOTHING, alt, rep, seq
from .logic import SOME_MEMBER
from .merge import FALSE, merge
from .names import NO_NAME, Names, property_names

MAX_REQUIREMENTS = 3
MAX_ALTERNATIVES = 64  # (declared names that may meet a requirement + 1), multiplied over the requirements


def some_member_object(c, schema, where, declared, build):
    """The objects of `schema` (with SOME_MEMBER) as an alternation. declared: the names
    the object declares (its properties, required ones and finite patterns'); build(s,
    witnesses): the object grammar of s whose extra members meet `witnesses`
    ([(Names or None, value)], containers.object_grammar)."""
    rest = {k: v for k, v in schema.items() if k != SOME_MEMBER}
    reqs = schema[SOME_MEMBER]
    if not isinstance(reqs, list) or not all(isinstance(r, dict) for r in reqs) or len(reqs) > MAX_REQUIREMENTS:
        c.unsupported("not", where, "objects with more than %d members each named otherwise" % MAX_REQUIREMENTS)
        return build(rest, ())
    named = [(property_names(c, r.get("names", True), where + "/not/propertyNames"), r.get("value", True))
             for r in reqs]
    if any(names is not None and names.nodes is None for names, _ in named):
        return NOTHING  # a requirement no name meets
    options = [[n for n in declared if names is None or names.ok(n)] + [None] for names, _ in named]
    count = 1
    for o in options:
        count *= len(o)
    if count > MAX_ALTERNATIVES:
        c.unsupported("not", where, "%d ways of naming the members it needs" % count)
        return build(rest, ())
    parts = []
    for choice in product(*options):
        sub, extra = dict(rest, type="object"), []
        for name, (names, value) in zip(choice, named):
            if name is None:
                extra.append((names, value))
            elif sub is not FALSE:
                sub = merge(sub, {"required": [name], "properties": {name: value}}, where)
        if sub is not FALSE:
            parts.append(build(sub, tuple(extra)))
    return alt(*parts)


def meet(a, b):
    """Names both allow (None: every name)."""
    if a is None or b is None:
        return b if a is None else a
    if a.nodes is None or b.nodes is None:
        return NO_NAME
    return Names(a.nodes + b.nodes, lambda n: a.ok(n) and b.ok(n), ("meet", a.key, b.key))


def witness_ways(c, witnesses, where, one_way):
    """{T: IR of one extra member meeting the witnesses in bit set T} (NOTHING left out).
    one_way(names, value): that member's IR, for the names met and the values merged."""
    ways = {}
    for t in range(1, 1 << len(witnesses)):
        names, value = None, True
        for k, (n, v) in enumerate(witnesses):
            if t >> k & 1:
                names = meet(names, n)
                value = merge(c.resolve_for_merge(value, where), c.resolve_for_merge(v, where), where)
        if value is FALSE or (names is not None and names.nodes is None):
            continue
        ir = one_way(names, value)
        if ir != NOTHING:
            ways[t] = c.g.share(c.g.new_name("witness-member"), ir)
    return ways


def extras_end(c, extra, ways, count):
    """(the extra members alone, non-empty; the extra members after a declared one, each
    with its comma) when together they meet all `count` witnesses through `ways`."""
    comma, full = c.comma, (1 << count) - 1
    plain = rep(seq(comma, extra), 0, None)
    memo = {}

    def tail(s):
        if s == full:
            return plain
        if s not in memo:
            steps = [seq(comma, w, tail(s | t)) for t, w in ways.items() if not t & s]
            memo[s] = c.g.share(c.g.new_name("witness-rest"), seq(plain, alt(*steps))) if steps else NOTHING
        return memo[s]

    only = alt(seq(extra, tail(0)), *[seq(w, tail(t)) for t, w in ways.items()])
    return only, tail(0)
