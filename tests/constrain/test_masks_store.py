"""The mask store (masks.TokenMasks): stored forms, masks shared with the abstract
state, read-only rows, the warm fill path."""

import random

import numpy as np
import pytest

from furca.constrain import GrammarCompiler, _walk
from furca.constrain.stored_masks import SPARSE_WORDS, Delta, _size, _stored, write_stored

from .conftest import COMPILED_WALKS, byte_info, walk_checking_masks
from .test_adaptive import EXTRA


def test_stored_forms():
    dense = np.arange(SPARSE_WORDS + 1, dtype=np.int32) + 1
    m = _stored(dense)
    assert m is dense and not m.flags.writeable
    words = np.zeros(4008, dtype=np.int32)
    words[[3, 70, 4000]] = [1, -1, 1 << 30]
    idx, vals = _stored(words)
    assert idx.dtype == np.intp and idx.tolist() == [3, 70, 4000] and vals.tolist() == [1, -1, 1 << 30]
    words[3] = 0  # the sparse form is a copy
    assert vals[0] == 1
    idx, vals = _stored(np.zeros(10, dtype=np.int32))
    assert len(idx) == 0 and len(vals) == 0


def test_delta_form_over_a_base():
    # a dense mask that differs from a kept base in few words is stored as those words
    # (masks.Delta): written, materialized and sized as what it replaces
    rng = np.random.default_rng(0)
    base = rng.integers(-(1 << 31), 1 << 31, size=4008, dtype=np.int64).astype(np.int32)
    base.setflags(write=False)
    packed = base.copy()
    packed[[5, 900, 4007]] = [0, -1, 12345]
    m = _stored(packed, base)
    assert type(m) is Delta and m.base is base and m.idx.tolist() == [5, 900, 4007]
    assert _size(m) == m.idx.nbytes + m.words.nbytes < 64
    assert (m.packed() == packed).all()
    out = np.full(4010, 7, dtype=np.int32)
    write_stored(m, out)
    assert (out[:4008] == packed).all() and (out[4008:] == 0).all()
    packed[5] = 99  # the Delta keeps copies of its words, not views of packed
    assert m.words.tolist() == [0, -1, 12345]
    far = base.copy()
    far[: SPARSE_WORDS + 1] ^= 1  # more words differ than a sparse form holds: stored whole
    m = _stored(far, base)
    assert type(m) is np.ndarray and m is far and not m.flags.writeable
    assert type(_stored(packed, None)) is np.ndarray


# a wide rule (it takes "a" and " ") that no token can leave: its states add nothing to
# their abstract state's mask; and one whose end a token can reach (the continuation walk)
SHARING = r'''
root ::= "<" body ">" | "[" item ("," item)* "]"
body ::= [a-z ]* "ZZZZZZZZZZ"
item ::= "\"" [a-z 日本]{0,40} "\""
'''


@pytest.mark.skipif(_walk.get_walk_range() is None, reason="abstract masks need the compiled walks")
@pytest.mark.parametrize("seed", range(3))
def test_states_share_their_abstract_mask_exactly(seed):
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_grammar(SHARING)
    m = g.matcher()
    assert m.accept_string("<")
    walk_checking_masks(m, info, random.Random(seed), 40)  # every mask against brute force
    shared = {id(hit[0]) for hit in g.masks.split._abs.values()}
    assert any(id(m) in shared for m in g.masks._store.values()), "no state stored its abstract state's mask"
    m = g.matcher()
    assert m.accept_string("[")
    walk_checking_masks(m, info, random.Random(seed), 60)
    for m in g.masks._store.values():
        if not isinstance(m, tuple):
            assert not m.flags.writeable


