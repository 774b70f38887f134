"""The translator's code-point set helpers (json_schema/grammar.py) against Python sets,
and the node constructors' merging."""
from __future__ import annotations

import random

from furca.constrain.json_schema.grammar import (
    MAX_CP, NOTHING, Alt, Cls, Lit, Seq, alt, complement, intersect, lit, normalize, seq, subtract)


def _members(ranges):
    return {c for lo, hi in ranges for c in range(lo, hi + 1)}


def _is_normalized(r):
    return isinstance(r, tuple) and all(lo <= hi for lo, hi in r) and \
        all(r[k][1] + 1 < r[k + 1][0] for k in range(len(r) - 1))


def test_set_operations_match_python_sets():
    rng = random.Random(14)
    for _ in range(3000):
        a, b = ([(x, x + rng.randint(0, 6)) for x in (rng.randint(0, 80) for _ in range(rng.randint(0, 6)))]
                for _ in range(2))
        for got, want in ((normalize(a), _members(a)), (intersect(a, b), _members(a) & _members(b)),
                          (subtract(a, b), _members(a) - _members(b))):
            assert _is_normalized(got) and _members(got) == want, (a, b)
        c = complement(a)
        assert _is_normalized(c) and c[-1] == (c[-1][0], MAX_CP)
        assert _members(intersect(c, [(0, 200)])) == set(range(201)) - _members(a)


def test_constructors_merge_and_propagate_nothing():
    assert seq(lit("ab"), lit(""), lit("c")) == Lit("abc")
    assert seq(lit("a"), NOTHING, lit("b")) == NOTHING
    x = seq(lit("a"), Cls(((48, 57),)))
    assert seq(x, lit("b")) == Seq((Lit("a"), Cls(((48, 57),)), Lit("b")))  # a Seq's items are spliced in
    # single code points become one class, the rest keep their order after it
    assert alt(lit("x"), x, Cls(((48, 57),)), lit("y"), x) == Alt((Cls(((48, 57), (120, 121))), x))
    assert alt(lit("x"), x) == Alt((Lit("x"), x))  # one single: left in place
    assert alt(NOTHING, x) == x
