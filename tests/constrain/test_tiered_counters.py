"""Bounded counters and length frames share masks across counts for the short tokens
(automaton.canonical_short) and walk the long tokens from the state itself
(masks.TokenMasks._tiered_mask). Every mask is compared with brute force (each token
stepped alone) near and far from the bound, with long ASCII tokens, multi-byte
characters, JSON escapes and tokens that close the string."""
from __future__ import annotations

import random

import numpy as np
import pytest

from furca.constrain import GrammarCompiler, TokenizerInfo, _walk

from .conftest import BYTE_EOS, walk_checking_masks

LONG = (
    [("a" * k) for k in range(2, 48, 3)]
    + [(" " * k) for k in (4, 9, 17, 33)]
    + [("é" * k) for k in (2, 5, 11, 23)]  # 2 bytes a character
    + [("日" * k) for k in (2, 7, 15)]  # 3 bytes a character
    + [("\\n" * k) for k in (2, 6, 19)]  # an escape is one character of two bytes
    + ["\\u00e9\\u00e9", "\\\"" * 5, "ab\\tcd" * 4]
    + [("b" * k) + '"' for k in (1, 6, 14, 29)]  # the string's end inside the token
    + ['", "', '"]', '"}', 'x", "yy', '["' + "c" * 20]
)


def tiered_info(long_tokens):
    toks = [bytes([i]) for i in range(256)] + [None, None] + [e.encode() for e in LONG]
    return TokenizerInfo(toks, [BYTE_EOS], vocab_size=300 + len(LONG), long_tokens=long_tokens)


SCHEMAS = [
    {"type": "string", "maxLength": 40},
    {"type": "string", "minLength": 20, "maxLength": 60},
    {"type": "array", "items": {"type": "string", "maxLength": 24}, "maxItems": 30},
    {"type": "array", "items": {"enum": ["x", "yy"]}, "minItems": 2, "maxItems": 40},
    {"type": "string", "pattern": "^[a-zé \\n]*$", "minLength": 3, "maxLength": 50},
]


@pytest.mark.parametrize("long_tokens", [len(LONG), 12])
@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: str(s)[:40])
def test_tiered_masks_equal_brute_force(schema, long_tokens):
    info = tiered_info(long_tokens)
    assert 0 < info.short_len < info.max_token_len
    assert int(np.unpackbits(info.long_words.view(np.uint8)).sum()) <= long_tokens
    g = GrammarCompiler(info).compile_json_schema(schema)
    for seed in range(6):
        walk_checking_masks(g.matcher(), info, random.Random(seed), 40)


def test_far_counts_share_the_short_mask():
    """Counts whose room exceeds short_len share canonical_short (one stored mask for the
    short tokens); within short_len of the bound they stay distinct; the long tokens'
    bits still differ with the room."""
    info = tiered_info(len(LONG))
    g = GrammarCompiler(info).compile_json_schema({"type": "string", "maxLength": 100})
    a = g.automaton
    states = [a.step(a.start, b'"' + b"a" * n) for n in range(0, 101)]
    assert all(states) and len(set(states)) == 101
    # the frame counts from 1 (n characters: count n + 1)
    far = [s for n, s in enumerate(states) if 100 - (n + 1) > info.short_len]
    near = [s for n, s in enumerate(states) if 100 - (n + 1) <= info.short_len]
    assert len(far) > 90
    assert len({a.canonical_short(s) for s in far}) == 1
    assert len({a.canonical_short(s) for s in near}) == len(near)
    long_a = LONG.index("a" * 47) + 258
    m = g.matcher()
    assert m.accept_string('"' + "a" * 53)
    bits = _bits(m, info)
    assert bits[long_a]  # 53 + 47 = 100 characters: fits
    assert m.accept_string("a")
    assert not _bits(m, info)[long_a]  # 101: over the bound
    if _walk.get_walk() is not None:  # the compiled walks moved node states to canonical counts
        mapped = np.flatnonzero(a.short[: a.num_states] >= 0)
        assert any(a.short[s] != s for s in mapped)


def _bits(m, info):
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    m.fill_bitmask(bm)
    return np.unpackbits(bm.view(np.uint8), bitorder="little").astype(bool)


def test_llama_counts_near_and_far(llama):
    """The Llama-3.1 vocabulary (longest token 128 bytes, short_len ~30): masks of a
    maxLength-100 string at counts far from and near the bound equal every token stepped
    alone (mask_by_steps)."""
    info, compiler, _ = llama
    assert 0 < info.short_len < 40 < info.max_token_len
    g = compiler.compile_json_schema({"type": "string", "maxLength": 100})
    a = g.automaton
    for text in ['"', '"' + "é" * 20, '"' + "x" * 69, '"' + "\\n" * 80, '"' + "y" * 99]:
        s = a.step(a.start, text.encode())
        assert s
        got = g.masks.mask(s)
        want = g.mask_by_steps(s)
        diff = np.flatnonzero(np.unpackbits(got.view(np.uint8)) != np.unpackbits(want.view(np.uint8)))
        assert len(diff) == 0, (text[:12], diff[:10])
