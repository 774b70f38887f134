"""Near the nesting limit (512 frames) the mask and `accept_token` agree: a token whose
step would nest deeper than the limit is not in the mask (`CompiledGrammar.limit_check`,
`Matcher.fill_bitmask`)."""

import numpy as np
import pytest

from furca.constrain import GrammarCompiler
from furca.constrain.stacks import MAX_STACK_DEPTH

from .conftest import BYTE_EOS, allowed_set, byte_info

PUSHERS = ["[[", "[[[[", '{"a":[', '[{"a":[', "((", "(((("]


@pytest.fixture(scope="module")
def compiler():
    return GrammarCompiler(byte_info(PUSHERS))


def _depth(m):
    a = m._a
    return max(a.stacks.depth[st] for _n, st in a.configs[m._h.state])


def _assert_mask_agrees(m, info, ids=None):
    """Every allowed token (of ``ids``, default all) is accepted by a fork; every other
    token of ``ids`` is refused. Returns the allowed ids."""
    bits = allowed_set(m, info)[: info.vocab_size]
    ids = range(len(info.token_bytes)) if ids is None else ids
    for t in ids:
        f = m.fork()
        ok = f.accept_token(int(t))
        assert bool(bits[t]) == ok, (t, info.token_bytes[t], _depth(m), f.error)
    return {int(t) for t in ids if bits[t]}


def test_json_mode_mask_and_accept_agree_up_to_the_limit(compiler):
    info = compiler.info
    m = compiler.compile_json_object().matcher()
    assert m.accept_string('{"a":')
    closed = False
    for i in range(MAX_STACK_DEPTH):
        if _depth(m) >= MAX_STACK_DEPTH - 12:  # the last frames: every token of the vocabulary
            allowed = _assert_mask_agrees(m, info)
            assert ord("0") in allowed  # a scalar value still fits
            if ord("[") not in allowed:
                assert _depth(m) >= MAX_STACK_DEPTH - 2
                closed = True
                break
        assert m.accept_string("[" if i % 3 else '{"a":'), m.error
    assert closed, "the walk never reached the limit"
    # the matcher closes what it opened: no error on the way out
    assert m.accept_string("0") and not m.is_error()


def test_long_tokens_are_dropped_before_short_ones(compiler):
    info = compiler.info
    m = compiler.compile_grammar('root ::= "(" root ")" | "x"').matcher()
    one, two, four = (info.token_bytes.index(t) for t in (b"(", b"((", b"(((("))
    assert m.accept_string("(" * (MAX_STACK_DEPTH - 8))
    dropped_at = {}
    while True:
        allowed = _assert_mask_agrees(m, info)
        assert ord("x") in allowed and BYTE_EOS not in allowed
        for t in (one, two, four):
            if t not in allowed:
                dropped_at.setdefault(t, _depth(m))
        if one not in allowed:
            break
        assert m.accept_token(one)
    assert dropped_at[four] < dropped_at[two] < dropped_at[one] == MAX_STACK_DEPTH
    assert m.accept_token(ord("x")) and not m.is_error()


def test_shallow_states_skip_the_check():
    g = GrammarCompiler(byte_info(PUSHERS)).compile_json_object()
    m = g.matcher()
    assert m.accept_string('{"a":[[')
    assert g.limit_check(m._h.state) is None
    assert g._push_per_byte is None  # never computed for a grammar that stays shallow


@pytest.mark.slow
def test_json_mode_with_the_llama_tokenizer(llama):
    """With a real vocabulary the state at the limit cannot build its successors (an
    opening bracket's is past it): its mask comes from stepping each token
    (`CompiledGrammar.mask_by_steps`), and jump-forward there forces nothing, in no error."""
    info, compiler, _tok = llama
    m = compiler.compile_json_object().matcher()
    assert m.accept_string('{"a":' + "[" * (MAX_STACK_DEPTH - 6))
    opening = [i for i, b in enumerate(info.token_bytes) if b and (b"[" in b or b"{" in b)]
    bracket = info.token_bytes.index(b"[")
    while True:
        bits = allowed_set(m, info)
        ids = np.flatnonzero(bits[: len(info.token_bytes)]).tolist()
        allowed = _assert_mask_agrees(m, info, sorted(set(ids) | set(opening)))
        assert m.jump_forward() == "" and not m.is_error()
        if bracket not in allowed:
            break
        assert m.accept_token(bracket)
    assert _depth(m) >= MAX_STACK_DEPTH - 1
    assert m.accept_string("1]]") and not m.is_error() and m.jump_forward() == ""
