"""Patterns and formats under minLength/maxLength counted by a length frame
(json_schema/lengths.length_frame, nfa.py's length regions, the automaton's ticks).

The frame's language is checked exactly: every string over a small alphabet (escaped
characters and non-ASCII ones among them) up to a few characters, JSON-encoded, against
Python's `re` plus len(); masks against brute force on random walks; the two MaskBench
schemas whose bounds are too large for the eager product compile and sort their
instances; a 65,536-character bound compiles to an NFA of the pattern's size."""
from __future__ import annotations

import itertools
import json
import os
import random
import re

import pytest

from furca.constrain.json_schema.grammar import Grammar, lit, seq
from furca.constrain.json_schema.lengths import length_frame
from furca.constrain.json_schema.lower import lower
from furca.constrain.json_schema.regex import pattern_chars

from .conftest import walk_checking_masks
from .test_json_schema_helpers import DATA, instance_text

ALPHABET = ["a", "b", " ", "\n", "\x01", '"', "\\", "é", "日"]

CASES = [  # (ECMA pattern, Python equivalent for re.search (\Z: Python's $ matches before a final \n), min, max)
    ("^(?:\\S+\\s+){0,3}\\S+$", r"^(?:\S+\s+){0,3}\S+\Z", 0, 3),
    ("^(?:\\S+\\s+){0,3}\\S+$", r"^(?:\S+\s+){0,3}\S+\Z", 2, 4),
    ("a|b.", r"a|b[^\n\r\u2028\u2029]", 1, 3),
    ("^[a-zé]*\\s?$", r"^[a-zé]*\s?\Z", 2, None),
    ("^(ab|\\n)+$", r"^(ab|\n)+\Z", 0, 3),
    ("^[^a]*$", r"^[^a]*\Z", 1, 2),
]


def frame_grammar(compiler, pattern, lo, hi):
    """The compiled JSON string `"..."` of pattern's strings with lo..hi characters,
    through the length frame whatever the size (the eager product is bypassed)."""
    g = Grammar()
    g.define("root", seq(lit('"'), length_frame(pattern_chars(pattern, "#"), lo, hi, g), lit('"')))
    return compiler._compile(lower(g), ("length-frame-test", pattern, lo, hi))


def accepts(grammar, text):
    m = grammar.matcher()
    return m.accept_string(text) and m.can_terminate()


def encodings(s):
    """s as JSON text: the shortest form, and with every character escaped as \\uXXXX
    where JSON allows it (the grammar takes \\u escapes for the control characters only)."""
    out = [json.dumps(s, ensure_ascii=False)]
    if "\n" in s or "\x01" in s:
        out.append('"' + "".join("\\u%04x" % ord(c) if c in "\n\x01" else json.dumps(c, ensure_ascii=False)[1:-1]
                                 for c in s) + '"')
    return out


@pytest.mark.parametrize("pattern,py,lo,hi", CASES)
def test_frame_language_is_exact(byte_compiler, pattern, py, lo, hi):
    g = frame_grammar(byte_compiler, pattern, lo, hi)
    assert g.automaton.nfa.length, "the length frame was not used"
    rx = re.compile(py)
    top = 4 if hi is None else hi + 1
    for n in range(top + 1):
        for chars in itertools.product(ALPHABET, repeat=n):
            s = "".join(chars)
            want = bool(rx.search(s)) and len(s) >= lo and (hi is None or len(s) <= hi)
            for text in encodings(s):
                assert accepts(g, text) == want, (pattern, lo, hi, text)


def test_frame_masks_equal_brute_force(byte_compiler):
    rng = random.Random(7)
    for pattern, _py, lo, hi in CASES:
        g = frame_grammar(byte_compiler, pattern, lo, hi)
        for _ in range(6):
            walk_checking_masks(g.matcher(), byte_compiler.info, rng, 8)


