"""Matcher API with the byte tokenizer: EOS, termination, sticky errors, rollback, fork,
jump-forward, bitmask layout, torch interop, the compiler cache and threads."""

import gc
import threading
import weakref

import numpy as np
import pytest
import torch

from furca.constrain import CompileError, GrammarCompiler, allocate_token_bitmask, apply_token_bitmask_

from .conftest import BYTE_EOS, allowed_set, byte_info


def ids(s):
    return list(s.encode())


def test_eos_only_at_end_and_termination(byte_compiler):
    m = byte_compiler.compile_regex("ab|abcd").matcher()
    assert not allowed_set(m, byte_compiler.info)[BYTE_EOS]
    assert m.accept_token(ord("a"))
    assert m.accept_token(ord("b"))
    assert allowed_set(m, byte_compiler.info)[BYTE_EOS] and m.can_terminate()
    f = m.fork()
    assert m.accept_token(BYTE_EOS) and m.is_terminated()
    assert not allowed_set(m, byte_compiler.info).any()  # nothing after the end
    assert not m.accept_token(ord("c")) and m.is_error()
    assert f.accept_token(ord("c")) and not f.is_terminated()  # the fork is independent
    assert not f.accept_token(BYTE_EOS) and "cannot end" in f.error


def test_sticky_error_and_rollback(byte_compiler):
    m = byte_compiler.compile_regex("[0-9]+x").matcher()
    for t in ids("12"):
        assert m.accept_token(t)
    assert not m.accept_token(ord("y"))
    assert m.is_error() and "not allowed" in m.error
    assert not m.accept_token(ord("3"))  # sticky
    bits = allowed_set(m, byte_compiler.info)
    assert bits[BYTE_EOS] and bits.sum() == 1  # in error only EOS, so the request can stop
    m.rollback(1)  # back to after "1", error cleared
    assert not m.is_error() and m.num_accepted == 1
    for t in ids("5x"):
        assert m.accept_token(t)
    assert m.accept_token(BYTE_EOS)
    m.rollback(3)  # undo EOS, x, 5
    assert not m.is_terminated() and m.num_accepted == 1
    with pytest.raises(ValueError):
        m.rollback(2)


def test_special_and_out_of_range_tokens(byte_compiler):
    info = byte_compiler.info
    g = byte_compiler.compile_regex(".*")
    m = g.matcher()
    bits = allowed_set(m, info)
    assert not bits[257] and not bits[info.vocab_size - 1]  # special token, padding id
    assert bits[BYTE_EOS]
    assert not m.accept_token(257) and "special" in m.error
    assert not g.matcher().accept_token(299)


def test_jump_forward(byte_compiler):
    g = byte_compiler.compile_grammar('root ::= "{\\"name\\":\\"" [a-z]+ "\\",\\"age\\":" [0-9]+ "}"')
    m = g.matcher()
    assert m.jump_forward() == '{"name":"'
    for t in ids('{"name":"bob'):
        assert m.accept_token(t)
    assert m.jump_forward() == ""
    assert m.accept_token(ord('"'))
    assert m.jump_forward() == ',"age":'
    m2 = byte_compiler.compile_regex("日本語|日本人").matcher()
    assert m2.jump_forward() == "日本"
    assert byte_compiler.compile_regex("a?").matcher().jump_forward() == ""


def test_grammar_limit_is_a_sticky_error_not_an_exception(byte_compiler):
    # nesting deeper than the automaton's bound (512 frames), reached through each move
    g = byte_compiler.compile_grammar('root ::= "(" root ")" | "x"')
    m = g.matcher()
    assert m.accept_string("(" * 512) and not m.is_error()
    moves = {
        "accept_token": lambda f: f.accept_token(ord("(")),
        "accept_string": lambda f: f.accept_string("("),
    }
    f = m.fork()  # at the limit nothing is forced, and that is no error: "x" still fits
    assert f.jump_forward() == "" and not f.is_error() and f.accept_token(ord("x"))
    for name, move in moves.items():
        f = m.fork()
        out = move(f)
        assert not out and "grammar limit reached" in (f.error or ""), name
        bits = allowed_set(f, byte_compiler.info)
        assert bits[BYTE_EOS] and bits.sum() == 1  # in error only EOS, so the request can stop
        assert not f.accept_token(ord(")")), name  # sticky
        f.rollback(1)
        assert not f.is_error() and f.accept_token(ord("x")), name


