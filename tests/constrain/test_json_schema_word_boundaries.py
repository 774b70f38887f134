"""Word boundaries in JSON Schema patterns (`\\b`, `\\B`, ECMA-262: the word characters
are [A-Za-z0-9_], the ends of the string count as other characters). regex_syntax reads
them for json_schema only (`parse(..., boundaries=True)`); lengths.Glushkov splits each
class into word and other characters and removes the assertions' positions, keeping the
edges between characters where they hold; a pattern alone becomes rules over those
positions (regex.bounded_rules), a pattern among others (a oneOf, a `not`, lengths) the
product of difference.py. Every string over a small alphabet is checked against Python's
`re` (ASCII), which agrees with ECMA-262 here except that its `\\B` does not hold in the
empty string."""
from __future__ import annotations

import itertools
import json
import re

import pytest

from furca.constrain import CompileError
from furca.constrain.regex_syntax import parse

from .conftest import BYTE_EOS, walk_ids

ALPHABET = "ab _-"


def _accepts(g, info, value):
    m = g.matcher()
    return walk_ids(m, list(json.dumps(value).encode()) + [BYTE_EOS], info) and m.is_terminated()


def _ecma(pattern, s):
    """re.search with ECMA-262's `\\B` at the empty string (holds: both sides are ends)."""
    if s == "":
        pattern = pattern.replace("\\B", "")
    return re.search(pattern, s, re.ASCII) is not None


def _exhaustive(g, info, accepts, n=4):
    seen = {True: 0, False: 0}
    for k in range(n + 1):
        for chars in itertools.product(ALPHABET, repeat=k):
            s = "".join(chars)
            want = accepts(s)
            assert _accepts(g, info, s) == want, (s, want)
            seen[want] += 1
    assert seen[True] and seen[False]


PATTERNS = [r"\bab\b", r"^a\b", r"\Ba", r"a\B", r"\b", r"\B", r"^(a|\b)+b$", r"a\b\W", r"^\w+\b-",
            r"^(?:\ba|b\b| )*$", r"(\b|_)a(\B|b)", r"^\B-", r"[ab]{2,3}\b", r"(?=a\b)", r"^(?!\w+\b )"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_boundaries_agree_with_re(byte_compiler, pattern):
    g = byte_compiler.compile_json_schema({"type": "string", "pattern": pattern})
    _exhaustive(g, byte_compiler.info, lambda s: _ecma(pattern, s))


@pytest.mark.parametrize("schema, accepts", [
    ({"type": "string", "pattern": r"\bab", "maxLength": 3}, lambda s: _ecma(r"\bab", s) and len(s) <= 3),
    ({"type": "string", "pattern": r"a\b", "not": {"pattern": "^_"}}, lambda s: _ecma(r"a\b", s) and not s.startswith("_")),
    ({"type": "string", "oneOf": [{"pattern": r"\ba"}, {"pattern": r"b\b"}]},
     lambda s: _ecma(r"\ba", s) != _ecma(r"b\b", s)),
])
def test_boundaries_beside_other_keywords(byte_compiler, schema, accepts):
    """A pattern with boundaries under a length bound, a `not` and a oneOf: difference.py's
    products read the boundaries as the pattern alone does."""
    _exhaustive(byte_compiler.compile_json_schema(schema), byte_compiler.info, accepts)


def test_a_long_repetition_before_a_boundary(byte_compiler):
    """JsonSchemaStore dein's Url: a `{1,256}` repetition, then a boundary. As rules over
    its positions (an NFA the automaton walks lazily), not a determinised product."""
    pattern = r"^https?:\/\/(www\.)?[-a-zA-Z0-9@:%._\+~#=]{1,256}\.[a-zA-Z0-9()]{1,6}\b([-a-zA-Z0-9()@:%_\+.~#?&//=]*)$"
    g = byte_compiler.compile_json_schema({"type": "string", "pattern": pattern})
    cases = ["https://example.com", "http://www.a.io/x?y=1", "https://a.b(c", "https://a.bc(", "https://a.b(",
             "https://a." + "b" * 7, "ftp://a.com", "https://" + "a" * 256 + ".com", "https://" + "a" * 257 + ".com"]
    for s in cases:
        assert _accepts(g, byte_compiler.info, s) == (re.search(pattern, s, re.ASCII) is not None), s


def test_where_boundaries_are_errors(byte_compiler):
    with pytest.raises(CompileError, match="nothing to repeat"):
        byte_compiler.compile_json_schema({"type": "string", "pattern": r"\b{2}a"})
    with pytest.raises(CompileError, match="accepts no JSON value"):
        byte_compiler.compile_json_schema({"type": "string", "pattern": r"\b\B"})
    with pytest.raises(CompileError, match="word boundary"):  # the python dialect (regex constraints): not read
        byte_compiler.compile_regex(r"a\b")
    assert parse(r"a\bc", "ecma", boundaries=True)[0].node == ("seq", [("chars", [(97, 97)]), ("bound", False, 1),
                                                                          ("chars", [(99, 99)])])
