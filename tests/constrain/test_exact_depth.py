"""Exact slice depths (slices.SliceBounds.tight, token_slices.TokenSlice.exact): a state a
few characters short of a bound (a string's maxLength, a pattern's counter) walked every
trie node down to that depth. Where every string of r + 1 slice characters dies and none
of at most r does, the mask now sets the slice's tokens of at most r characters at once
and walks only the tokens outside the slice. The masks are compared with brute force (each
token tried on a fork of the matcher) along random walks, with tokens of every length
around the bounds, escapes, multi-byte characters and tokens that close the string, and
the exact levels are seen taken (or not, where the bound is not tight; a string with a
counter, every bounded one, is served by string_counters.py's tables instead)."""
from __future__ import annotations

import random

import pytest

from furca.constrain import GrammarCompiler, _walk
from furca.constrain.slices import SliceBounds

from .conftest import accept_bytes, byte_info, spy_string_tables, walk_checking_masks

EXTRA = (["x" * k for k in range(2, 21)] + ["ab", "a-b", "9-", "Ab9", 'abc"', 'ab",', 'a"}', '"}', '":', '"', "é",
          "éé", "日本", "a\\", "\\n", "\\u00e9", "a b", "--", "1234567890", "abc/", '",', 'abcdefgh"'])

SCHEMAS = [  # (value schema, text before the value, whether an exact depth is met)
    # a bounded string counts its characters (a counter): the tables of string_counters.py
    ({"type": "string", "maxLength": 12}, '{"v":"', "tables"),
    ({"type": "string", "minLength": 8, "maxLength": 8}, '{"v":"', "tables"),
    ({"type": "string", "minLength": 2, "maxLength": 30}, '{"v":"', "tables"),
    ({"type": "string", "pattern": "^[a-z0-9-]{3,9}$"}, '{"v":"', True),
    ({"type": "string", "pattern": "^[a-z0-9-]{2,5}[a-z0-9-]{0,3}$"}, '{"v":"', True),
    ({"type": "array", "items": {"$ref": "#/$defs/s"}, "maxItems": 3}, '{"v":["', "tables"),
    ({"type": "string", "pattern": "^[^\"\\\\]{0,12}$"}, '{"v":"', True),
    # at the counter's bound only "x" goes on: a depth but no exact one
    ({"type": "string", "pattern": "^[a-z0-9-]{1,4}(x[a-z0-9-]*)?$"}, '{"v":"', False),
]


@pytest.fixture(scope="module")
def info():
    return byte_info(EXTRA)


@pytest.mark.skipif(_walk.get_walk() is None, reason="the slice levels' walks are compiled walks")
@pytest.mark.parametrize("value,prefix,met", SCHEMAS)
def test_masks_near_bounds_equal_brute_force(info, value, prefix, met, monkeypatch):
    exact = []
    orig = SliceBounds.tight

    def spy(self, s, sl, r):
        ok = orig(self, s, sl, r)
        exact.append(ok)
        return ok

    monkeypatch.setattr(SliceBounds, "tight", spy)
    served = spy_string_tables(monkeypatch)
    schema = {"type": "object", "properties": {"v": value, "n": {"type": "integer"}}, "required": ["v"],
              "$defs": {"s": {"type": "string", "maxLength": 6}}}
    g = GrammarCompiler(info).compile_json_schema(schema)
    for seed in range(6):
        walk_checking_masks(accept_bytes(g, prefix), info, random.Random(seed), 40)
    if met == "tables":
        assert any(served) and not any(exact), (served, exact)
    else:
        assert any(exact) == met, exact


def test_tight_at_a_strings_bound(info):
    """The state after k characters of a string of maxLength 12 is exactly 12 - k deep
    (whether or not the string may close before: the quote is no slice character): tight
    at 12 - k, not one character less or more; an unbounded string's state is never."""
    sl = info.slices()[0]
    for schema in ({"type": "string", "maxLength": 12}, {"type": "string", "minLength": 4, "maxLength": 12}):
        g = GrammarCompiler(info).compile_json_schema(schema)
        for k in (3, 6, 11):
            s = accept_bytes(g, '"' + "q" * k)._t[0]
            sb = g.masks.slices
            assert sb.slice_depth(s, sl) == 12 - k
            assert [sb.tight(s, sl, r) for r in (12 - k - 1, 12 - k, 12 - k + 1)] == [False, True, False], (schema, k)
    u = GrammarCompiler(info).compile_json_schema({"type": "string"})
    s = accept_bytes(u, '"ab')._t[0]
    assert not any(u.masks.slices.tight(s, sl, r) for r in (1, 5, 15))


GRAMMARS = [  # a bounded rule whose caller goes on with more of the same characters
    'root ::= "\\"" a b "\\""\na ::= [a-z0-9-]{1,3}\nb ::= [a-z0-9-]*',
    'root ::= "\\"" a a "x" a "\\""\na ::= [a-z0-9-]{2,4}',
    'root ::= "<" s "|" s ">"\ns ::= [^|<>]{1,5}',
    # a wide rule (its masks come from its abstract state and the caller's continuation):
    # the abstract state may end after one character, so it has no exact depth
    'root ::= "\\"" a b "\\""\na ::= [^"\\\\]{1,3}\nb ::= [^"\\\\]*',
    # ... which may end after one or two characters but not after three
    'root ::= "\\"" a b "\\""\na ::= [^"\\\\]{1,2} | [^"\\\\]{3} "\\t"\nb ::= [^"\\\\]*',
    # ... which ends after exactly three (its last level accepting)
    'root ::= "\\"" a b "\\""\na ::= [^"\\\\]{3}\nb ::= [^"\\\\]*',
]


@pytest.mark.skipif(_walk.get_walk() is None, reason="the slice levels' walks are compiled walks")
@pytest.mark.parametrize("grammar", GRAMMARS)
def test_masks_of_bounded_rules_equal_brute_force(info, grammar):
    g = GrammarCompiler(info).compile_grammar(grammar)
    for seed in range(8):
        walk_checking_masks(g.matcher(), info, random.Random(seed), 30)
