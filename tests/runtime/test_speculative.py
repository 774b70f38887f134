"""Speculative decoding with n-gram drafts (furca/runtime/speculative) on a tiny random
Llama: greedy outputs equal non-speculative ones (batch 1 and 8, stop strings, EOS,
max_new_tokens, JSON schema with and without jump-forward, radix-cache hits), sampling
keeps the target distribution (chi-square against the model's exact probabilities; a
broken acceptance rule fails the same test), and the KV of rejected drafts is freed."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch

from furca.errors import ConfigError
from furca.runtime.engine import Engine
from furca.runtime.speculative import rejection
from furca.runtime.speculative.ngram import NgramIndex
from furca.runtime.speculative.state import SpecState

PROMPTS = ["The quick brown fox", "Hello world! furca runs", "def add(a, b):", "Paris is the capital",
           '{"name": "furca", "version": 1', "1234567890 1234567890", "The lazy dog. The lazy dog.", "json"]

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "tags": {"type": "array", "items":
                   {"enum": ["llm", "json"]}, "maxItems": 4}, "version": {"type": "integer"}},
    "required": ["name", "tags", "version"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engines(tiny_engine_model):
    """(plain, speculative) engines over the same weights."""
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=4096, check_memory=True) as plain, \
            Engine(loaded, max_total_tokens=4096, check_memory=True, speculative_algorithm="ngram",
                   speculative_num_draft_tokens=5) as spec:
        yield plain, spec


def spec_stats(engine: Engine) -> dict:
    return {k: v for k, v in engine.get_server_info()["stats"].items() if k.startswith("spec_")}


def same_outputs(plain: Engine, spec: Engine, prompts, params) -> list:
    a = plain.generate(prompts, sampling_params=params)
    b = spec.generate(prompts, sampling_params=params)
    for x, y in zip(a, b):
        assert y.output_ids == x.output_ids and y.text == x.text
        assert y.meta_info["finish_reason"] == x.meta_info["finish_reason"]
        assert y.meta_info["completion_tokens"] == x.meta_info["completion_tokens"]
    spec.check_memory(idle=True)
    return b


# -- drafting ----------------------------------------------------------------------------


def test_ngram_index_proposes_the_longest_suffix_match():
    idx = NgramIndex(1, 3)
    toks = [5, 6, 7, 8, 1, 6, 7, 9, 2, 5, 6, 7]
    # (5, 6, 7) ended at 2 and is followed by 8; the 2-gram (6, 7) ended last at 6 (-> 9)
    assert idx.propose(toks, 3) == [8, 1, 6]
    assert idx.propose(toks + [4], 2) == []  # 4 never occurred before
    assert NgramIndex(1, 3).propose([1, 2, 1], 4) == [2, 1, 2, 1]  # past the end the period repeats
    assert NgramIndex(1, 3).propose([3, 4, 7, 7, 7], 3) == [7, 7, 7]
    assert NgramIndex(2, 3).propose([1, 2, 3, 9, 3], 2) == []  # one-token matches below min_n
    assert idx.propose(toks, 0) == []


def test_draft_length_backs_off_and_recovers():
    s = SpecState(NgramIndex(1, 2), max_length=6)
    assert s.length == 6
    s.record(6, 2)
    assert (s.length, s.cooldown) == (3, 0)
    s.record(3, 0)
    s.record(1, 0)
    assert (s.length, s.cooldown) == (1, 2)  # fruitless rounds: growing pauses
    s.record(1, 1)
    s.record(2, 2)
    assert (s.length, s.misses) == (3, 0)
    assert s.meta_info() == {"spec_verify_ct": 5, "spec_num_proposed_drafts": 13, "spec_num_correct_drafts": 5,
                             "spec_accept_rate": 5 / 13}


@pytest.mark.parametrize("kwargs", [dict(speculative_algorithm="eagle"), dict(speculative_num_draft_tokens=0),
                                    dict(speculative_ngram_min=3, speculative_ngram_max=2)])
def test_bad_speculative_config_is_rejected_by_name(kwargs):
    from furca.runtime.config import EngineConfig

    with pytest.raises(ConfigError, match=next(iter(kwargs)) if len(kwargs) == 1 else "speculative_ngram_min"):
        EngineConfig.from_kwargs(**kwargs)


# -- greedy identity -------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 8])
def test_greedy_output_equals_non_speculative(engines, batch):
    plain, spec = engines
    before = spec_stats(spec)
    prompts = PROMPTS if batch == 8 else [PROMPTS[6]]
    outs = same_outputs(plain, spec, prompts, {"max_new_tokens": 48, "temperature": 0, "ignore_eos": True})
    after = spec_stats(spec)
    drafted = after["spec_draft_tokens"] - before["spec_draft_tokens"]
    accepted = after["spec_accepted_tokens"] - before["spec_accepted_tokens"]
    assert accepted > 0 and drafted > accepted  # drafts were both kept and rejected
    meta = outs[0].meta_info
    assert meta["spec_verify_ct"] > 0 and 0 <= meta["spec_num_correct_drafts"] <= meta["spec_num_proposed_drafts"]


def test_stop_strings_eos_and_length_inside_accepted_runs(engines):
    plain, spec = engines
    base = plain.generate(PROMPTS, sampling_params={"max_new_tokens": 40, "temperature": 0, "ignore_eos": True})
    # stop on a piece of each greedy output's second half: with drafts, the stop lands inside a verified run
    for out, prompt in zip(base, PROMPTS):
        stop = out.text[len(out.text) // 2:][:3]
        if stop.strip():
            same_outputs(plain, spec, [prompt], {"max_new_tokens": 40, "temperature": 0, "stop": [stop]})
    eos_ids = [out.output_ids[len(out.output_ids) // 2] for out in base]
    for out, prompt, eos in zip(base, PROMPTS, eos_ids):  # a token of the run as a stop token id
        same_outputs(plain, spec, [prompt], {"max_new_tokens": 40, "temperature": 0, "stop_token_ids": [eos]})
    for n in (1, 2, 7, 13):
        same_outputs(plain, spec, PROMPTS, {"max_new_tokens": n, "temperature": 0, "ignore_eos": True})


def test_greedy_with_logprobs_and_penalties(engines):
    plain, spec = engines
    params = {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True, "return_logprob": True,
              "top_logprobs_num": 2, "frequency_penalty": 0.3}
    outs = same_outputs(plain, spec, PROMPTS[:4], params)
    ref = plain.generate(PROMPTS[:4], sampling_params=params)
    for x, y in zip(ref, outs):
        a, b = x.meta_info["output_token_logprobs"], y.meta_info["output_token_logprobs"]
        assert [e[1] for e in a] == [e[1] for e in b]
        assert max(abs(p[0] - q[0]) for p, q in zip(a, b)) < 1e-4


@pytest.mark.parametrize("jump_forward", [True, False])
def test_json_schema_greedy_equals_non_speculative(tiny_engine_model, jump_forward):
    loaded, _ = tiny_engine_model
    kw = dict(max_total_tokens=4096, check_memory=True, enable_jump_forward=jump_forward)
    params = {"max_new_tokens": 60, "temperature": 0, "json_schema": json.dumps(SCHEMA)}
    with Engine(loaded, **kw) as plain, Engine(loaded, speculative_algorithm="ngram", **kw) as spec:
        prompts = [p + ' {"name": "' for p in PROMPTS]
        for batch in (1, 8):
            outs = same_outputs(plain, spec, prompts[:batch], params)
            for o in outs:
                if o.meta_info["finish_reason"]["type"] == "stop":
                    assert set(json.loads(o.text)) == {"name", "tags", "version"}
        assert spec_stats(spec)["spec_accepted_tokens"] > 0


def test_radix_cache_hit_keeps_greedy_output(engines):
    plain, spec = engines
    prompt = "The quick brown fox jumps over the lazy dog. " * 3
    params = {"max_new_tokens": 32, "temperature": 0, "ignore_eos": True}
    first = same_outputs(plain, spec, [prompt], params)[0]
    again = same_outputs(plain, spec, [prompt + first.text[:10]], params)[0]
    assert again.meta_info["cached_tokens"] > 0


# -- memory -----------------------------------------------------------------------------


def test_rejected_drafts_leak_no_kv(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=2048, check_memory=True, speculative_algorithm="ngram",
                speculative_num_draft_tokens=8, disable_radix_cache=False) as spec:
        prompts = [f"{p} {p} {i}" for i in range(3) for p in PROMPTS]
        spec.generate(prompts, sampling_params={"max_new_tokens": 40, "temperature": 1.0, "ignore_eos": True})
        stats = spec_stats(spec)
        assert stats["spec_draft_tokens"] - stats["spec_accepted_tokens"] > 100
        counts = spec.check_memory(idle=True)
        assert counts["free"] + counts["tree"] == counts["capacity"]


def test_abort_mid_run_frees_everything(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=4096, check_memory=True, speculative_algorithm="ngram") as spec:
        seen, aborted = [], threading.Event()
        for delta in spec.generate("1234567890 1234567890 1234567890", stream=True, rid="victim",
                                   sampling_params={"max_new_tokens": 200, "temperature": 0, "ignore_eos": True}):
            seen.append(delta)
            if len(seen) == 3 and not aborted.is_set():
                aborted.set()
                spec.abort("victim")
            if delta.finished:
                break
        assert seen[-1].finished and seen[-1].meta_info["finish_reason"]["type"] == "abort"
        spec.check_memory(idle=True)


# -- sampling ---------------------------------------------------------------------------


def _reference_joint(hf_model, ids, temperature, top_k) -> dict[tuple[int, int], float]:
    """Exact P(t1, t2) of top-k sampling at ``temperature`` from transformers' logits."""
    def dist(seq):
        with torch.no_grad():
            row = hf_model(torch.tensor([seq])).logits[0, -1].double() / temperature
        vals, idx = row.topk(top_k)
        return dict(zip(idx.tolist(), vals.softmax(-1).tolist()))

    return {(a, b): pa * pb for a, pa in dist(ids).items() for b, pb in dist(ids + [a]).items()}


