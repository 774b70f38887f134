"""The measuring parts of ``bench/quantization.py`` that decide its figures: the sliding
perplexity windows, the engine's perplexity (prompt logprobs) against transformers' own
logits on a tiny random Llama, the numpy log-likelihood that the llama.cpp side uses, and
the resident tensor bytes (a tied head counted once). Speed is not tested here."""

from __future__ import annotations

import importlib.util
import math
import random
from pathlib import Path

import pytest
import torch

from furca.runtime.engine import Engine

from tests.runtime.conftest import hf_logits

_PATH = Path(__file__).resolve().parents[2] / "bench" / "quantization.py"
_spec = importlib.util.spec_from_file_location("bench_quantization", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.mark.parametrize("n,window,stride", [(1, 8, 4), (2, 8, 4), (8, 8, 4), (9, 8, 4), (100, 32, 16),
                                             (1000, 1024, 512), (8000, 1024, 512), (37, 10, 3)])
def test_windows_score_every_token_but_the_first_once_with_context(n, window, stride):
    windows = bench.ppl_windows(n, window, stride)
    scored = [b + q for b, e, s in windows for q in range(s, e - b)]
    assert scored == list(range(1, n))
    for b, e, s in windows:
        assert 0 <= b < e <= n and e - b <= window and 1 <= s <= e - b
        assert s == 1 or s >= min(window - stride, e - b)  # context before the scored part


def _reference_ppl(hf_model, ids, windows) -> float:
    nll, count = 0.0, 0
    for b, e, s in windows:
        logp = torch.log_softmax(hf_logits(hf_model, ids[b:e]).double(), dim=-1)
        nll -= sum(logp[q - 1, ids[b + q]].item() for q in range(s, e - b))
        count += e - b - s
    return math.exp(nll / count)


def test_engine_perplexity_equals_transformers_over_sliding_windows(tiny_engine_model):
    loaded, hf_model = tiny_engine_model
    rng = random.Random(0)
    ids = [rng.randrange(3, hf_model.config.vocab_size) for _ in range(300)]
    windows = bench.ppl_windows(len(ids), 128, 64)
    with Engine(loaded, max_total_tokens=2048, check_memory=True) as engine:
        ppl, count = bench.engine_perplexity(engine, ids, windows)
        engine.check_memory()
    assert count == len(ids) - 1
    assert ppl == pytest.approx(_reference_ppl(hf_model, ids, windows), rel=1e-4)


def test_window_nll_equals_cross_entropy():
    torch.manual_seed(0)
    logits = torch.randn(40, 97) * 4
    ids = torch.randint(0, 97, (40,)).tolist()
    for start in (1, 7, 39):
        ref = torch.nn.functional.cross_entropy(logits[start - 1 : 39].double(), torch.tensor(ids[start:]),
                                                reduction="sum").item()
        assert bench.window_nll(logits.numpy(), ids, start) == pytest.approx(ref, rel=1e-9)


def test_tensor_bytes_counts_each_storage_once():
    class Holder:  # a packed-weight holder kept as a plain attribute
        def __init__(self):
            self.codes = torch.zeros(10, 16, dtype=torch.uint8)
            self.scales = [torch.zeros(10, dtype=torch.float32)]

    emb = torch.nn.Embedding(50, 8)
    head = torch.nn.Linear(8, 50, bias=False)
    head.weight = emb.weight  # tied
    model = torch.nn.ModuleList([emb, head, torch.nn.LayerNorm(8)])
    model[2].packed = Holder()
    model[2].register_buffer("table", torch.zeros(4, dtype=torch.float64))
    expected = 50 * 8 * 4 + (8 + 8) * 4 + 160 + 40 + 4 * 8
    assert bench.tensor_bytes(model) == expected
