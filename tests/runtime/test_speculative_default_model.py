"""Speculative decoding (n-gram) on the default model, all fp32: greedy outputs equal the
non-speculative engine's (up to the reference's first near-tie step, as a decode row and
an extend row differ in the last bits), at batch 1 and 8, with and without a JSON-schema
constraint and with a radix-cache hit; copying prompts accept most drafts."""

from __future__ import annotations

import json

import pytest

from engine_reference import assert_greedy_match
from furca.runtime.engine import Engine

pytestmark = pytest.mark.default_model

DOC = ("Invoice 48213 was issued on March 3, 2024 to Maria Lopez, 12 Harbor Street, Portland. "
       "The total due is 1,250 dollars, payable within 30 days to Northwind Supplies.")
CHATS = [
    f"Copy this text exactly, word for word:\n{DOC}",
    f"From this document, extract the customer name, city and total as JSON:\n{DOC}",
    "What is the capital of France?",
    "Write a haiku about the sea.",
    f"Rewrite this paragraph, changing only the name Maria Lopez to Ann Smith:\n{DOC}",
    "List three prime numbers.",
    "Repeat the word 'banana' ten times.",
    "Explain what a radix tree is in one sentence.",
]
SCHEMA = {"type": "object", "properties": {"customer": {"type": "string"}, "city": {"type": "string"},
                                           "total": {"type": "string"}},
          "required": ["customer", "city", "total"], "additionalProperties": False}


@pytest.fixture(scope="module")
def engines():
    with Engine(max_total_tokens=8192, check_memory=True, dtype="float32") as plain, \
            Engine(plain.loaded, max_total_tokens=8192, check_memory=True, speculative_algorithm="ngram") as spec:
        tok = plain.tokenizer
        ids = [tok.encode(tok.apply_chat_template([{"role": "user", "content": c}])) for c in CHATS]
        yield plain, spec, ids


def compare(plain, spec, ids, params):
    params = dict(params, temperature=0, return_logprob=True, top_logprobs_num=2)
    ref = plain.generate(input_ids=ids, sampling_params=params)
    got = spec.generate(input_ids=ids, sampling_params=params)
    for r, g in zip(ref, got):
        margins = [step[0][0] - step[1][0] for step in r.meta_info["output_top_logprobs"]]
        assert_greedy_match(g.output_ids, r.output_ids, margins)
    spec.check_memory(idle=True)
    return got


@pytest.mark.parametrize("batch", [1, 8])
def test_greedy_equals_non_speculative(engines, batch):
    plain, spec, ids = engines
    got = compare(plain, spec, ids[:batch], {"max_new_tokens": 32})
    copy = got[0].meta_info
    assert copy["spec_num_correct_drafts"] >= 16, copy  # copying accepts most drafts


def test_json_schema_greedy_equals_non_speculative(engines):
    plain, spec, ids = engines
    got = compare(plain, spec, [ids[1], ids[4]], {"max_new_tokens": 40, "json_schema": json.dumps(SCHEMA)})
    assert got[0].meta_info["spec_num_correct_drafts"] > 0
    if got[0].meta_info["finish_reason"]["type"] == "stop":
        assert set(json.loads(got[0].text)) == {"customer", "city", "total"}


def test_radix_cache_hit(engines):
    plain, spec, ids = engines
    compare(plain, spec, [ids[0]], {"max_new_tokens": 24})
    again = compare(plain, spec, [ids[0]], {"max_new_tokens": 24})
    assert again[0].meta_info["cached_tokens"] >= len(ids[0]) - 1
