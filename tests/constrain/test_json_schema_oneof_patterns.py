"""oneOf of string branches constrained by `pattern` alone: each branch excludes the
others' patterns (json_schema/difference.py), so the grammar accepts exactly the strings
one pattern matches. Checked on every string up to length 4 over the patterns' alphabet
against the definition (Python's re: the same meaning on these patterns)."""
import itertools
import json
import re

import pytest

from furca.constrain import CompileError

from .conftest import BYTE_EOS, walk_ids

UUID_LOWER = "^[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}$"
UUID_UPPER = "^[0-9A-F]{8}-([0-9A-F]{4}-){3}[0-9A-F]{12}$"
CASES = [
    ["^[0-9a]{2}$", "^[0-9A]{2}$"],  # overlapping in the digits, as the uuid cases
    ["a", "b"],  # unanchored: contains a, or contains b, not both
    ["a", "b", "^.{2}$"],  # three branches
    ["^a*$", "^(aa)*$"],  # one branch inside the other: only odd runs of a
    ["^0", "0$", "^A+$"],
    ["ab", "ba", "aA0"],  # words that overlap: a matched one's padding decides its automaton for good
]
ALPHABET = "aAb0"


def _accepts(g, info, value):
    m = g.matcher()
    return walk_ids(m, list(json.dumps(value).encode()) + [BYTE_EOS], info) and m.is_terminated()


@pytest.mark.parametrize("patterns", CASES)
def test_oneof_of_patterns_is_exact(byte_compiler, patterns):
    g = byte_compiler.compile_json_schema({"type": "string", "oneOf": [{"pattern": p} for p in patterns]})
    refs = [re.compile(p) for p in patterns]
    seen = {True: 0, False: 0}
    for n in range(5):
        for chars in itertools.product(ALPHABET, repeat=n):
            s = "".join(chars)
            want = sum(r.search(s) is not None for r in refs) == 1
            assert _accepts(g, byte_compiler.info, s) == want, (patterns, s, want)
            seen[want] += 1
    assert seen[True] and seen[False]


def test_oneof_of_uuid_cases(byte_compiler):
    """MaskBench Github_hard---o2070: lower- or upper-case uuids, exclusively."""
    g = byte_compiler.compile_json_schema({"type": "string", "oneOf": [{"pattern": UUID_LOWER},
                                                                       {"pattern": UUID_UPPER}]})
    ok = ["123e4567-e89b-12d3-a456-426655440000", "123E4567-E89B-12D3-A456-426655440000"]
    bad = ["12345678-1234-1234-1234-123456789012",  # digits only: both patterns match
           "123e4567-E89B-12d3-a456-426655440000", "123e4567-e89b-12d3-a456-42665544000", 7]
    for v in ok:
        assert _accepts(g, byte_compiler.info, v), v
    for v in bad:
        assert not _accepts(g, byte_compiler.info, v), v


def test_other_types_beside_the_patterns_are_kept(byte_compiler):
    g = byte_compiler.compile_json_schema({"oneOf": [{"type": ["string", "integer"], "pattern": "a"},
                                                     {"type": "string", "pattern": "b"}]})
    for v, want in [("xa", True), ("b", True), ("ab", False), (3, True), (None, False)]:
        assert _accepts(g, byte_compiler.info, v) == want, v


def test_pattern_with_another_string_keyword_is_not_excluded(byte_compiler):
    """Only pattern-only branches are made exclusive this way; others lose the shared type."""
    with pytest.raises(CompileError, match="accepts no JSON value"):
        byte_compiler.compile_json_schema({"type": "string", "oneOf": [{"pattern": "a", "maxLength": 3},
                                                                       {"pattern": "b"}]})


def test_equivalent_product_states_are_one_rule():
    """difference.py's product automaton is minimised (Moore's refinement): a state
    counter mod 4 of which only the parity matters is two classes; a state that cannot
    go on differs from one that can."""
    from furca.constrain.json_schema.difference import _minimal_classes
    a = ((97, 97),)
    edges = {k: {(k + 1) % 4: list(a)} for k in range(4)}
    cls = _minimal_classes(list(range(4)), edges, final={0, 2})
    assert cls[0] == cls[2] != cls[1] == cls[3]
    edges = {0: {1: list(a)}, 1: {}, 2: {3: list(a)}, 3: {3: list(a)}}  # {a}, {""}, a+, a*
    cls = _minimal_classes(list(range(4)), edges, final={1, 3})
    assert len(set(cls.values())) == 4
    edges = {0: {1: list(a)}, 1: {2: list(a)}, 2: {}, 3: {4: list(a)}, 4: {5: list(a)}, 5: {}}  # two chains of aa
    cls = _minimal_classes(list(range(6)), edges, final={2, 5})
    assert (cls[0], cls[1], cls[2]) == (cls[3], cls[4], cls[5]) and len(set(cls.values())) == 3


def test_a_search_for_many_words_minus_a_value(byte_compiler):
    """Github_hard o83677's `type`: a pattern of unanchored alternatives (contains one of
    ten words) beside `not: {const: ...}`. Each alternative's any-character padding holds
    once its word matched, so the product keeps one state for every "some word matched"
    (difference._Auto.settle): which words matched would be 2^10 position sets times the
    partial matches, past the product's 3,000 states (compiled to an error before)."""
    words = ["date", "time", "string", "enum", "int", "double", "long", "boolean"]
    pattern = "^list|" + "|".join(words) + "|number$"
    g = byte_compiler.compile_json_schema({"type": "string", "pattern": pattern, "not": {"const": "enum"}})
    ref = re.compile(pattern)
    cases = ["enum", "enums", "xenum", "date", "a date and a time", "list", "xlist", "number", "numberx",
             "longint", "boolean string enum", "nothing", "", "dat", "in t"]
    for s in cases:
        want = ref.search(s) is not None and s != "enum"
        assert _accepts(g, byte_compiler.info, s) == want, (s, want)


