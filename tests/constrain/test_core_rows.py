"""The row kernel (core_rows.py; FURCA_CORE=0 turns it off) against rows.py on real grammars: every
10th schema of the in-repo MaskBench sample compiled twice, the kernel on from each
grammar's first row and off, each valid instance walked token by token on the Llama-3.1
tokenizer: the masks of every step equal, the same tokens accepted, the same number of
automaton states (the kernel's rows, canonical forms and walks make the same states as
Python's). The rows themselves are compared byte by byte in test_rows.py and
test_expand_plans.py."""

import numpy as np
import pytest

from furca.constrain import GrammarCompiler, automaton, core_rows
from furca.errors import CompileError

from .test_json_schema_helpers import instance_text, maskbench_cases


def _walks(info, tok, schema, tests):
    """(the masks of every step of every valid instance, accepted flags, automaton) of a
    fresh compile (the kernel as the environment says)."""
    g = GrammarCompiler(info).compile_json_schema(schema)
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    masks, accepted = [], []
    for test in tests:
        if not test["valid"]:
            continue
        m = g.matcher()
        for t in tok.encode(instance_text(test["data"], schema), add_special_tokens=False).ids + [info.eos_token_id]:
            m.fill_bitmask(bm)
            masks.append(bm.copy())
            ok = m.accept_token(t)
            accepted.append(ok)
            if not ok:
                break
    return masks, accepted, g.automaton


def test_kernel_rows_give_the_same_masks(llama, monkeypatch):
    info, _compiler, tok = llama
    monkeypatch.setenv("FURCA_CORE", "1")
    if not core_rows.enabled():
        pytest.skip("numba is not installed (or FURCA_NO_NUMBA is set)")
    monkeypatch.setattr(automaton, "CORE_AFTER", 0)
    compared = kernel_states = 0
    for name, schema, tests in list(maskbench_cases())[::10]:
        monkeypatch.setenv("FURCA_CORE", "1")
        try:
            on = _walks(info, tok, schema, tests)
        except CompileError:
            continue
        monkeypatch.setenv("FURCA_CORE", "0")
        off = _walks(info, tok, schema, tests)
        assert on[2].core is not None and off[2].core is None
        assert on[1] == off[1], name
        assert len(on[0]) == len(off[0]) and all(np.array_equal(x, y) for x, y in zip(on[0], off[0])), name
        assert on[2].num_states == off[2].num_states, name
        compared += len(on[0])
        kernel_states += int(on[2].core.cnt[2])  # the states the kernel tables hold
    assert compared > 500 and kernel_states > 500, (compared, kernel_states)


def test_bounds_past_int32_leave_the_grammar_to_python(llama, monkeypatch):
    # a counter bound the kernel's int32 tables cannot hold (a hostile maxLength): the
    # grammar gets no kernel and rows.py computes its rows, its masks as usual
    info, _compiler, tok = llama
    monkeypatch.setenv("FURCA_CORE", "1")
    if not core_rows.enabled():
        pytest.skip("numba is not installed (or FURCA_NO_NUMBA is set)")
    g = GrammarCompiler(info).compile_json_schema({"type": "string", "maxLength": 10**20})
    assert g.automaton.core is None and g.automaton._rows_to_core == -1
    m = g.matcher()
    assert m.accept_string('"' + "ab" * 40 + '"') and m.can_terminate()
    g2 = GrammarCompiler(info).compile_json_schema({"type": "string", "maxLength": 300})
    assert g2.automaton.core is not None
