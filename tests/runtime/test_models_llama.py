"""furca's Llama-family model against transformers on tiny random checkpoints:
prefill, 16 greedy decode steps, a mixed batch (prefix-cached extend + decode + fresh
extend) and a padded decode-only batch of different lengths."""

from __future__ import annotations

import pytest
import torch

from furca.runtime.loader import load_model

ARCHS = ["llama", "mistral", "qwen2", "qwen3"]
ATOL = 1e-4


def assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    diff = (actual - expected).abs().max().item()
    assert diff < ATOL, f"{what}: max |furca - transformers| = {diff:.2e}"


@pytest.mark.parametrize("arch", ARCHS)
def test_matches_transformers(arch, make_tiny_model_dir, model_harness, reference_logits):
    model_dir, hf = make_tiny_model_dir(arch)
    loaded = load_model(model_dir)
    assert loaded.config.architecture == type(hf).__name__
    assert loaded.config.qk_norm == (arch == "qwen3")
    assert loaded.config.attention_bias == (arch == "qwen2")
    assert loaded.config.tie_word_embeddings == (arch == "llama")
    run = model_harness(loaded.model, loaded.config)
    vocab = loaded.config.vocab_size
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, vocab, (11,), generator=g).tolist()

    # prefill with logits for every prompt row, then 16 greedy decode steps
    [(logits, slots)] = run.forward([([], prompt)], all_logits=True)
    seq = list(prompt)
    assert_close(logits, reference_logits(hf, seq), "prefill")
    for step in range(16):
        seq.append(int(logits[-1].argmax()))
        [(logits, slots)] = run.forward([(slots, seq[-1:])])
        assert_close(logits[0], reference_logits(hf, seq)[-1], f"decode step {step}")

    # one mixed batch: a prefix-cached extend sharing 8 tokens with `seq`,
    # a decode of `seq`, and a fresh extend
    seq.append(int(logits[-1].argmax()))
    shared = seq[:8] + torch.randint(3, vocab, (5,), generator=g).tolist()
    fresh = torch.randint(3, vocab, (6,), generator=g).tolist()
    out = run.forward([(slots[:8], shared[8:]), (slots, seq[-1:]), ([], fresh)], all_logits=True)
    (la, sa), (lb, sb), (lc, sc) = out
    assert la.shape[0] == 5 and lb.shape[0] == 1 and lc.shape[0] == 6
    assert_close(la, reference_logits(hf, shared)[8:], "prefix-cached extend")
    assert_close(lb[0], reference_logits(hf, seq)[-1], "decode in a mixed batch")
    assert_close(lc, reference_logits(hf, fresh), "fresh extend in a mixed batch")

    # decode-only batch of three sequences of different lengths (the padded path)
    seqs = [shared, seq, fresh]
    prev = [la[-1], lb[-1], lc[-1]]
    all_slots = [sa, sb, sc]
    for _ in range(2):
        for s, lg in zip(seqs, prev):
            s.append(int(lg.argmax()))
        out = run.forward([(sl, s[-1:]) for sl, s in zip(all_slots, seqs)])
        prev = [lg[0] for lg, _ in out]
        all_slots = [sl for _, sl in out]
        for s, lg in zip(seqs, prev):
            assert_close(lg, reference_logits(hf, s)[-1], f"decode-only batch, length {len(s)}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_close_to_fp32(dtype, make_tiny_model_dir, model_harness):
    model_dir, _ = make_tiny_model_dir("qwen3")
    ids = list(range(3, 40))
    results = []
    for dt in (torch.float32, dtype):
        loaded = load_model(model_dir, dtype=dt)
        assert loaded.model.model.embed_tokens.weight.dtype == dt
        run = model_harness(loaded.model, loaded.config, dtype=dt)
        [(logits, _)] = run.forward([([], ids)], all_logits=True)
        assert logits.dtype == torch.float32
        results.append(logits)
    ref, half = results
    assert torch.isfinite(half).all()
    rel = (half - ref).norm() / ref.norm()
    assert rel < 0.05, f"{dtype} logits deviate from fp32 by {rel:.3f} (relative L2)"
    assert (half.argmax(-1) == ref.argmax(-1)).float().mean() > 0.8


@pytest.mark.parametrize("arch", ["llama", "qwen2"])  # tied head; untied with q/k/v bias
def test_bf16_projections_in_an_fp32_model(arch, make_tiny_model_dir, model_harness):
    """``linear_dtype=bfloat16``: the decoder layers' projections (and biases) are bf16,
    everything else (embeddings, norms, LM head) and the KV cache stay fp32, and the logits
    stay close to the all-fp32 model's."""
    model_dir, _ = make_tiny_model_dir(arch)
    ids = list(range(3, 40))
    ref_model = load_model(model_dir).model
    loaded = load_model(model_dir, dtype="float32", linear_dtype="bfloat16")
    model = loaded.model
    for name, p in model.named_parameters():
        projection = name.endswith((".weight", ".bias")) and "_proj." in name
        assert p.dtype == (torch.bfloat16 if projection else torch.float32), name
    assert model.model.embed_tokens.weight.dtype == torch.float32  # the tied head
    assert any(n.endswith("qkv_proj.bias") for n, _ in model.named_parameters()) == (arch == "qwen2")
    for name, p in model.named_parameters():  # the same weights, rounded to bf16
        want = dict(ref_model.named_parameters())[name].to(p.dtype)
        assert torch.equal(p, want), name
    results = []
    for m in (ref_model, model):
        run = model_harness(m, loaded.config)
        [(logits, _)] = run.forward([([], ids)], all_logits=True)
        results.append(logits)
    ref, mixed = results
    assert mixed.dtype == torch.float32 and not torch.equal(mixed, ref)  # bf16 products really ran
    rel = (mixed - ref).norm() / ref.norm()
    assert rel < 0.02, f"bf16 projections deviate from fp32 by {rel:.4f} (relative L2)"


def test_logits_indices_select_rows(make_tiny_model_dir, model_harness):
    """The LM head runs only on ``logits_indices`` rows, in the order given."""
    from furca.runtime.forward_batch import ForwardBatch

    model_dir, hf = make_tiny_model_dir("llama")
    loaded = load_model(model_dir)
    run = model_harness(loaded.model, loaded.config)
    ids = list(range(5, 17))
    slots = run.alloc(len(ids))
    rows = torch.tensor([7, 0, 11])
    batch = ForwardBatch.build(prefix_lens=[0], qo_lens=[len(ids)], kv_indices=torch.tensor(slots),
                               out_cache_loc=torch.tensor(slots), logits_indices=rows,
                               kv_cache=run.kv_cache, attn_backend=run.backend)
    logits = loaded.model(torch.tensor(ids), torch.arange(len(ids)), batch)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    assert logits.shape == (3, loaded.config.vocab_size)
    assert_close(logits, ref[rows], "selected rows")


def test_rope_cache_grows_past_initial_capacity():
    from furca.runtime.models.rope import RotaryEmbedding, rope_inv_freq

    rope = RotaryEmbedding(8, 10000.0, None, initial_capacity=4)
    q = torch.randn(2, 1, 8)
    k = torch.randn(2, 1, 8)
    q2, _ = rope(torch.tensor([0, 9]), q, k, max_position=9)
    assert rope.capacity >= 10
    angle = 9 * rope_inv_freq(8, 10000.0, None)
    x1, x2 = q[1, 0, :4], q[1, 0, 4:]
    expected = torch.cat([x1 * angle.cos() - x2 * angle.sin(), x2 * angle.cos() + x1 * angle.sin()])
    torch.testing.assert_close(q2[1, 0], expected)
    torch.testing.assert_close(q2[0], q[0])  # position 0 is the identity