def _chi_square_p(counts: dict, expected: dict, n: int) -> float:
    """Pearson's chi-square goodness-of-fit p-value (upper regularized gamma)."""
    keys = sorted(expected)
    assert set(counts) <= set(keys), "a sample outside the top-k support"
    stat = sum((counts.get(k, 0) - expected[k] * n) ** 2 / (expected[k] * n) for k in keys)
    dof = len(keys) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def _sample_pairs(engine, ids, n, params) -> dict:
    outs = engine.generate(input_ids=[ids] * n, sampling_params=[dict(params, seed=s) for s in range(n)])
    counts: dict = {}
    for o in outs:
        key = tuple(o.output_ids[:2])
        counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.fixture(scope="module")
def sampling_setup(tiny_engine_model):
    """Drafts that the target often accepts: for the second token, the model's most likely
    token after (prompt, first token) (a test-only drafter; verification is the real one)."""
    loaded, hf_model = tiny_engine_model
    temperature, top_k, n = 1.0, 4, 1200
    with Engine(loaded, max_total_tokens=8192, check_memory=True, speculative_algorithm="ngram",
                speculative_num_draft_tokens=1, max_running_requests=128) as spec:
        ids = spec.tokenizer.encode("The quick brown fox")
        expected = _reference_joint(hf_model, ids, temperature, top_k)
        best = {}
        for a in {a for a, _ in expected}:
            with torch.no_grad():
                best[a] = int(hf_model(torch.tensor([ids + [a]])).logits[0, -1].argmax())
        yield spec, ids, expected, best, n, {"max_new_tokens": 3, "temperature": temperature, "top_k": top_k,
                                             "ignore_eos": True}