def test_deep_counts_share_masks(byte_compiler):
    """A long bound: counts far from it share one canonical state (one mask, on the
    region's twin without a maximum); within a token's reach of it the count is kept,
    and the bound still holds exactly at its end."""
    g = frame_grammar(byte_compiler, "^[ab]*$", 3, 600)
    a = g.automaton
    L = byte_compiler.info.max_token_len
    deep = [a.step(a.start, b'"' + b"ab" * n) for n in (100, 150, 200)]
    assert all(deep) and len(set(deep)) == 3  # distinct counts ...
    assert len({a.canonical(s) for s in deep}) == 1  # ... one mask
    near = [a.step(a.start, b'"' + b"a" * n) for n in (600 - L - 1, 600 - L + 1, 600 - L + 2)]
    assert a.canonical(near[0]) == a.canonical(deep[0])
    assert len({a.canonical(near[1]), a.canonical(near[2]), a.canonical(deep[0])}) == 3
    assert accepts(g, '"' + "a" * 600 + '"')
    assert not accepts(g, '"' + "a" * 601 + '"')
    assert not accepts(g, '"ab"')
    m = g.matcher()
    assert m.accept_string('"' + "ab" * 296)
    walk_checking_masks(m, byte_compiler.info, random.Random(2), 12)
    walk_checking_masks(g.matcher(), byte_compiler.info, random.Random(1), 40)


def test_long_max_length_compiles_small(byte_compiler):
    g = byte_compiler.compile_json_schema({"type": "string", "format": "uri", "maxLength": 65536})
    assert g.automaton.nfa.length
    assert len(g.automaton.nfa.edges) < 20_000
    assert accepts(g, '"https://example.com/a?b=c#d"')
    assert not accepts(g, '"not a uri"')
    assert accepts(g, '"http://x/' + "a" * 65527 + '"')
    assert not accepts(g, '"http://x/' + "a" * 65528 + '"')


def test_pattern_beyond_eager_product(byte_compiler):
    schema = {"type": "string", "pattern": "^(?:\\S+\\s+){0,29}\\S+$", "maxLength": 300}
    g = byte_compiler.compile_json_schema(schema)
    assert g.automaton.nfa.length
    words = " ".join(["é\u0001"] * 30)
    assert accepts(g, json.dumps(words, ensure_ascii=False))
    assert not accepts(g, json.dumps(words + " x", ensure_ascii=False))  # 31 words
    assert accepts(g, json.dumps("x" * 300))
    assert not accepts(g, json.dumps("x" * 301))
    assert accepts(g, json.dumps("\u0001" * 300))  # 300 characters, 1800 bytes
    assert not accepts(g, json.dumps("\u0001" * 301))
    assert not accepts(g, '""')


@pytest.mark.parametrize("name", ["Github_hard---o21076", "JsonSchemaStore---sourcery_yaml_schema"])
def test_maskbench_schemas(byte_compiler, name):
    with open(os.path.join(DATA, "length-frames", name + ".json"), encoding="utf-8") as fh:
        case = json.load(fh)
    g = byte_compiler.compile_json_schema(case["schema"])
    assert g.automaton.nfa.length
    for t in case["tests"]:
        assert accepts(g, instance_text(t["data"], case["schema"])) == t["valid"], t.get("description")


def test_no_dead_end_inside_the_bound(byte_compiler):
    """A prefix is allowed only when some completion fits the maximum: with
    `^(?:\\S+\\s+){0,29}\\S+$` and 6 characters at most, "ab cd " (6) cannot take its
    last word, so its last space is refused, while "ab cd" may end or take one more."""
    g = frame_grammar(byte_compiler, "^(?:\\S+\\s+){0,29}\\S+$", 0, 6)
    m = g.matcher()
    assert m.accept_string('"ab cd')
    assert not m.fork().accept_string(" ")
    assert m.fork().accept_string('"') and m.fork().accept_string('e"')
    assert not g.matcher().accept_string('"abcde ')
    walk_checking_masks(g.matcher(), byte_compiler.info, random.Random(3), 10)


def test_gbnf_text_refuses_a_length_region():
    from furca.constrain.json_schema import schema_to_gbnf
    from furca.errors import CompileError
    with pytest.raises(CompileError, match="maxLength 65536"):
        schema_to_gbnf({"type": "string", "format": "uri", "maxLength": 65536})
    assert "root ::=" in schema_to_gbnf({"type": "string", "pattern": "^a(b|c)*$", "maxLength": 5})