def test_a_dropped_grammar_is_freed_by_reference_counts():
    # the grammar's parts reference the automaton, never the other way round: no cycle,
    # so a grammar evicted from the cache frees its tables at once, not at the next
    # full collection of the cyclic GC
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        c = GrammarCompiler(byte_info())
        g = c.compile_json_object()
        m = g.matcher()
        for b in b'{"a":[1,{"b":"xy"}]}':
            m.get_allowed_tokens()
            assert m.accept_token(b), m.error
        parts = [g, g.automaton, g.automaton.stacks, g.masks, g.masks.slices, g.masks.slices.proof]
        refs = [weakref.ref(x) for x in parts]
        del c, g, m, parts
        assert [r() for r in refs] == [None] * len(refs)
    finally:
        if was_enabled:
            gc.enable()


def test_bitmask_rows_and_torch(byte_compiler):
    info = byte_compiler.info
    m = byte_compiler.compile_regex("[ab]").matcher()
    bm = allocate_token_bitmask(3, info.vocab_size)
    assert bm.shape == (3, (info.vocab_size + 31) // 32) and (bm == -1).all()
    m.fill_bitmask(bm, row=1)
    assert (bm[0] == -1).all() and (bm[2] == -1).all()
    tb = torch.from_numpy(bm.copy())
    m.fill_bitmask(tb, row=2)  # CPU torch tensor, written in place
    assert (tb[2].numpy() == bm[1]).all()
    logits = torch.zeros(3, info.vocab_size)
    apply_token_bitmask_(logits, bm, indices=[1])
    assert torch.isfinite(logits[0]).all() and torch.isfinite(logits[2]).all()
    assert torch.isfinite(logits[1]).nonzero().flatten().tolist() == [ord("a"), ord("b")]
    odd = torch.zeros(2, 45)  # vocab not a multiple of 32, bitmask wider than needed is fine
    bm2 = np.zeros((2, 2), dtype=np.int32)
    bm2[0, 1] = 1 << 12  # token 44
    bm2[1, 0] = -1
    apply_token_bitmask_(odd, bm2)
    assert torch.isfinite(odd[0]).nonzero().flatten().tolist() == [44]
    assert torch.isfinite(odd[1]).nonzero().flatten().tolist() == list(range(32))


def test_compiler_cache_and_threads():
    c = GrammarCompiler(byte_info(), cache_size=2)
    g1 = c.compile_regex("a+")
    assert c.compile_regex("a+") is g1
    c.compile_regex("b+")
    c.compile_regex("c+")
    assert c.compile_regex("a+") is not g1  # evicted (LRU of 2)
    results, errors = [], []

    def work(k):
        try:
            g = c.compile_grammar(f'root ::= "x"{{{k}}} [0-9]+')
            m = g.matcher()
            for t in ids("x" * k + "42"):
                assert m.accept_token(t)
            results.append(m.accept_token(BYTE_EOS))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k % 4 + 1,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results == [True] * 16


def test_misc_compile_errors(byte_compiler):
    with pytest.raises(CompileError, match="empty"):
        byte_compiler.compile_choices([])
    with pytest.raises(CompileError, match="not str"):
        byte_compiler.compile_choices(["a", 1])
    with pytest.raises(CompileError, match="unknown grammar syntax"):
        byte_compiler.compile_grammar("x", syntax="peg")
    with pytest.raises(CompileError, match="matches no string"):
        byte_compiler.compile_regex("[^\\x00-\\U0010FFFF]")


def test_memory_size_grows_with_the_states_a_walk_builds(byte_compiler):
    g = GrammarCompiler(byte_compiler.info).compile_regex("[a-z]{1,40}@[0-9]{1,8}")
    before = g.memory_size_bytes()
    assert before > 0  # the start state's row and mask exist after compiling
    m = g.matcher()
    for ch in "abcdefghij@123":
        bitmask = allocate_token_bitmask(1, byte_compiler.info.vocab_size)
        m.fill_bitmask(bitmask, 0)
        assert m.accept_token(ord(ch))
    assert g.num_states > 1 and g.memory_size_bytes() > before
