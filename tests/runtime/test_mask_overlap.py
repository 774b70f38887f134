"""Grammar masks filled beside the forward pass (mask_overlap.py) and the CPU mask kernel
(mask_apply.py).

- the kernel masks exactly what furca.constrain's torch reference masks;
- a constrained batch gives the same greedy tokens with overlap on and off;
- a request whose mask is not ready within the bound waits (it samples later) while the
  rest of its batch goes on: the other requests finish while its mask is held back, and
  its own output is the one it gets when nothing is held back; nothing leaks;
- `MaskFiller` hands a failing fill back for its request alone.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from furca.constrain import apply_token_bitmask_
from furca.errors import ConfigError
from furca.runtime.config import EngineConfig
from furca.runtime.engine import Engine
from furca.runtime.mask_apply import apply_bitmask_cpu_
from furca.runtime.mask_overlap import MaskFiller
from furca.runtime.postprocess import mask_logits_

PROMPTS = ["Hello", "The quick brown fox", '{"name": "furca"', "def add(a, b):", "Paris is"]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "n": {"type": "integer"}},
          "required": ["name", "n"], "additionalProperties": False}
SLOW_RX = r"(yes|no) [a-z]{2,6}"
LONG_WAIT_MS = 60_000.0  # no mask is ever late: overlap on must equal overlap off
DEADLINE_S = 120.0


def constrained_params(n_tokens: int = 24) -> list[dict]:
    kinds = [{"json_schema": SCHEMA}, {"regex": r"[0-9]{2}-[a-z]{3}"}, {"regex": SLOW_RX},
             {"json_schema": SCHEMA}, {}]
    return [{"temperature": 0.0, "max_new_tokens": n_tokens, **k} for k in kinds]


# ------------------------------------------------------------------------ the CPU kernel


@pytest.mark.parametrize("vocab, words", [(300, 10), (301, 10), (320, 12), (1000, 32)])
def test_cpu_kernel_masks_exactly_as_the_reference(vocab, words):
    g = np.random.default_rng(vocab)
    bits = g.integers(-2**31, 2**31 - 1, size=(6, words), dtype=np.int64).astype(np.int32)
    bits[1] = 0
    bits[2] = -1
    bits[3, ::2] = 0  # mixed zero / random words, as in a real constrained mask
    bitmask = torch.from_numpy(bits)
    logits = torch.randn(6, vocab)
    for rows in ([0, 1, 2, 3, 4, 5], [3, 1], []):
        want, got = logits.clone(), logits.clone()
        apply_token_bitmask_(want, bitmask, rows)
        assert apply_bitmask_cpu_(got, bitmask, rows)
        assert torch.equal(torch.isinf(got), torch.isinf(want)) and torch.equal(got, want), rows
        got2 = logits.clone()
        mask_logits_(got2, bitmask, rows)
        assert torch.equal(got2, want)


def test_cpu_kernel_declines_what_it_does_not_handle():
    bitmask = torch.zeros(2, 4, dtype=torch.int32)
    assert not apply_bitmask_cpu_(torch.zeros(2, 100, dtype=torch.bfloat16), bitmask, [0])
    assert not apply_bitmask_cpu_(torch.zeros(100, 2).t(), bitmask, [0])  # not contiguous
    x = torch.zeros(2, 100, dtype=torch.bfloat16)
    mask_logits_(x, bitmask, [1])  # the reference takes it
    assert torch.isinf(x[1]).all() and not torch.isinf(x[0]).any()
    with pytest.raises(IndexError):
        apply_bitmask_cpu_(torch.zeros(2, 100), bitmask, [2])


# ------------------------------------------------------------------------ in the engine


@pytest.fixture(scope="module")
def reference_outputs(tiny_engine_model):
    """The sequential path's greedy outputs (overlap off)."""
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=4096, check_memory=True, overlap_masks=False) as off:
        return [o.output_ids for o in off.generate(PROMPTS, sampling_params=constrained_params())]


def test_overlap_on_and_off_give_the_same_tokens(tiny_engine_model, reference_outputs):
    loaded, _ = tiny_engine_model
    steps = []
    with Engine(loaded, max_total_tokens=4096, check_memory=True, mask_wait_ms=LONG_WAIT_MS) as on:
        on.add_step_observer(steps.append)
        outs = on.generate(PROMPTS, sampling_params=constrained_params())
        on.check_memory(idle=True)
    assert [o.output_ids for o in outs] == reference_outputs
    masks = [s.masks for s in steps if s.masks is not None]
    assert masks and all(m.num_late == 0 for m in masks)
    assert max(m.num_masks for m in masks) == 4  # four constrained requests, one plain


def test_early_masks_on_and_off_give_the_same_tokens(tiny_engine_model, reference_outputs):
    """Each request's next mask starts right after its accepted (and jump-forward) tokens;
    the JSON schema's forced spans (``{"name":"``, ``","n":``) are appended by jump-forward,
    so those requests' next forward computes several tokens with their mask already filling."""
    loaded, _ = tiny_engine_model
    got = {}
    for early in (True, False):
        steps = []
        with Engine(loaded, max_total_tokens=4096, check_memory=True, mask_wait_ms=LONG_WAIT_MS,
                    early_masks=early) as engine:
            engine.add_step_observer(steps.append)
            outs = engine.generate(PROMPTS, sampling_params=constrained_params())
            engine.check_memory(idle=True)
            forced = sum(o.meta_info.get("jump_forward_tokens", 0) for o in outs)
        masks = [s.masks for s in steps if s.masks is not None]
        got[early] = ([o.output_ids for o in outs], sum(m.num_early for m in masks), forced)
        assert all(m.num_late == 0 and m.num_early <= m.num_masks for m in masks)
    assert got[True][0] == got[False][0] == reference_outputs
    assert got[True][1] > 0 and got[False][1] == 0
    assert got[True][2] > 0  # jump-forward forced tokens along the way