def _draft_best(monkeypatch, ids, best):
    def propose(self, tokens, k):
        return [best[tokens[-1]]] if len(tokens) == len(ids) + 1 and k > 0 else []

    monkeypatch.setattr(NgramIndex, "propose", propose)


def test_sampled_tokens_keep_the_target_distribution(sampling_setup, monkeypatch):
    spec, ids, expected, best, n, params = sampling_setup
    _draft_best(monkeypatch, ids, best)
    before = spec_stats(spec)
    counts = _sample_pairs(spec, ids, n, params)
    after = spec_stats(spec)
    drafted = after["spec_draft_tokens"] - before["spec_draft_tokens"]
    accepted = after["spec_accepted_tokens"] - before["spec_accepted_tokens"]
    assert drafted == n and 0.2 * n < accepted < 0.8 * n  # both branches of the rule ran often
    assert _chi_square_p(counts, expected, n) > 1e-3
    spec.check_memory(idle=True)


def test_a_biased_acceptance_rule_fails_the_same_check(sampling_setup, monkeypatch):
    """The threshold above catches a real bias: resampling from the full distribution after
    a rejection (instead of the residual without the draft token) over-weights drafts."""
    spec, ids, expected, best, n, params = sampling_setup
    _draft_best(monkeypatch, ids, best)
    monkeypatch.setattr(rejection, "residual", lambda probs, draft: probs.clone())
    counts = _sample_pairs(spec, ids, n, params)
    assert _chi_square_p(counts, expected, n) < 1e-3
    spec.check_memory(idle=True)


