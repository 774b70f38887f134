"""A counter whose body takes at least b bytes (nfa.counter_bytes) moves at most one count
per b bytes, so its counts share masks b times closer to the bound than a body of one
byte (automaton.canonical, full_canonical): a word limit `(?:\\S+\\s+){0,99}\\S+` shares
one mask for its first words, not none. Every mask is compared with brute force (each
token stepped alone) on walks to every count up to the bound, with tokens of several
words and long runs, so a count moved past its room would show."""
from __future__ import annotations

import random

import pytest

from furca.constrain import GrammarCompiler, TokenizerInfo
from furca.constrain.ir_bounds import _fewest

from .conftest import BYTE_EOS, check_mask, walk_checking_masks

LONG = (
    ["ab", "cde", "ab ", " ab", "a b", "ab cd", " x y z", "a b c d e f", "ab, cd, ", "x, ", "w "]
    + [("a" * k) for k in (3, 8, 17, 29)]
    + [(" " * k) for k in (2, 5, 12)]
    + [("ab" * k) for k in (2, 5, 9, 14)]  # several bodies of (ab) in one token
    + [("w " * k) for k in (3, 7, 11)]  # several words in one token
    + ["a\nb\tc d"]
)


def words_info(long_tokens):
    toks = [bytes([i]) for i in range(256)] + [None, None] + [e.encode() for e in LONG]
    return TokenizerInfo(toks, [BYTE_EOS], vocab_size=258 + len(LONG), long_tokens=long_tokens)


PATTERNS = [
    (r"(?:\S+\s+){0,24}\S+", "w "),  # a word limit: a body of at least two bytes
    (r"(?:ab|cde){3,40}", "ab"),
    (r"(?:[a-z]+, ){0,30}[a-z]+", "x, "),
    (r"(?:ab){20,44}", "ab"),
]


def test_min_bytes_of_bodies():
    from furca.constrain.regex import parse_regex

    def of(p):
        return _fewest(parse_regex(p), "byte")

    assert of(r"\S+\s+") == 2
    assert of(r"ab|cde") == 2
    assert of(r"(?:é|x){2}") == 2
    assert of(r"é") == 2
    assert of(r"a*") == 0


@pytest.mark.parametrize("long_tokens", [len(LONG), 8])
@pytest.mark.parametrize("pattern,unit", PATTERNS, ids=lambda p: str(p)[:24])
def test_every_count_equals_brute_force(pattern, unit, long_tokens):
    """A walk of one body a token up to past the bound, the mask checked at each count."""
    info = words_info(long_tokens)
    g = GrammarCompiler(info).compile_regex(pattern)
    assert g.automaton.nfa.counter_bytes and min(g.automaton.nfa.counter_bytes.values()) >= 2
    m = g.matcher()
    unit_id = 258 + LONG.index(unit)
    for _ in range(50):
        check_mask(m, info)
        if not m.fork().accept_token(unit_id):
            break
        assert m.accept_token(unit_id)
    for seed in range(3):
        walk_checking_masks(g.matcher(), info, random.Random(seed), 40)


def test_far_counts_share_one_mask():
    """(ab){0,60}: with a body of 2 bytes, counts more than ceil(short_len / 2) from the
    bound share canonical_short; counts nearer stay distinct."""
    info = words_info(8)
    short = info.short_len
    assert 2 < short < info.max_token_len
    g = GrammarCompiler(info).compile_regex(r"(?:ab){0,60}")
    a = g.automaton
    states = [a.step(a.start, b"ab" * k) for k in range(1, 61)]
    assert all(states)
    limit = -(-short // 2)
    # after k bodies the frame counts k + 1 (the next body begun at its start)
    far = [s for k, s in enumerate(states, 1) if 60 - (k + 1) > limit]
    near = [s for k, s in enumerate(states, 1) if 60 - (k + 1) <= limit]
    assert len(far) > len([k for k in range(1, 61) if 60 - (k + 1) > short])  # a one-byte body's bound
    assert len({a.canonical_short(s) for s in far}) == 1
    assert len({a.canonical_short(s) for s in near}) == len(set(near))


ITEMS = ['{"a":', '1},{"a":', '},{"a":', '0}]', '1}]',
         '1},{"a":2},{"a":3},{"a":',  # three item ends in one token
         '1},{"a":2},{"a":3},{"a":4},{"a":5},{"a":6},{"a":7},{"a":8},{"a":9},{"a":']  # nine


def test_item_bodies_count_the_bytes_of_their_calls():
    """An array's counter over items that are calls (nfa.item_counters) took one byte a
    body; ir_bounds._least_bytes looks into the called rules (an object, a string's length
    region), so `,{"a":0}` counts 8 bytes and the counts share masks 8 times nearer the
    bound. The masks equal brute force at every count up to maxItems, with tokens that
    end three and nine items."""
    from .conftest import byte_info

    info = byte_info(ITEMS)
    c = GrammarCompiler(info)
    obj = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
           "additionalProperties": False}
    g = c.compile_json_schema({"type": "array", "items": obj, "minItems": 2, "maxItems": 30})
    nfa = g.automaton.nfa
    assert [nfa.counter_bytes[e] for e in nfa.item_counters] == [8]
    a = g.automaton
    states = []
    m = g.matcher()
    assert m.accept_string('[{"a":')
    step = 258 + ITEMS.index('1},{"a":')
    for _ in range(40):
        check_mask(m, info)
        states.append(m._t[0])
        if not m.fork().accept_token(step):
            break
        assert m.accept_token(step)
    assert len(states) == 30  # every count up to the bound
    # the second item's count on: those more than ceil(longest token / 8) counts from the
    # bound share one mask (at one byte a body none did: the longest token is 75 bytes)
    far = {a.canonical(s) for s in states[1:12]}
    assert len(far) == 1 and info.max_token_len < 8 * (29 - 12)
    for seed in range(3):
        walk_checking_masks(g.matcher(), info, random.Random(seed), 45)
    strings = {"type": "array", "items": {"type": "string", "maxLength": 20, "pattern": "^[a-z ]+$"}, "maxItems": 30}
    nfa = c.compile_json_schema(strings).automaton.nfa
    assert [nfa.counter_bytes[e] for e in nfa.item_counters] == [4]  # `,"a"`: the region's one character


def test_least_bytes_bounds():
    """ir_bounds._least_bytes: calls looked into, a rule inside its own bound 0, a length region
    its fewest characters, a key trie 0."""
    from furca.constrain.ir_bounds import _least_bytes

    b = ("byte", [(97, 97)])
    rules = {"r": ("alt", [("seq", [b, ("ref", "r", 0)]), ("seq", [b, b])]), "s": ("seq", [b, ("ref", "r", 0)])}
    assert _least_bytes(("ref", "s", 0), rules, {}, set(), 0) == 2  # 1 + r's (its recursive branch counts 1 + 0)
    assert _least_bytes(("len", ("rep", ("seq", [("tick",), b]), 0, None), 3, 9), rules, {}, set(), 0) == 3
    assert _least_bytes(("rep", ("ref", "s", 0), 2, 5), rules, {}, set(), 0) == 4
    assert _least_bytes(("keys", (), None, None, False), rules, {}, set(), 0) == 0
    deep = b
    for _ in range(300):
        deep = ("seq", [deep])
    assert _least_bytes(deep, rules, {}, set(), 0) == 0  # past the depth bound: 0, no RecursionError
