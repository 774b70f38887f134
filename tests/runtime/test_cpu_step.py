"""The compiled CPU decode step (furca.runtime.models.cpu_step) equals the per-op path.

A tiny random Llama written as a GGUF (q, v, gate, down Q4_1 and k, o, up Q8_0: every
fused projection mixes Int4Dot and GroupInt8 segments) is loaded with Int4Dot on, and the
same decode batches run through the compiled step and through the per-op layers (the
model's ``cpu_step`` set aside), each on its own KV pool."""

from __future__ import annotations

import pytest
import torch

from furca.runtime import omp_team
from furca.runtime.models import cpu_step
from furca.runtime.quant import int4_dot, packed

pytest.importorskip("numba")
pytestmark = [
    pytest.mark.skipif(not omp_team.available(), reason="torch's parallel backend is not libgomp here"),
    pytest.mark.skipif(not int4_dot.vnni_available(), reason="no AVX512_VNNI: Int4Dot is not built"),
]


@pytest.fixture
def tiny(tiny_gguf, monkeypatch):
    from furca.runtime.loader import load_model

    monkeypatch.setattr(packed, "INT4_DOT", True)
    return load_model(tiny_gguf[0], dtype="float32", quantization="auto")


class _Twin:
    """Two harnesses over one model: ``step`` with the compiled step, ``per_op`` without;
    counts the steps the compiled path really ran."""

    def __init__(self, loaded, model_harness):
        self.model, self.step = loaded.model, loaded.model.cpu_step
        self.runs = 0
        run = self.step.run

        def counted(*args):
            self.runs += 1
            return run(*args)

        self.step.run = counted
        self.with_step = model_harness(loaded.model, loaded.config)
        self.per_op = model_harness(loaded.model, loaded.config)

    def forward(self, requests_step, requests_op):
        got = self.with_step.forward(requests_step)
        self.model.cpu_step = None
        try:
            want = self.per_op.forward(requests_op)
        finally:
            self.model.cpu_step = self.step
        return got, want


def test_the_tiny_model_takes_the_step_with_both_layouts(tiny):
    step = tiny.model.cpu_step
    assert step is not None
    kinds = {int(k) for k in step.table[:, cpu_step.QKV + 5::cpu_step.SEG][:, :3].ravel()}
    assert kinds == {cpu_step.INT4_DOT, cpu_step.GROUP_I8}  # Q4_1 and Q8_0 shards of one fused qkv
    assert int(step.table[0, cpu_step.QKV]) == 3  # three segments


@pytest.mark.parametrize("threads", [1, 2, 3])  # 3: more team threads than cores (barriers yield)
@pytest.mark.parametrize("prompt_lens", [[5], [3, 17], [1, 9, 30, 64]])
def test_step_logits_equal_the_per_op_path(tiny, model_harness, prompt_lens, threads):
    twin = _Twin(tiny, model_harness)
    gen = torch.Generator().manual_seed(len(prompt_lens))
    vocab = tiny.config.vocab_size
    prompts = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in prompt_lens]
    # prefill (an extend batch: per-op both times, but for a one-token prompt, which is a
    # decode batch), then decode steps of len(prompts) rows
    states = []
    for p in prompts:
        ((lg, s_step),), ((lw, s_op),) = twin.forward([([], p)], [([], p)])
        torch.testing.assert_close(lg, lw, rtol=1e-4, atol=1e-4 * lw.abs().max().item())
        states.append([int(lg[-1].argmax()), s_step, s_op])
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for _ in range(6):
            got, want = twin.forward([(s, [t]) for t, s, _ in states], [(s, [t]) for t, _, s in states])
            for st, (lg, s_step), (lw, s_op) in zip(states, got, want):
                torch.testing.assert_close(lg, lw, rtol=1e-4, atol=1e-4 * lw.abs().max().item())
                st[:] = int(lw[-1].argmax()), s_step, s_op
    finally:
        torch.set_num_threads(before)
    assert twin.runs == 6 + prompt_lens.count(1)


def test_radix_shared_prefix(tiny, model_harness):
    """Two requests decoding over the same prefix slots (a radix-cache hit) in one batch."""
    twin = _Twin(tiny, model_harness)
    prefix = list(range(10, 30))
    (lg, s_step), = twin.with_step.forward([([], prefix)])
    (_, s_op), = twin.per_op.forward([([], prefix)])
    seqs = [[s_step, s_op, 7], [s_step, s_op, 8]]  # both branch off the shared prefix
    for _ in range(4):
        got, want = twin.forward([(a, [t]) for a, _, t in seqs], [(b, [t]) for _, b, t in seqs])
        for seq, (lg, a), (lw, b) in zip(seqs, got, want):
            torch.testing.assert_close(lg, lw, rtol=1e-4, atol=1e-4 * lw.abs().max().item())
            seq[:] = a, b, int(lw[-1].argmax())
    assert seqs[0][0][:len(prefix)] == seqs[1][0][:len(prefix)] == s_step  # the prefix slots are shared
    assert twin.runs == 4


def test_greedy_tokens_identical_over_32_steps(tiny, model_harness):
    twin = _Twin(tiny, model_harness)
    prompt = [5, 9, 42, 7, 100, 3]
    (lg, a), = twin.with_step.forward([([], prompt)])
    (lw, b), = twin.per_op.forward([([], prompt)])
    ta = tb = int(lg[-1].argmax())
    out_a, out_b = [], []
    for _ in range(32):
        out_a.append(ta)
        out_b.append(tb)
        ((lg, a),), ((lw, b),) = twin.forward([(a, [ta])], [(b, [tb])])
        ta, tb = int(lg[-1].argmax()), int(lw[-1].argmax())
    assert out_a == out_b
    assert len(set(out_a)) > 3  # a real sequence, not one token repeated
    assert twin.runs == 32


def test_prefill_and_large_batches_keep_the_per_op_path(tiny, model_harness):
    twin = _Twin(tiny, model_harness)
    (_, slots), = twin.with_step.forward([([], [4, 5, 6])])  # an extend batch
    reqs = [([], [9])] * 5  # 5 rows: more than MAX_ROWS
    twin.with_step.forward(reqs)
    assert twin.runs == 0
    twin.with_step.forward([(slots, [7])])
    assert twin.runs == 1


def test_off_switch_and_a_bad_value(tiny_gguf, monkeypatch):
    from furca.runtime.loader import load_model

    monkeypatch.setattr(packed, "INT4_DOT", True)
    monkeypatch.setenv("FURCA_CPU_STEP", "0")
    assert load_model(tiny_gguf[0], dtype="float32", quantization="auto").model.cpu_step is None
    monkeypatch.setenv("FURCA_CPU_STEP", "yes")
    with pytest.raises(ValueError, match="FURCA_CPU_STEP must be 0 or 1, got 'yes'"):
        cpu_step.enabled()


def test_torch_int4_layout_and_bf16_projections_keep_the_per_op_path(tiny_gguf, monkeypatch):
    from furca.runtime.loader import load_model

    monkeypatch.setattr(packed, "INT4_DOT", False)  # Q4_1 shards in torch's Int4Packed
    assert load_model(tiny_gguf[0], dtype="float32", quantization="auto").model.cpu_step is None
    monkeypatch.setattr(packed, "INT4_DOT", True)
    assert load_model(tiny_gguf[0], dtype="float32", linear_dtype="bfloat16", quantization="auto").model.cpu_step is None
