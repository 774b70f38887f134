"""The default model quantized, end to end: int8 follows fp32's greedy choices wherever
fp32 is not close to a tie, and int4 and the file's own Q4_1 write fluent, finished
answers to the quickstart's questions (fluent: fp32 itself finds the text likely)."""

from __future__ import annotations

import pytest
import torch

from furca.runtime.loader import load_model
from furca.runtime.pull import default_gguf_path, pull_default_model

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Water boils at a temperature of",
    "Once upon a time, in a small village,",
]
STEPS = 64


def default_model_dir():
    return pull_default_model(progress=False)


@pytest.fixture(scope="module")
def fp32():
    return load_model(default_model_dir(), dtype="float32")


def _greedy(harness_cls, loaded, ids: list[int], steps: int) -> list[int]:
    harness = harness_cls(loaded.model, loaded.config)
    (logits, slots), = harness.forward([([], ids)])
    out = []
    for _ in range(steps):
        out.append(int(logits[-1].argmax()))
        (logits, slots), = harness.forward([(slots, [out[-1]])])
    return out


def _all_logits(harness_cls, loaded, ids: list[int]) -> torch.Tensor:
    (logits, _), = harness_cls(loaded.model, loaded.config).forward([([], ids)], all_logits=True)
    return logits


def test_int8_follows_fp32_greedy_where_fp32_is_decided(fp32, model_harness):
    int8 = load_model(default_model_dir(), dtype="float32", quantization="int8")
    checked = agreed = 0
    for text in PROMPTS:
        prompt = fp32.tokenizer.encode(text)
        gen = _greedy(model_harness, fp32, prompt, STEPS)
        seq = prompt + gen
        ref = _all_logits(model_harness, fp32, seq)[len(prompt) - 1:len(seq) - 1]  # the logits that chose gen
        got = _all_logits(model_harness, int8, seq)[len(prompt) - 1:len(seq) - 1]  # int8 on the same (teacher-forced) text
        top2 = ref.topk(2, dim=-1).values
        decided = (top2[:, 0] - top2[:, 1]) > 0.5
        assert torch.equal(ref.argmax(-1), torch.tensor(gen))
        checked += int(decided.sum())
        agreed += int((got.argmax(-1) == ref.argmax(-1))[decided].sum())
    assert checked >= 100  # most positions are decided: the check is not vacuous
    assert agreed == checked, f"int8 differs from fp32 at {checked - agreed} of {checked} decided positions"


def _quickstart_answers(engine) -> list[tuple[str, str, dict]]:
    questions = ["Name one thing a lighthouse is for.", "What is the capital of France?"]
    out = []
    for q in questions:
        prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
        res = engine.generate(prompt, sampling_params={"max_new_tokens": 48, "temperature": 0})
        out.append((prompt, res["text"], res["meta_info"]))
    return out


def _quickstart_program(engine):
    """examples/quickstart.py's chat program, on this engine: its two answers and their meta."""
    import furca as sgl
    from examples.quickstart import lighthouse

    previous = sgl.global_config.default_backend
    sgl.set_default_backend(engine)
    try:
        state = lighthouse.run(temperature=0)
    finally:
        sgl.set_default_backend(previous)
    return [(state[name], state.get_meta_info(name)) for name in ("first", "second")]


@pytest.mark.parametrize("which", ["int4", "gguf-q4_1"])
def test_int4_and_q4_1_answer_fluently(which, fp32, model_harness):
    from furca.runtime.engine import Engine

    if which == "int4":
        engine = Engine(str(default_model_dir()), quantization="int4")  # the engine's own dtypes
    else:
        default_gguf_path(progress=False)  # fetched quietly first; the alias resolves to it
        engine = Engine("default-gguf", quantization="auto")
    with engine:
        summary = engine.effective_config()["quantization"]
        answers = _quickstart_answers(engine)
        program = _quickstart_program(engine)
    assert summary == ("int4" if which == "int4" else "Q4_1+Q8_0")
    for prompt, text, meta in answers:
        assert meta["finish_reason"]["type"] == "stop", (text, meta["finish_reason"])
        assert len(text.split()) >= 2, text
        # fluent: the fp32 model finds the quantized model's answer likely (mean log-probability per token)
        p = fp32.tokenizer.encode(prompt, add_special_tokens=False)
        a = fp32.tokenizer.encode(text, add_special_tokens=False)
        logp = torch.log_softmax(_all_logits(model_harness, fp32, p + a)[len(p) - 1:-1], dim=-1)
        mean = logp.gather(1, torch.tensor(a)[:, None]).mean().item()
        assert mean > -2.0, (text, mean)
    for text, meta in program:  # the quickstart's own program finishes its turns with words
        assert meta["finish_reason"]["type"] == "stop" and len(text.split()) >= 3, (text, meta["finish_reason"])