def test_json_schema_masks_equal_stepping_every_token(llama):
    # a real vocabulary: string bodies and object keys (abstract states shared or
    # re-walked after their rule's end), each mask against every token stepped alone
    info, _c, tok = llama
    g = GrammarCompiler(info).compile_json_schema({
        "type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "tags"]})
    m = g.matcher()
    ids = tok.encode('{"name":"a b","tags":["x","y"]}', add_special_tokens=False).ids
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    for k, t in enumerate(ids):
        m.fill_bitmask(bm)
        if k in (2, 4, 7, len(ids) - 2):  # ~0.5 s each: stepping all 128k tokens
            ref = g.mask_by_steps(m._h.state)
            assert (bm[0] == ref).all(), np.flatnonzero(bm[0] != ref)[:10]
        assert m.accept_token(t), m.error


def test_warm_fills_match_the_first_ones(llama):
    """Matcher.fill_bitmask's warm path (masks.TokenMasks.warm) writes what the first fill
    of each state wrote, in rows of a wider bitmask and of other rows too, raises as the
    first fill does on a bad bitmask, and starts over after an eviction."""
    info, compiler, tok = llama
    g = compiler.compile_json_schema({"type": "object", "properties": {"name": {"type": "string"},
                                      "n": {"type": "integer"}}, "required": ["name", "n"]})
    ids = tok.encode('{"name":"hello world how are you","n":12345}', add_special_tokens=False).ids
    n = info.num_words
    first, m = [], g.matcher()
    for t in ids + [info.eos_token_id]:
        bm = np.full((1, n), -1, dtype=np.int32)
        m.fill_bitmask(bm)
        first.append(bm[0].copy())
        assert m.accept_token(t)
    kinds = {type(g.masks.warm.get(s)) for s in g.masks.warm}
    # every stored form met (a string body's: a Delta, which the compiled walks' slice
    # levels make; without numba a string body walks the whole trie)
    assert kinds == ({tuple, np.ndarray, Delta} if COMPILED_WALKS else {tuple, np.ndarray}), kinds
    for evict in (False, True):
        if evict:
            g.masks._evict()
            assert not g.masks.warm
        m = g.matcher()
        for k, t in enumerate(ids + [info.eos_token_id]):
            wide = np.full((3, n + 5), -1, dtype=np.int32)
            m.fill_bitmask(wide, row=2)
            assert (wide[2, :n] == first[k]).all() and (wide[2, n:] == 0).all() and (wide[:2] == -1).all()
            exact = np.full((2, n), -1, dtype=np.int32)
            m.fill_bitmask(exact, row=1)
            assert (exact[1] == first[k]).all() and (exact[0] == -1).all()
            with pytest.raises(ValueError):
                m.fill_bitmask(np.zeros((1, n - 1), dtype=np.int32))
            with pytest.raises(ValueError):
                m.fill_bitmask(np.zeros((1, n), dtype=np.int64))
            with pytest.raises(IndexError):
                m.fill_bitmask(exact, row=2)
            assert m.accept_token(t)
        bm = np.full((1, n), -1, dtype=np.int32)
        m.fill_bitmask(bm)  # terminated: nothing allowed
        assert not bm.any()


def test_deltas_of_counted_strings_equal_stepping_every_token(llama):
    # a string of at most 100 characters: masks stored as Deltas over the masks they
    # start from (the string body's abstract mask beside its closing tokens; far from
    # the bound, a tiered mask over its canonical count's) equal every token stepped alone
    info, _c, tok = llama
    g = GrammarCompiler(info).compile_json_schema({
        "type": "object", "properties": {"text": {"type": "string", "maxLength": 100}}, "required": ["text"]})
    m = g.matcher()
    ids = tok.encode('{"text":"the quick brown fox jumps over the lazy dog and runs away"}', add_special_tokens=False).ids
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    checked = 0
    for k, t in enumerate(ids):
        m.fill_bitmask(bm)
        if type(g.masks._store.get(g.masks._canon(m._h.state))) is Delta and checked < 3:
            ref = g.mask_by_steps(m._h.state)  # ~0.5 s: every token stepped
            assert (bm[0] == ref).all(), (k, np.flatnonzero(bm[0] != ref)[:10])
            checked += 1
        assert m.accept_token(t), m.error
    assert checked == 3
