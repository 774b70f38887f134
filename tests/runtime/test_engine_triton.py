"""The engine on the Triton attention backend (interpreted on CPU) gives the same greedy
output as on the torch backend: prefix hits, chunked prefill, mixed and decode batches."""

from __future__ import annotations

import os
import random

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before furca.kernels (and its @triton.jit) is imported

from engine_reference import reference_greedy  # noqa: E402
from furca.runtime.engine import Engine  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="the tiny engine model lives on the CPU: needs the interpreter")


def _prompts(vocab: int) -> list[list[int]]:
    rng = random.Random(11)
    toks = lambda n: [rng.randrange(3, vocab) for _ in range(n)]  # noqa: E731
    shared = toks(37)
    return [shared + toks(2), toks(5), shared + toks(21), toks(1), shared + toks(50), toks(70)]


def test_triton_backend_greedy_equals_torch_backend(tiny_engine_model):
    loaded, hf_model = tiny_engine_model
    prompts = _prompts(loaded.config.vocab_size)
    lengths = [14, 9, 12, 6, 10, 8]
    params = [{"temperature": 0, "max_new_tokens": n, "ignore_eos": True} for n in lengths]
    outputs = {}
    for backend in ("torch", "triton"):
        with Engine(loaded, attention_backend=backend, max_total_tokens=2048, chunked_prefill_size=16,
                    check_memory=True) as engine:
            assert type(engine.scheduler.runner.attn_backend).__name__.lower().startswith(backend)
            outs = engine.generate(input_ids=prompts, sampling_params=params)
            assert sum(o.meta_info["cached_tokens"] for o in outs) > 0  # the prefix path ran
            engine.check_memory(idle=True)
        outputs[backend] = [o.output_ids for o in outs]
    for ids, n, got, want in zip(prompts, lengths, outputs["triton"], outputs["torch"]):
        _, margins = reference_greedy(hf_model, ids, n)
        stop = next((i for i, m in enumerate(margins) if m < 1e-4), n)  # up to the first near-tie
        assert got[:stop] == want[:stop], f"prompt of {len(ids)} tokens: triton {got}, torch {want}"
        assert len(got) == n