# -- streaming and failures -------------------------------------------------------------


def test_stream_deltas_add_up_to_the_non_speculative_output(engines):
    plain, spec = engines
    params = {"max_new_tokens": 40, "temperature": 0, "ignore_eos": True}
    ref = plain.generate(PROMPTS[6], sampling_params=params)
    ids, text, deltas = [], "", 0
    for delta in spec.generate(PROMPTS[6], sampling_params=params, stream=True):
        ids = delta.apply_ids(ids)
        text += delta.text
        deltas += 1
        if delta.finished:
            assert delta.meta_info["spec_num_correct_drafts"] > 0
    assert ids == ref.output_ids and text == ref.text
    spec.check_memory(idle=True)


@pytest.mark.parametrize("stage", ["detokenizer", "forward"])
def test_a_fault_inside_verification_fails_that_request_alone(engines, stage):
    """The victim (whose greedy output repeats itself, so most of its steps verify a
    draft) fails at its seventh token's detokenizer call or in its seventh forward pass;
    the others' outputs are unchanged and every slot it held, drafts included, comes back."""
    from furca.errors import RequestFailedError
    from furca.runtime.faults import FaultInjector

    plain, spec = engines
    params = {"max_new_tokens": 30, "temperature": 0, "ignore_eos": True}
    ref = plain.generate(PROMPTS, sampling_params=params)
    spec.set_fault_injector(FaultInjector(stage, "victim", skip=6))
    results: dict = {}

    def call(i: int) -> None:
        try:
            results[i] = spec.generate(PROMPTS[i], sampling_params=params, rid="victim" if i == 6 else f"ok-{i}")
        except RequestFailedError as e:
            results[i] = e

    try:
        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        spec.set_fault_injector(None)
    assert isinstance(results[6], RequestFailedError)
    for i in range(len(PROMPTS)):
        if i != 6:
            assert results[i].output_ids == ref[i].output_ids
    spec.check_memory(idle=True)


def test_step_stats_count_the_draft_tokens_computed(engines):
    _, spec = engines
    seen = []
    spec.add_step_observer(seen.append)
    try:
        spec.generate(PROMPTS[6], sampling_params={"max_new_tokens": 30, "temperature": 0, "ignore_eos": True})
        deadline = time.monotonic() + 60  # the last step's observer may run after the result is out
        while sum(s.num_generated for s in seen) < 30 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        spec.remove_step_observer(seen.append)
    drafted = [s for s in seen if s.num_draft_tokens]
    assert drafted and all(s.num_tokens == s.num_decode_reqs + s.num_draft_tokens for s in drafted)
    assert sum(s.num_generated for s in seen) == 30


