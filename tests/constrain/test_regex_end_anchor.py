"""ECMA `$` inside a JSON Schema pattern (end of input wherever it is written): the
compiled grammar accepts exactly the strings ECMA-262 search semantics accepts, checked
on every string up to length 5 over the patterns' alphabet (Python's re with `\\Z` for
`$` is the reference: the same meaning on strings without a newline)."""
import itertools
import json
import re

import pytest

from furca.constrain import CompileError
from furca.constrain.regex_syntax import parse

from .conftest import BYTE_EOS, walk_ids

PATTERNS = [
    r"^(\/?((\.{2})|([a-z0-9\-]*))($|\/))*$",  # MaskBench Github_hard---o69430
    r"a($|b)",
    r"(a$|b)+",
    r"^(a|$){2,3}b?",
    r"^\.(a$)?",
    r"^(b|a$){2}",
    r"(?:a$){0}b",
    r"^(a(b|$)|\.)*$|^\/",
]
ALPHABET = "ab/."


def _accepts(g, info, s):
    m = g.matcher()
    ok = walk_ids(m, list(json.dumps(s).encode()) + [BYTE_EOS], info)
    return ok and m.is_terminated()


@pytest.mark.parametrize("pattern", PATTERNS)
def test_end_anchor_inside_pattern_is_exact(byte_compiler, pattern):
    g = byte_compiler.compile_json_schema({"type": "string", "pattern": pattern})
    ref = re.compile(pattern.replace("$", r"\Z"))
    seen = {True: 0, False: 0}
    for n in range(6):
        for chars in itertools.product(ALPHABET, repeat=n):
            s = "".join(chars)
            want = ref.search(s) is not None
            assert _accepts(g, byte_compiler.info, s) == want, (pattern, s, want)
            seen[want] += 1
    assert seen[True] and seen[False]


def test_end_anchor_followed_by_a_character_matches_nothing(byte_compiler):
    assert parse("a$b", "ecma") == []
    with pytest.raises(CompileError, match="accepts no JSON value"):
        byte_compiler.compile_json_schema({"type": "string", "pattern": "a$b"})
    g = byte_compiler.compile_json_schema({"anyOf": [{"type": "string", "pattern": "a$b"}, {"type": "integer"}]})
    assert _accepts(g, byte_compiler.info, 7)
    assert not _accepts(g, byte_compiler.info, "a")
    assert not _accepts(g, byte_compiler.info, "ab")


@pytest.mark.parametrize("pattern", [r"a^b", r"(a|^)b", r"^a$|x(^|y)"])
def test_start_anchor_inside_stays_a_compile_error(pattern):
    with pytest.raises(CompileError, match="anchor '\\^' in the middle"):
        parse(pattern, "ecma")


def test_python_dialect_keeps_the_error_for_end_anchor_inside():
    """Python's `$` also matches before a final newline: not the ECMA rewrite."""
    with pytest.raises(CompileError, match="anchor '\\$' in the middle"):
        parse(r"(a$|b)+", "python")
