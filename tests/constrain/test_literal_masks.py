"""A narrow state whose every configuration spells a literal (an enum's strings, the
names of an object without extra keys) has its mask walked down the literals' bytes
(core_keys.KeyCalls.literal_words (Core) through the key kernel's literal walks), making no
automaton state along them: every mask equals brute force (byte tokenizer) and the
whole walk's (Llama-3.1), and the walk's fallback leaves no bit behind."""

import json
import random

import numpy as np
import pytest

from furca.constrain import GrammarCompiler, core_keys, core_rows

from .conftest import accept_bytes, allowed_set, byte_info, check_mask, needs_compiled_walks, walk_checking_masks

TERMS = ["Accelerators", "Astrophysics", "Computing", "Experiment-HEP", "Experiment-Nucl", "General Physics",
         "Lattice", "Other", "Theory-HEP", "Theory-Nucl"]
SCHEMA = {"type": "array", "items": {
    "type": "object", "additionalProperties": False,
    "properties": {"term": {"enum": TERMS}, "source": {"enum": ["INSPIRE", "submitter", "curator", "publisher"]},
                   "scheme": {"type": "string"}, "n": {"type": "integer"}}}}
EXTRA = ['"', '":"', '","', '"}', '"},{"', '"}]', 'Acc', 'eler', 'ators', 'Ex', 'periment', '-H', 'EP', 'Theory',
         '-N', 'ucl', 'term', 'source', 'INS', 'PIRE', 'sub', 'mitter', 'cur', 'ator', '[{"', 'Lat', 'tice', ' Phys']


def _counting(monkeypatch):
    """The calls of Core.literal_words that made a mask (True) or left it to the walk."""
    calls = []
    literal_words = core_rows.Core.literal_words

    def counted(self, *args):
        calls.append(literal_words(self, *args))
        return calls[-1]

    monkeypatch.setattr(core_rows.Core, "literal_words", counted)
    return calls


@needs_compiled_walks
def test_masks_of_literal_states_equal_brute_force(monkeypatch):
    info = byte_info(EXTRA)
    calls = _counting(monkeypatch)
    g = GrammarCompiler(info).compile_json_schema(SCHEMA)
    for k, prefix in enumerate(('[{"', '[{"term":"', '[{"term":"Ex', '[{"source":"', '[{"scheme":"x","',
                                '[{"term":"Other"},{"', '[{"term":"Theory-HEP","source":"')):
        walk_checking_masks(accept_bytes(g, prefix), info, random.Random(k), 12)
    for seed in range(3):
        walk_checking_masks(g.matcher(), info, random.Random(seed), 40)
    assert any(calls)  # the enums' and the names' first states went down their literals


@needs_compiled_walks
def test_a_literal_state_makes_no_state_along_its_literals(monkeypatch):
    """The enum's first mask makes no automaton state per literal position (the walk
    made one for each position a token reaches); the masks are the same."""
    info = byte_info(EXTRA)
    made = {}
    for literal in (True, False):
        if not literal:
            monkeypatch.setattr(core_keys, "LITERAL_MIN", 10**9)
        g = GrammarCompiler(info, cache_size=0).compile_json_schema(SCHEMA)
        m = accept_bytes(g, '[{"term":"')
        n0 = g.automaton.num_states
        made[literal] = (allowed_set(m, info), g.automaton.num_states - n0)
    assert (made[True][0] == made[False][0]).all()
    assert made[True][1] < made[False][1] // 2, made


@needs_compiled_walks
def test_where_the_kernel_stops_the_state_is_walked_whole(monkeypatch):
    """Core.key_words may stop partway (a row past the kernel's limits, its row budget,
    a full table: None) after setting some bits: literal_words clears them, and the
    mask is the walk's."""
    info = byte_info(EXTRA)
    calls = _counting(monkeypatch)

    def stopped(self, a, words, *args):
        words[:] = np.uint32(0xFFFFFFFF)  # whatever it had set
        return None

    monkeypatch.setattr(core_rows.Core, "key_words", stopped)
    g = GrammarCompiler(info, cache_size=0).compile_json_schema({"enum": TERMS})
    calls.clear()
    check_mask(accept_bytes(g, '"'), info)
    assert calls and not any(calls)


def test_masks_of_literal_states_equal_the_whole_walk(llama, monkeypatch):
    info, _compiler, tok = llama
    doc = [{"term": t, "source": ["INSPIRE", "submitter", "curator", "publisher"][i % 4], "n": i}
           for i, t in enumerate(TERMS)]
    fast = GrammarCompiler(info, cache_size=0).compile_json_schema(SCHEMA)
    monkeypatch.setattr(core_keys, "LITERAL_MIN", 10**9)
    whole = GrammarCompiler(info, cache_size=0).compile_json_schema(SCHEMA)
    monkeypatch.undo()
    calls = _counting(monkeypatch)
    mf, mw = fast.matcher(), whole.matcher()
    for t in tok.encode(json.dumps(doc, separators=(",", ":")), add_special_tokens=False).ids:
        monkeypatch.setattr(core_keys, "LITERAL_MIN", 10**9)
        bw = allowed_set(mw, info)
        monkeypatch.setattr(core_keys, "LITERAL_MIN", 4)
        assert (allowed_set(mf, info) == bw).all()
        assert mf.accept_token(t) and mw.accept_token(t)
    assert mf.can_terminate()
    if core_rows.enabled():
        assert any(calls)


@pytest.mark.parametrize("n", [3, 4])
@needs_compiled_walks
def test_fewer_literals_than_the_bound_are_walked(monkeypatch, n):
    info = byte_info(EXTRA)
    calls = _counting(monkeypatch)
    g = GrammarCompiler(info, cache_size=0).compile_json_schema({"enum": ["INSPIRE", "submitter", "curator",
                                                                          "publisher"][:n]})
    calls.clear()  # the compile's own states (its first mask, a first compiler's lexeme grammar)
    check_mask(accept_bytes(g, '"'), info)
    assert any(calls) == (n >= core_keys.LITERAL_MIN)