WORDS = ["abcd", "efgh", "ijkl", "mnop", "qrst"]
WORD_SAMPLES = ["abcd", "xabcdx", "abcdefgh", "efgh", "qrst", "qrsabcd", "", "abc", "mnopijkl", "zzzz",
                "ijkl ijkl", "qrstqrst", "abcdabcd", "mnoqrst", "efghx"]


def _exactly_one(patterns, s):
    return sum(re.search(p, s) is not None for p in patterns) == 1


def test_pattern_branches_are_one_product(byte_compiler, monkeypatch):
    """A oneOf of pattern-only string branches is one product of the patterns (exclusive.
    one_product, regex.one_of_patterns): the same strings, exactly one pattern matched,
    and a string's state holds one rule set's configurations, not every branch's."""
    from furca.constrain import GrammarCompiler
    from furca.constrain.json_schema import compiler as json_compiler
    from furca.constrain.json_schema.difference import NOT_PATTERNS, ONE_OF_PATTERNS
    from furca.constrain.json_schema.compiler import ANNOTATIONS
    from furca.constrain.json_schema.exclusive import one_product

    branches = [{"type": "string", "pattern": w, NOT_PATTERNS: sorted(set(WORDS) - {w})} for w in WORDS]
    assert one_product(branches, ANNOTATIONS) == [{"type": "string", ONE_OF_PATTERNS: WORDS}]
    assert one_product(branches[:1], ANNOTATIONS) == branches[:1]
    with_length = [{**branches[0], "minLength": 2}] + branches[1:]
    assert one_product(with_length, ANNOTATIONS) == with_length
    schema = {"type": "string", "oneOf": [{"pattern": w} for w in WORDS]}
    g = byte_compiler.compile_json_schema(schema)
    for s in WORD_SAMPLES:
        assert _accepts(g, byte_compiler.info, s) == _exactly_one(WORDS, s), s
    a = g.automaton
    merged = len(a.configs[a.step(a.start, b'"')])
    monkeypatch.setattr(json_compiler, "one_product", lambda out, _annotations: out)
    b = GrammarCompiler(byte_compiler.info).compile_json_schema(schema).automaton
    assert merged < len(b.configs[b.step(b.start, b'"')])


def test_one_product_past_its_limit_is_the_branches(byte_compiler, monkeypatch):
    """Where the one product outgrows difference.py's state limit (107 states here, the
    limit set to 60) and each branch's does not (39), the branches' own products are
    read side by side, as before: the same strings."""
    from furca.constrain import GrammarCompiler
    from furca.constrain.json_schema import difference as diff
    from furca.constrain.json_schema import regex as json_regex

    failed = []

    def spy(*args, **kw):
        try:
            return diff.difference(*args, **kw)
        except CompileError as e:
            failed.append(str(e))
            raise

    monkeypatch.setattr(json_regex, "difference", spy)
    monkeypatch.setattr(diff, "MAX_STATES", 60)
    info = byte_compiler.info
    g = GrammarCompiler(info).compile_json_schema({"type": "string", "oneOf": [{"pattern": w} for w in WORDS]})
    assert failed == ["#: pattern excluding another needs more than 60 states"]  # the one product only
    for s in WORD_SAMPLES:
        assert _accepts(g, info, s) == _exactly_one(WORDS, s), s
    monkeypatch.setattr(diff, "MAX_STATES", 30)  # no branch fits either: the error as before
    with pytest.raises(CompileError, match="more than 30 states"):
        GrammarCompiler(info).compile_json_schema({"type": "string", "oneOf": [{"pattern": w} for w in WORDS]})


def test_disjoint_patterns_exclude_nothing(byte_compiler):
    """oneOf branches whose patterns no string matches both (difference.disjoint: their
    product explored until a state both accept) exclude nothing from each other: the
    branches stay plain patterns, and the oneOf is still exact."""
    from furca.constrain.json_schema.difference import NOT_PATTERNS, ONE_OF_PATTERNS, disjoint
    from furca.constrain.json_schema.exclusive import exclusive_branches
    from furca.constrain.json_schema.regex import pattern_chars

    def apart(a, b, **kw):
        return disjoint(pattern_chars(a, "#"), pattern_chars(b, "#"), "#", **kw)

    assert apart("^a", "^b") and apart("^[0-9]{3}$", "^[a-z]+$") and apart("^(?!a)", "^a")
    assert not apart("a", "b") and not apart("^a+$", "^(aa)+$") and not apart("^(?!a)", "b$")
    assert apart("^a{50}b", "^a{50}c") and not apart("^a{50}b", "^a{50}c", max_states=10)  # unknown: not disjoint
    subs = [{"pattern": "^https?://"}, {"pattern": "^[~|/][a-z]+$"}, {"pattern": "^[a-z]+/[a-z]+$"}]
    out, _ = exclusive_branches(subs, {"type": "string"}, False, "#")
    assert all(NOT_PATTERNS not in b and ONE_OF_PATTERNS not in b for b in out)
    g = byte_compiler.compile_json_schema({"type": "string", "oneOf": subs})
    refs = [re.compile(s["pattern"]) for s in subs]
    for s in ["https://x", "http://", "/abc", "~a", "ab/cd", "ab/", "https:/x", "", "|z", "a/b/c"]:
        assert _accepts(g, byte_compiler.info, s) == (sum(r.search(s) is not None for r in refs) == 1), s
