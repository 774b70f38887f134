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
    with Engine(max_total_tokens=4096, check_memory=True) as engine:  # model=None: the default model
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