class GatedMatcher:
    """A real matcher whose first mask is held until ``gate`` opens (a slow mask)."""

    def __init__(self, inner, gate: threading.Event):
        self.inner, self.gate, self.held = inner, gate, False

    def fill_bitmask(self, bitmask, row):
        if not self.held:
            self.held = True
            assert self.gate.wait(DEADLINE_S), "the test never opened the gate"
        self.inner.fill_bitmask(bitmask, row)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class GatedBackend:
    """The engine's backend, with ``SLOW_RX`` requests' matchers gated."""

    def __init__(self, inner, gate: threading.Event):
        self.inner, self.gate = inner, gate

    def create_matcher(self, params):
        m = self.inner.create_matcher(params)
        return GatedMatcher(m, self.gate) if params.regex == SLOW_RX else m

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.parametrize("n", [len(PROMPTS), len(PROMPTS) - 1], ids=["with-plain", "all-constrained"])
def test_a_late_mask_delays_only_its_request(tiny_engine_model, reference_outputs, n):
    """With ``all-constrained``, a step can find every mask late (the held one and the
    others, on a loaded machine): it must take the first that comes, not wait for all."""
    loaded, _ = tiny_engine_model
    gate = threading.Event()
    params = constrained_params()[:n]
    others = n - 1
    seen = {"finished": 0, "late": 0, "finished_while_held": 0}

    def observe(s):
        if s.masks is not None:
            seen["late"] += s.masks.num_late
        seen["finished"] += s.num_finished
        if not gate.is_set():
            seen["finished_while_held"] += s.num_finished
            if seen["finished"] >= others:  # everyone else is done: the slow mask comes in
                gate.set()

    with Engine(loaded, max_total_tokens=4096, check_memory=True, mask_wait_ms=1.0) as engine:
        engine.grammar_backend = GatedBackend(engine.grammar_backend, gate)
        engine.add_step_observer(observe)
        try:
            outs = engine.generate(PROMPTS[:n], sampling_params=params)
        finally:
            gate.set()
        engine.check_memory(idle=True)
        assert engine.generate(PROMPTS[0], sampling_params=params[0]).output_ids == reference_outputs[0]
    assert seen["finished_while_held"] == others  # nobody waited for the held mask
    assert seen["late"] > 0
    assert [o.output_ids for o in outs] == reference_outputs[:n]  # the late request lost nothing


def test_a_fill_that_raises_is_returned_for_its_request_alone():
    class Boom:
        def fill_bitmask(self, bitmask, row):
            raise RuntimeError("boom")

    class Allow:
        def fill_bitmask(self, bitmask, row):
            bitmask[row, :] = 5

    class R:  # the two attributes a filler reads
        def __init__(self, grammar, rid):
            self.grammar, self.rid = grammar, rid

    reqs = [R(Boom(), "a"), R(Allow(), "b"), R(None, "c")]
    for overlap in (True, False):
        filler = MaskFiller(70, overlap=overlap, wait_s=DEADLINE_S)
        try:
            filler.start(reqs)
            bitmask, late, errors, _, _, _ = filler.collect(reqs)
        finally:
            filler.close()
        assert late == [] and [(r.rid, str(e)) for r, e in errors] == [("a", "boom")]
        assert bitmask.shape == (3, 3) and (bitmask[1] == 5).all() and (bitmask[2] == -1).all()


def test_a_pool_that_takes_no_work_fills_on_the_calling_thread():
    # at interpreter exit concurrent.futures refuses every submit (RuntimeError) while an
    # engine left running still steps (tests/runtime/test_engine_api.py's exit test met it):
    # the fill must happen anyway, not fail the request
    from concurrent.futures import ThreadPoolExecutor

    class Allow:
        def fill_bitmask(self, bitmask, row):
            bitmask[row, :] = 7

    class R:
        def __init__(self, grammar, rid):
            self.grammar, self.rid = grammar, rid

    reqs = [R(Allow(), "a"), R(None, "b")]
    filler = MaskFiller(70, overlap=True, wait_s=DEADLINE_S)
    filler._pool = ThreadPoolExecutor(1)
    filler._pool.shutdown()
    try:
        filler.start(reqs)
        bitmask, late, errors, _, _, _ = filler.collect(reqs)
    finally:
        filler.close()
    assert late == [] and errors == []
    assert (bitmask[0] == 7).all() and (bitmask[1] == -1).all()


def test_config_validates_the_mask_knobs():
    with pytest.raises(ConfigError, match="mask_wait_ms"):
        EngineConfig(mask_wait_ms=-1)
    with pytest.raises(ConfigError, match="overlap_masks"):
        EngineConfig(overlap_masks="yes")
    with pytest.raises(ConfigError, match="early_masks"):
        EngineConfig(early_masks=1)
