"""The matcher's warm per-token path: fills into the numpy row it validated before (a
memoryview write), and accept_token's step-cache hit without the checks of its cold
path."""

import numpy as np
import pytest

from furca.constrain.masks import Delta

from .conftest import BYTE_EOS, COMPILED_WALKS


def test_fills_into_a_remembered_row_match_fresh_ones(llama):
    """A bitmask reused step after step (the row the matcher keeps) gets exactly what a
    fresh bitmask gets, whatever the row held before, other rows untouched; switching
    rows or arrays, and reshaping or retyping the array in place, are seen."""
    info, compiler, tok = llama
    g = compiler.compile_json_schema({"type": "object", "properties": {"name": {"type": "string"},
                                      "tags": {"type": "array", "items": {"enum": ["a", "bb"]}}},
                                      "required": ["name", "tags"]})
    ids = tok.encode('{"name":"hello world, how are you","tags":["a","bb","a"]}', add_special_tokens=False).ids
    ids.append(info.eos_token_id)
    n = info.num_words
    fresh, m = [], g.matcher()
    for t in ids:
        bm = np.zeros((1, n), dtype=np.int32)
        m.fill_bitmask(bm)
        fresh.append(bm[0].copy())
        assert m.accept_token(t)
    kinds = {type(g.masks.warm.get(s)) for s in g.masks.warm}
    # the sparse form and a string body's Delta (its abstract state's words and the
    # tokens that close it); the whole packed form: test_masks_store's warm test
    assert kinds == ({tuple, Delta} if COMPILED_WALKS else {tuple, np.ndarray}), kinds
    shared = np.zeros((2, n), dtype=np.int32)
    m = g.matcher()
    for k, t in enumerate(ids):
        for row in (1, 1, 0):
            shared[row] = -1  # the caller's leftovers: overwritten whole
            shared[1 - row] = 7
            m.fill_bitmask(shared, row=row)
            assert (shared[row] == fresh[k]).all() and (shared[1 - row] == 7).all()
        other = np.full((1, n), -1, dtype=np.int32)
        m.fill_bitmask(other)
        assert (other[0] == fresh[k]).all()
        assert m.accept_token(t)
    m = g.matcher()
    m.fill_bitmask(shared, row=0)
    m.fill_bitmask(shared, row=0)
    shared.shape = (1, 2 * n)  # in place: the remembered shape no longer holds
    shared[:] = -1
    m.fill_bitmask(shared, row=0)
    assert (shared[0, :n] == fresh[0]).all() and (shared[0, n:] == 0).all()
    shared.shape = (2 * n, 1)
    with pytest.raises(ValueError):
        m.fill_bitmask(shared, row=0)
    shared.shape = (2, n)
    m.fill_bitmask(shared, row=1)
    m.fill_bitmask(shared, row=1)
    shared.dtype = np.float32
    with pytest.raises(ValueError):
        m.fill_bitmask(shared, row=1)
    shared.dtype = np.int32
    shared[:] = 3
    m.fill_bitmask(shared, row=1)
    assert (shared[1] == fresh[0]).all() and (shared[0] == 3).all()
    strided = np.zeros((2, 2 * n), dtype=np.int32)[:, ::2]  # rows not contiguous: never remembered
    for _ in range(2):
        strided[0] = -1
        m.fill_bitmask(strided)
        assert (strided[0] == fresh[0]).all()


def test_warm_accepts_refuse_what_the_cold_path_refuses(byte_compiler):
    """A step-cache hit is a token with bytes stepped before: EOS, special, padding and
    out-of-range ids, an empty accept_string (not stepped), the error and terminated
    states never take the warm path's answer."""
    info = byte_compiler.info
    g = byte_compiler.compile_regex("(ab)*")
    m = g.matcher()
    assert m.accept_string("") and m.num_accepted == 1 and not g.automaton.step_cache
    assert not m.accept_token(257) and "special" in m.error  # no bytes
    m.rollback(1)
    assert m.accept_token(ord("a")) and m.accept_token(ord("b"))
    m.rollback(2)
    for bad in (-1, -300, info.vocab_size - 1, info.vocab_size, 10**6):
        assert not m.accept_token(bad) and m.error
        m.rollback(0)
    assert m.accept_token(ord("a"))
    assert not m.accept_token(BYTE_EOS) and "cannot end" in m.error  # after "a": not accepting
    assert not m.accept_token(ord("b"))  # the error is sticky, even for a cached step
    m.rollback(0)
    assert m.accept_token(ord("b")) and m.accept_token(BYTE_EOS) and m.is_terminated()
    assert not m.accept_token(ord("a")) and "after the end" in m.error  # cached step, terminated
    m.rollback(2)  # the EOS and "b": after "a" again, the error cleared
    assert m.accept_token(ord("b")) and m.num_accepted == 2 and m.can_terminate()
    fork = m.fork()
    assert fork.accept_token(ord("a")) and not fork.can_terminate() and m.can_terminate()
    assert fork.num_accepted == 3 and m.num_accepted == 2 and fork._h.state != m._h.state


@pytest.mark.parametrize("schema", [{"type": "string"}, {"type": "string", "maxLength": 40},
                                    {"type": "array", "items": {"type": "string", "pattern": "^[a-z ]*$"}}])
def test_cold_steps_match_the_automaton(llama, schema):
    """accept_token's cold path (the step cache emptied before each token) reaches the
    states LazyAutomaton.step gives for the same bytes afterwards, in strings with and
    without a length bound (a counter) and in an array of patterned strings."""
    info, compiler, tok = llama
    g = compiler.compile_json_schema(schema)
    a = g.automaton
    text = '"hello world, how are you doing today"' if schema.get("type") == "string" else '["ab cd","x y z and more words"]'
    ids = tok.encode(text, add_special_tokens=False).ids + [info.eos_token_id]
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    for rounds in range(2):
        m, states = g.matcher(), []
        for t in ids:
            m.fill_bitmask(bm)
            before = m._h.state
            a.step_cache.clear()
            assert m.accept_token(t)
            states.append((before, t, m._h.state))
        for before, t, after in states:
            if t != info.eos_token_id:
                assert a.step(before, info.token_bytes[t]) == after
