"""The compiled CPU decode step on the default model's own Q4_1 GGUF (Int4Dot on): the
engine's greedy answers equal the per-op path's (FURCA_CPU_STEP=0), one request at a
time and four at once, and every KV slot comes back."""

from __future__ import annotations

import pytest

from furca.runtime import omp_team
from furca.runtime.pull import default_gguf_path
from furca.runtime.quant import int4_dot, packed

pytest.importorskip("numba")
pytestmark = [
    pytest.mark.skipif(not omp_team.available(), reason="torch's parallel backend is not libgomp here"),
    pytest.mark.skipif(not int4_dot.vnni_available(), reason="no AVX512_VNNI: Int4Dot is not built"),
]

QUESTIONS = ["Name one thing a lighthouse is for.", "What is the capital of France?",
             "Write a haiku about the sea.", "List three prime numbers."]


def _answers(step_on: bool, monkeypatch) -> tuple[list[str], list[str], int]:
    """Greedy answers one at a time and as one batch of four, and the steps the compiled
    path ran."""
    from furca.runtime.engine import Engine

    monkeypatch.setenv("FURCA_CPU_STEP", "1" if step_on else "0")
    default_gguf_path(progress=False)
    params = {"max_new_tokens": 40, "temperature": 0}
    with Engine("default-gguf", quantization="auto", dtype="float32", linear_dtype="float32") as engine:
        model = engine.scheduler.runner.model
        runs = [0]
        if step_on:
            step = model.cpu_step
            assert step is not None
            run = step.run

            def counted(*args):
                runs[0] += 1
                return run(*args)

            step.run = counted
        else:
            assert model.cpu_step is None
        prompts = [engine.tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
                   for q in QUESTIONS]
        alone = [engine.generate(p, sampling_params=params)["text"] for p in prompts]
        together = [r["text"] for r in engine.generate(prompts, sampling_params=params)]
        engine.check_memory()  # every KV slot and lock returned
    return alone, together, runs[0]


def test_default_gguf_greedy_answers_equal_the_per_op_path(monkeypatch):
    monkeypatch.setattr(packed, "INT4_DOT", True)
    alone, together, runs = _answers(True, monkeypatch)
    want_alone, want_together, _ = _answers(False, monkeypatch)
    assert runs >= 4 * 30  # the decode steps ran compiled (batches of 1 and of up to 4 rows)
    assert alone == want_alone
    assert together == want_together
    assert all(len(text.split()) >= 2 for text in alone), alone
