"""Regex front end + lazy automaton, with a byte tokenizer: tables of passing and
failing strings checked against Python's re (ASCII mode), mask == accept_token."""

import json
import random
import re

import pytest

from furca.constrain import CompileError
from furca.constrain.regex_syntax import parse

from .conftest import BYTE_EOS, allowed_set, walk_ids

CASES = [
    (r"\d+", ["0", "123", "9999999999"], ["", "a", "12a", "-1"]),
    (r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?", ["0", "-12.5e+3", "7E9", "1.0"], ["01", "1.", "--1", "e5", ""]),
    (r"[a-z]{2,4}", ["ab", "abcd"], ["a", "abcde", "AB"]),
    (r"[^a-c]x", ["dx", "Zx", "日x", "🙂x"], ["ax", "cx", "x"]),
    (r"a|bc|", ["a", "bc", ""], ["b", "abc"]),
    (r"(?:ab)*c?", ["", "abab", "ababc", "c"], ["aba", "cc", "ca"]),
    (r"(?P<year>\d{4})-(\d{2})", ["2024-01"], ["24-01", "2024-1"]),
    (r"x{3}", ["xxx"], ["xx", "xxxx"]),
    (r"x{2,}", ["xx", "xxxxxxx"], ["x"]),
    (r"x{,2}y", ["y", "xy", "xxy"], ["xxxy"]),
    (r"a.+?b", ["a\tb", "aXYZb", "a日b"], ["ab", "a\nb"]),
    (r"(?s)a.b", ["a\nb", "axb"], ["ab"]),
    (r"\w+@\w+\.com", ["joe_1@mail.com"], ["joe@mail.org", "@mail.com"]),
    (r"\s*\S+\s*", [" x ", "abc", "\t\nq"], [" ", ""]),
    (r"[\d\-+.]+", ["+1-2.3"], ["a"]),
    (r"\x41\u00e9\U0001F642\n\t", ["Aé🙂\n\t"], ["Ae🙂\n\t"]),
    (r"(?i)hello", ["hello", "HeLLo"], ["hell"]),
    (r"a(?i:b)c", ["abc", "aBc"], ["ABC", "abC"]),
    (r"^abc$", ["abc"], ["abcd", ""]),
    (r"[]a]+", ["]a]"], ["b"]),
    (r"[\u4e00-\u9fff]{1,3}", ["日本語", "中"], ["", "日本語日", "a"]),
    (r"[^\x00-\x7f]", ["é", "🙂", "日"], ["a", "éé"]),
    (r"\.\*\+\?\(\)\[\]\{\}\|\\", [r".*+?()[]{}|\ "[:-1]], ["x"]),
    (r"(a|ab)(c|bcd)(d*)", ["abcd", "abcdd", "ac"], ["abc d"]),
    # large bounded repetitions run on a counter (nfa.COUNTER_THRESHOLD)
    (r"(?:ab){17,20}", ["ab" * 17, "ab" * 20], ["ab" * 16, "ab" * 21, "ab" * 17 + "a"]),
    (r"[a-z]{3,40}", ["abc", "a" * 40], ["ab", "a" * 41]),
    (r"x{20,}", ["x" * 20, "x" * 50], ["x" * 19]),
    (r"(?:a{0,20}b){0,30}", ["", "b" * 30, "a" * 20 + "b", "ab" * 30], ["b" * 31, "a" * 21 + "b", "a"]),
    (r"(?:[ab]{2}){17}c", ["ab" * 17 + "c"], ["ab" * 16 + "c", "ab" * 18 + "c"]),
    (r"(?:x|yz?){18,19}", ["x" * 18, "yz" * 19, "y" * 18], ["x" * 17, "x" * 20]),
]


def check_regex(compiler, pattern, passing, failing, probe_all=True):
    g = compiler.compile_regex(pattern)
    info = compiler.info
    for s in passing:
        assert re.fullmatch(pattern, s, re.ASCII), f"bad test: {pattern!r} !~ {s!r}"
        m = g.matcher()
        assert walk_ids(m, list(s.encode()) + [BYTE_EOS], info, check_probes=info.vocab_size if probe_all else 0), \
            f"{pattern!r} refused {s!r}: {m.error}"
        assert m.is_terminated()
    for s in failing:
        assert not re.fullmatch(pattern, s, re.ASCII), f"bad test: {pattern!r} ~ {s!r}"
        m = g.matcher()
        assert not walk_ids(m, list(s.encode()) + [BYTE_EOS], info), f"{pattern!r} accepted {s!r}"


@pytest.mark.parametrize("pattern,passing,failing", CASES)
def test_regex_table(byte_compiler, pattern, passing, failing):
    check_regex(byte_compiler, pattern, passing, failing)


@pytest.mark.parametrize("pattern", [p for p, _, _ in CASES])
def test_random_walk_fullmatches(byte_compiler, pattern):
    """Sampling uniformly under the mask always ends in a string the regex fullmatches."""
    g = byte_compiler.compile_regex(pattern)
    info = byte_compiler.info
    rng = random.Random(hash(pattern) & 0xFFFF)
    for _ in range(20):
        m = g.matcher()
        out = bytearray()
        for _step in range(60):
            bits = allowed_set(m, info)
            allowed = [i for i in range(info.vocab_size) if bits[i]]
            assert allowed, "empty mask before termination"
            # prefer ending after a while so walks finish
            t = BYTE_EOS if BYTE_EOS in allowed and (len(out) > 8 or rng.random() < 0.2) else rng.choice(allowed)
            assert m.accept_token(t)
            if t == BYTE_EOS:
                break
            out += info.token_bytes[t]
        if m.is_terminated():
            assert re.fullmatch(pattern, out.decode("utf-8"), re.ASCII), (pattern, bytes(out))


def test_multibyte_tokens_and_padding(byte_compiler):
    g = byte_compiler.compile_regex(r'\{"[a-c]+"\}')
    info = byte_compiler.info
    m = g.matcher()
    bits = allowed_set(m, info)
    ids = [i for i in range(info.vocab_size) if bits[i]]
    assert ids == [ord("{"), 258 + 3]  # "{" and the token '{"'
    assert not any(bits[info.vocab_size:])  # padding bits beyond the vocab
    for t in (258 + 3, ord("a"), 258 + 0, 258 + 2):  # {"  a  ab  "}
        assert m.accept_token(t), m.error
    assert m.accept_token(BYTE_EOS) and m.is_terminated()
    assert not byte_compiler.compile_regex("x").matcher().accept_token(257)  # special token


@pytest.mark.parametrize("pattern,what", [
    (r"(a)\1", "backreference"),
    (r"(?P<x>a)(?P=x)", "backreference"),
    (r"a(?=b)", "lookahead"),
    (r"a(?!b)", "negative lookahead"),
    (r"(?<=a)b", "lookbehind"),
    (r"(?<!a)b", "negative lookbehind"),
    (r"\bfoo", "word boundary"),
    (r"a(b", "missing )"),
    (r"a)b", "unbalanced parenthesis"),
    (r"[a-", "unterminated character set"),
    (r"*a", "nothing to repeat"),
    (r"a**", "multiple repeat"),
    (r"[z-a]", "bad character range"),
    (r"[\d-z]", "bad character range"),
    (r"a{3,2}", "min repeat greater than max"),
    (r"a^b", "anchor"),
    (r"a$b", "anchor"),
    (r"a*+", "possessive"),
    (r"(?>a)", "atomic"),
    (r"\q", "bad escape"),
    (r"(?x)a b", "flag 'x' is not supported"),
    (r"a(?m:^b)", "flag 'm' is not supported"),
    (r"(?L)a", "flag 'L' is not supported"),
])
def test_regex_errors(byte_compiler, pattern, what):
    with pytest.raises(CompileError, match=re.escape(what)) as e:
        byte_compiler.compile_regex(pattern)
    assert "position" in str(e.value)


def test_error_position(byte_compiler):
    with pytest.raises(CompileError, match="lookahead is not supported at position 3"):
        byte_compiler.compile_regex("abc(?=d)")


def test_bounded_repetition_stays_lazy(byte_compiler):
    g = byte_compiler.compile_regex(r"[a-z]{0,5000}x")
    m = g.matcher()
    for _ in range(100):
        assert m.accept_token(ord("q"))
    assert m.accept_token(ord("x")) and m.accept_token(BYTE_EOS)
    assert g.num_states < 400


# ----------------------------------------------------------------- the two dialects of regex_syntax
# One row per dialect and construct where they differ: (pattern, passing, failing), failing
# None = a CompileError. "python" rows compile as regex constraints (checked against re's
# fullmatch too); "ecma" rows as a JSON Schema string `pattern` (searched, not full-matched).
PYTHON_ROWS = {
    "\\s": (r"\s", [" ", "\t", "\r"], ["\u00a0", "\ufeff", "x"]),
    ".": (r"a.", ["a\r", "a\u2028", "ax"], ["a\n"]),
    "(?s)": (r"(?s)a.", ["a\n", "ax"], ["a"]),
    "(?i)": (r"(?i)ab", ["AB", "aB"], ["a"]),
    "(?#...)": (r"a(?#note)b", ["ab"], ["a(?#note)b"]),
    "(?P<name>...)": (r"(?P<n>a)b", ["ab"], ["b"]),
    "\\A \\Z": (r"\Aab\Z|c$", ["ab", "c"], ["AabZ", "cZ"]),
    "[] first": (r"[]a]", ["]", "a"], ["", "b"]),
    "{,n}": (r"a{,2}", ["", "aa"], ["aaa", "a{,2}"]),
    "bad \\x": (r"\xZ1", None, None),
    "\\u{...}": (r"\u{1F642}", None, None),
    "\\U \\N{} \\a": (r"\U0001F642\N{DIGIT ONE}\a", ["🙂1\a"], ["U1a"]),
    "\\cX": (r"\cJ", None, None),
    "octal in a class": (r"[\101]\0", ["A\0"], ["1\0"]),
    "other \\letter": (r"\q", None, None),
    "[[:alpha:]]": (r"[[:alpha:]]", None, None),
    "repeat count": (r"a{100001}", None, None),
    "anchors of a whole-branch group": (r"(^a$)|b", ["a", "b"], ["xa", "ab"]),
    "$ and a final newline": (r"a$", ["a"], ["a\n", "xa"]),
    "$ inside an alternative": (r"(a$|b)+", None, None),
}
ECMA_ROWS = {
    "\\s": (r"^\s$", [" ", "\t", "\u00a0", "\ufeff", "\u3000"], ["x"]),
    ".": (r"^a.$", ["ax"], ["a\n", "a\r", "a\u2028"]),
    "(?s)": (r"(?s)a.", None, None),
    "(?i)": (r"(?i)ab", None, None),
    "(?#...)": (r"a(?#note)b", None, None),
    "(?P<name>...)": (r"(?P<n>a)b", None, None),
    "\\A \\Z": (r"^\A\Z$", ["AZ"], ["", "A"]),
    "[] first": (r"^a[]?[^]$", ["a\n", "ax", "a]"], ["a", "axy"]),
    "{,n}": (r"^a{,2}$", ["a{,2}"], ["", "aa"]),
    "bad \\x": (r"^\xZ1$", ["xZ1"], ["Z1"]),
    "\\u{...}": (r"^\u{1F642}\ud83d\ude42$", ["🙂🙂"], ["u{1F642}🙂"]),
    "\\U \\N{} \\a": (r"^\U\N\a$", ["UNa"], ["🙂"]),
    "\\cX": (r"^\cJ\c1[\c1]$", ["\n\\c1\x11"], ["\ncJ"]),
    "octal in a class": (r"^[\101]$", None, None),
    "other \\letter": (r"^\q\y$", ["qy"], ["\\q\\y"]),
    "[[:alpha:]]": (r"^[[:alpha:]]$", ["a]", ":]"], ["b"]),
    "repeat count": (r"^a{100001}$", ["a" * 100001], ["a" * 100000]),
    "anchors of a whole-branch group": (r"(^a$)|b", ["a", "xbx"], ["xa", "ac"]),
    "$ and a final newline": (r"a$", ["a", "xa"], ["a\n", "ab"]),
    "$ inside an alternative": (r"(a$|b)+", ["a", "ba", "xbx", "bba"], ["", "ax", "a\n"]),
}


@pytest.mark.parametrize("construct", sorted(PYTHON_ROWS))
def test_python_dialect(byte_compiler, construct):
    pattern, passing, failing = PYTHON_ROWS[construct]
    if failing is None:
        with pytest.raises(CompileError, match="position"):
            byte_compiler.compile_regex(pattern)
    else:
        check_regex(byte_compiler, pattern, passing, failing, probe_all=False)


@pytest.mark.parametrize("construct", sorted(ECMA_ROWS))
def test_ecma_dialect(byte_compiler, construct):
    pattern, passing, failing = ECMA_ROWS[construct]
    schema = {"type": "string", "pattern": pattern}
    if failing is None:
        with pytest.raises(CompileError, match=re.escape("#/pattern")):
            byte_compiler.compile_json_schema(schema)
        return
    g = byte_compiler.compile_json_schema(schema)
    for s, want in [(s, True) for s in passing] + [(s, False) for s in failing]:
        m = g.matcher()
        ok = walk_ids(m, list(json.dumps(s, ensure_ascii=False).encode()) + [BYTE_EOS], byte_compiler.info)
        assert ok == want and (not ok or m.is_terminated()), (pattern, s)


def test_every_dialect_difference_has_both_rows():
    assert PYTHON_ROWS.keys() == ECMA_ROWS.keys()


def test_unknown_dialect():
    with pytest.raises(ValueError, match="dialect"):
        parse("a", "perl")


def test_python_end_anchor_z(byte_compiler):
    """\\z (Python 3.14's spelling of \\Z) ends a top-level alternative like $."""
    g = byte_compiler.compile_regex(r"a|b\z")
    for s, want in (("a", True), ("b", True), ("bz", False)):
        m = g.matcher()
        assert walk_ids(m, list(s.encode()) + [BYTE_EOS], byte_compiler.info) == want, s