# -- draft model ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def other_draft_dir(tmp_path_factory, tiny_hf_tokenizer):
    """A second tiny random Llama sharing the tokenizer (a draft that is often wrong)."""
    from tests.runtime.conftest import build_tiny_hf_model

    out = tmp_path_factory.mktemp("draft") / "tiny-draft"
    build_tiny_hf_model("llama", len(tiny_hf_tokenizer), seed=2, num_hidden_layers=1).save_pretrained(out)
    tiny_hf_tokenizer.save_pretrained(out)
    return str(out)


def draft_engine(loaded, draft_dir, **kw):
    return Engine(loaded, max_total_tokens=4096, check_memory=True, speculative_algorithm="draft",
                  speculative_draft_model=draft_dir, dtype="float32", linear_dtype="float32", **kw)


def test_draft_algorithm_needs_the_draft_model(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with pytest.raises(ConfigError, match="speculative_draft_model"):
        Engine(loaded, speculative_algorithm="draft")


@pytest.mark.parametrize("which", ["self", "other"])
def test_draft_model_greedy_equals_non_speculative(engines, tiny_engine_model, other_draft_dir, which):
    """The target as its own draft accepts every draft token; another random model is
    mostly rejected; the outputs are the non-speculative ones either way, batch 1 and 8,
    with a JSON schema too, and both KV pools are whole at idle."""
    plain, _ = engines
    loaded, _ = tiny_engine_model
    draft_dir = str(loaded.model_path) if which == "self" else other_draft_dir
    params = {"max_new_tokens": 30, "temperature": 0, "ignore_eos": True}
    with draft_engine(loaded, draft_dir) as spec:
        outs = same_outputs(plain, spec, [PROMPTS[0]], params) + same_outputs(plain, spec, PROMPTS, params)
        same_outputs(plain, spec, [p + ' {"name": "' for p in PROMPTS],
                     {"max_new_tokens": 40, "temperature": 0, "json_schema": json.dumps(SCHEMA)})
        again = same_outputs(plain, spec, [PROMPTS[0]], params)[0]  # both radix caches hit
        assert again.meta_info["cached_tokens"] > 0
        stats = spec_stats(spec)
        draft_pool = spec.scheduler.spec.proposer.cache.counts()
    assert draft_pool["free"] + draft_pool["tree"] == draft_pool["capacity"] and draft_pool["tree"] > 0
    if which == "self":
        assert all(o.meta_info["spec_num_correct_drafts"] == o.meta_info["spec_num_proposed_drafts"] > 0
                   for o in outs)
    else:
        assert stats["spec_draft_tokens"] > stats["spec_accepted_tokens"]


def test_draft_model_sampling_keeps_the_target_distribution(tiny_engine_model, sampling_setup):
    """The target's own greedy token as the draft (the target as draft model): accepted
    with its probability, the joint of the first two tokens matches the exact one."""
    loaded, _ = tiny_engine_model
    _, ids, expected, _, n, params = sampling_setup
    with Engine(loaded, max_total_tokens=8192, check_memory=True, speculative_algorithm="draft",
                speculative_draft_model=str(loaded.model_path), dtype="float32", linear_dtype="float32",
                speculative_num_draft_tokens=1, max_running_requests=128) as spec:
        counts = _sample_pairs(spec, ids, n, params)
        stats = spec_stats(spec)
        spec.check_memory(idle=True)
    assert 0.2 * n < stats["spec_accepted_tokens"] < 0.8 * n
    assert _chi_square_p(counts, expected, n) > 1e-3


def test_draft_model_abort_mid_run_frees_both_pools(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with draft_engine(loaded, str(loaded.model_path)) as spec:
        seen = []
        for delta in spec.generate("1234567890 1234567890", stream=True, rid="victim",
                                   sampling_params={"max_new_tokens": 200, "temperature": 0, "ignore_eos": True}):
            seen.append(delta)
            if len(seen) == 3:
                spec.abort("victim")
            if delta.finished:
                break
        assert seen[-1].meta_info["finish_reason"]["type"] == "abort"
        spec.check_memory(idle=True)  # the draft pool's too
