"""The default model (SmolLM2-135M-Instruct, pulled on first use): furca's batched greedy
decode equals transformers' greedy `generate`, one prompt at a time, fp32."""

from __future__ import annotations

import pytest
import torch

from engine_reference import assert_greedy_match
from furca.runtime.engine import Engine
from furca.runtime.pull import pull_default_model

pytestmark = pytest.mark.default_model

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers and explain why they are prime.",
]


def test_default_model_greedy_equals_transformers_generate():
    from transformers import AutoModelForCausalLM

    model_dir = pull_default_model(progress=False)
    # model=None: the default model; dtype="float32" explicitly: all-fp32 (no bf16 projections)
    with Engine(max_total_tokens=4096, check_memory=True, dtype="float32") as engine:
        assert engine.loaded.model.linear_dtype == torch.float32
        tok = engine.tokenizer
        ids = [tok.encode(tok.apply_chat_template([{"role": "user", "content": p}])) for p in PROMPTS]
        outs = engine.generate(input_ids=ids, sampling_params={"temperature": 0, "max_new_tokens": 64})
        engine.check_memory(idle=True)

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for prompt_ids, out in zip(ids, outs):
        with torch.no_grad():
            gen = hf.generate(torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
                              do_sample=False, max_new_tokens=64, output_scores=True, return_dict_in_generate=True,
                              pad_token_id=tok.pad_token_id)
        ref = gen.sequences[0, len(prompt_ids):].tolist()
        margins = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in gen.scores]
        assert_greedy_match(out.output_ids, ref, margins)
        assert out.text == tok.decode(out.output_ids[:-1] if out.output_ids[-1] in tok.eos_token_ids else out.output_ids)
    assert max(len(o.output_ids) for o in outs) == 64  # one ran the full length


def test_bf16_projections_agree_with_fp32_where_fp32_is_sure():
    """``linear_dtype="bfloat16"`` (what ``auto`` picks on a CPU with native bf16): the
    greedy output equals the all-fp32 engine's up to the first step where fp32's top-2
    margin is under 0.5 (bf16 rounding moves logits by a few hundredths to tenths), the
    log-probabilities of the shared tokens stay within 0.3 nats, the head and the logits
    stay fp32, and the KV cache follows the projections (bf16)."""
    params = {"temperature": 0, "max_new_tokens": 32, "return_logprob": True, "top_logprobs_num": 2}
    runs = {}
    for linear_dtype in ("float32", "bfloat16"):
        with Engine(max_total_tokens=4096, dtype="float32", linear_dtype=linear_dtype) as engine:
            model = engine.loaded.model
            assert model.linear_dtype == getattr(torch, linear_dtype)
            assert model.model.embed_tokens.weight.dtype == torch.float32  # the tied head
            # kv_cache_dtype "auto": the projections' dtype (bf16 K/V from bf16 projections)
            assert engine.scheduler.runner.kv_cache.dtype == getattr(torch, linear_dtype)
            tok = engine.tokenizer
            ids = [tok.encode(tok.apply_chat_template([{"role": "user", "content": p}])) for p in PROMPTS]
            runs[linear_dtype] = engine.generate(input_ids=ids, sampling_params=params)
    compared = 0
    for ref, got in zip(runs["float32"], runs["bfloat16"]):
        top2 = ref.meta_info["output_top_logprobs"]
        margins = [step[0][0] - step[1][0] for step in top2]
        assert_greedy_match(got.output_ids, ref.output_ids, margins, tie=0.5)
        for i, (a, b) in enumerate(zip(ref.output_ids, got.output_ids)):
            if a != b:
                break
            lp_ref, lp_got = ref.meta_info["output_token_logprobs"][i][0], got.meta_info["output_token_logprobs"][i][0]
            assert abs(lp_ref - lp_got) < 0.3, (i, lp_ref, lp_got)
            compared += 1
    assert compared >= 10  # the check above covered real tokens
