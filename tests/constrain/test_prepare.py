"""nfa.prepare: one walk per rule, rules rebuilt only where something never matches;
its kept rules, nullable set and errors against a plain fixpoint reference."""
from __future__ import annotations

import random

import pytest

from furca.constrain import ir
from furca.constrain.nfa import build_nfa
from furca.constrain.prepare import _simplify, prepare
from furca.errors import CompileError


def _lit(s):
    return ir.literal(s)


def _ref(n):
    return ("ref", n, 0)


def test_clean_rules_are_kept_as_they_are():
    a = ir.seq([_lit("a"), _ref("b")])
    b = ("rep", ir.alt([_lit("x"), ir.EMPTY]), 1, None)
    out = prepare(ir.Grammar({"root": a, "b": b, "unused": _lit("u")}))
    assert list(out.rules) == ["root", "b"]  # g's order, unreachable dropped
    assert out.rules["root"] is a and out.rules["b"] is b
    assert out.nullable == {"b"}


def test_rules_holding_what_never_matches_are_rebuilt():
    g = ir.Grammar({
        "root": ir.alt([_lit("a"), _ref("loop"), ir.seq([_lit("b"), ("byte", ())]), _ref("c")]),
        "loop": ir.seq([_lit("x"), _ref("loop")]),  # never completes
        "c": ir.seq([_lit("c"), ("rep", _ref("loop"), 0, 3), ("rep", _lit("z"), 0, 0)]),
    })
    out = prepare(g)
    assert list(out.rules) == ["root", "c"]
    assert out.rules["root"] == ir.alt([_lit("a"), _ref("c")])
    assert out.rules["c"] == _lit("c")
    assert out.nullable == set()


@pytest.mark.parametrize("rules, match", [
    ({"root": _ref("nope")}, "undefined rule 'nope'"),
    ({"root": ir.seq([_ref("root"), _ref("nope")])}, "undefined rule 'nope'"),  # in a rule left recursion empties
    ({"x": _lit("a")}, "no root rule"),
    ({"root": ir.seq([_lit("a"), _ref("root")])}, "matches no string"),
    ({"root": ir.alt([_ref("a"), _lit("z")]), "a": ir.seq([_ref("b"), _lit("x")]),
      "b": ir.alt([ir.seq([_ref("a"), _lit("y")]), _lit("w")])}, "left recursion is not supported"),
])
def test_errors(rules, match):
    with pytest.raises(CompileError, match=match):
        prepare(ir.Grammar(rules))


def test_long_call_chains_settle():
    """Nullable / productive facts that travel through 2,000 rules, declared in either order."""
    n = 2000
    for order in (1, -1):
        names = ["root"] + ["r%d" % i for i in range(1, n)]
        rules = {names[i]: ir.seq([_ref(names[i + 1]), ("rep", _lit("a"), 0, 1)]) for i in range(n - 1)}
        rules[names[-1]] = ir.alt([ir.EMPTY, _lit("b")])
        out = prepare(ir.Grammar(dict(list(rules.items())[::order])))
        assert out.nullable == set(names)


# ---------------------------------------------------------------- random grammars vs a reference
def _derives(e, s, empty):
    k = e[0]
    if k == "byte":
        return not empty and bool(e[1])
    if k in ("seq", "alt"):
        return (all if k == "seq" else any)(_derives(x, s, empty) for x in e[1])
    if k == "rep":
        return e[2] == 0 or _derives(e[1], s, empty)
    return e[1] in s


def _fixpoint(g, empty):
    s, changed = set(), True
    while changed:
        changed = False
        for n, e in g.rules.items():
            if n not in s and _derives(e, s, empty):
                s.add(n)
                changed = True
    return s


def _reference(g):
    """(productive, kept rule names, nullable kept names): the textbook fixpoints, then
    reachability from root through productive rules only."""
    nullable, productive = _fixpoint(g, True), _fixpoint(g, False)
    reach, todo = {g.root}, [g.root]
    while todo:
        for r in ir.refs(_simplify(g.rules[todo.pop()], productive), []):
            if r[0] not in reach:
                reach.add(r[0])
                todo.append(r[0])
    return productive, reach, nullable & reach


def _random_expr(rng, names, depth):
    k = rng.random()
    if depth > 3 or k < 0.3:
        return rng.choice([_ref(rng.choice(names)), _lit(rng.choice("ab")), ("byte", ()), ir.EMPTY])
    items = [_random_expr(rng, names, depth + 1) for _ in range(rng.randint(0, 3))]
    if k < 0.55:
        return ("seq", items)
    if k < 0.8:
        return ("alt", items)
    lo = rng.randint(0, 2)
    return ("rep", _random_expr(rng, names, depth + 1), lo, rng.choice([None, lo, lo + 1, 0]))


def test_random_grammars_match_the_reference():
    rng = random.Random(14)
    checked = 0
    for _ in range(400):
        names = ["root"] + ["n%d" % i for i in range(rng.randint(0, 6))]
        # every rule starts with a byte: left recursion is tested above, not here
        g = ir.Grammar({n: ir.seq([_lit("s"), _random_expr(rng, names, 0)]) for n in names})
        productive, reach, nullable = _reference(g)
        if "root" not in productive:
            with pytest.raises(CompileError, match="matches no string"):
                prepare(g)
            continue
        out = prepare(g)
        assert set(out.rules) == reach and out.nullable == nullable
        for n, e in out.rules.items():  # each kept rule means what its simplified form does
            assert _simplify(e, productive) == _simplify(g.rules[n], productive)
        build_nfa(out)
        checked += 1
    assert checked > 200
