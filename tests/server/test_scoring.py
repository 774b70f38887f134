"""Scoring through /v1/completions (``echo`` + ``logprobs``), checked against the engine's
own prompt scores on a tiny random model: the request lm-evaluation-harness sends for a
loglikelihood, parsed the way it parses it, gives the engine's numbers."""

from __future__ import annotations

import asyncio
import json
from operator import itemgetter

import httpx
import pytest

from furca.server import ServerArgs, create_app


@pytest.fixture(scope="module")
def engine(tiny_model):
    from furca.runtime.engine import Engine

    with Engine(tiny_model, max_total_tokens=4096) as e:
        yield e


def post(engine, *bodies, stream=False):
    async def main():
        app = create_app(engine, args=ServerArgs())
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as c:
                out = []
                for b in bodies:
                    r = await c.post("/v1/completions", json={**b, "stream": stream})
                    assert r.status_code == 200, r.text
                    out.append(r.text if stream else r.json())
                return out

    return asyncio.run(main())


# lm_eval/models/openai_completions.py (lm-eval 0.4.13), LocalCompletionsAPI: the payload of a
# loglikelihood request, and how the answer is parsed


def lm_eval_payload(model, messages, seed=1234):
    return {"model": model, "prompt": messages, "temperature": 0, "max_tokens": 1, "logprobs": 1, "seed": seed,
            "echo": True}


def lm_eval_parse_logprobs(out, ctxlens):
    res = []
    for choice, ctxlen in zip(sorted(out["choices"], key=itemgetter("index")), ctxlens):
        logprobs = sum(choice["logprobs"]["token_logprobs"][ctxlen:-1])
        tokens_logprobs = choice["logprobs"]["token_logprobs"][ctxlen:-1]
        top_logprobs = choice["logprobs"]["top_logprobs"][ctxlen:-1]
        is_greedy = True
        for tok, top in zip(tokens_logprobs, top_logprobs):
            if tok != max(top.values()):
                is_greedy = False
                break
        res.append((logprobs, is_greedy))
    return res


def engine_scores(engine, ids, top=1):
    out = engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 0, "return_logprob": True,
                                                          "logprob_start_len": 0, "top_logprobs_num": top})
    return out.meta_info["input_token_logprobs"], out.meta_info["input_top_logprobs"]


def test_lm_eval_loglikelihood_request_gives_the_engines_scores(engine):
    tok = engine.tokenizer
    context = tok.encode("The quick brown fox", add_special_tokens=False)
    greedy = engine.generate(input_ids=context, sampling_params={"max_new_tokens": 3, "temperature": 0,
                                                                 "ignore_eos": True}).output_ids
    other = tok.encode(" jumps over", add_special_tokens=False)
    requests = [(context, greedy), (context, other), (tok.encode("Hello", add_special_tokens=False), other)]
    inputs = [c + k for c, k in requests]
    ctxlens = [len(c) for c, _ in requests]
    (answer,) = post(engine, lm_eval_payload("default", inputs))
    got = lm_eval_parse_logprobs(answer, ctxlens)
    for (ctx, cont), ids, (logprob, is_greedy) in zip(requests, inputs, got):
        entries, tops = engine_scores(engine, ids)
        want = sum(e[0] for e in entries[len(ctx):])
        want_greedy = all(e[1] == t[0][1] for e, t in zip(entries[len(ctx):], tops[len(ctx):]))
        assert logprob == pytest.approx(want, abs=1e-4)
        assert is_greedy == want_greedy
    assert [g for _, g in got] == [True, False, False]  # the greedy continuation is greedy
    for choice, ids in zip(sorted(answer["choices"], key=itemgetter("index")), inputs):
        lp = choice["logprobs"]
        assert len(lp["token_logprobs"]) == len(ids) + 1  # the prompt, then the one generated token
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        assert all(isinstance(x, float) for x in lp["token_logprobs"][1:])


def test_echo_with_max_tokens_0_scores_only_the_prompt(engine):
    ids = engine.tokenizer.encode("Paris is the capital of France.", add_special_tokens=False)
    (answer,) = post(engine, {"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 3, "n": 2})
    entries, tops = engine_scores(engine, ids, top=3)
    assert answer["usage"]["completion_tokens"] == 0
    for choice in answer["choices"]:
        lp = choice["logprobs"]
        assert lp["token_logprobs"][1:] == pytest.approx([e[0] for e in entries[1:]], abs=1e-4)
        for got, want in zip(lp["top_logprobs"][1:], tops[1:]):
            assert len(got) == 3  # tokens with one text (bytes of a character) are not merged
            assert sorted(got.values(), reverse=True) == pytest.approx([t[0] for t in want], abs=1e-4)
        assert choice["text"] == engine.tokenizer.decode(ids) == "".join(lp["tokens"])


def test_token_texts_add_up_to_the_text_and_offsets_index_it(engine):
    prompt = "Paris é 東京 and 1234567890"  # characters of several bytes split over tokens
    plain, = post(engine, {"prompt": prompt, "max_tokens": 5, "echo": True, "logprobs": 0, "temperature": 0,
                           "ignore_eos": True})
    choice = plain["choices"][0]
    lp = choice["logprobs"]
    text = choice["text"]
    assert text.startswith(prompt) and "".join(lp["tokens"]) == text
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))]
    assert lp["top_logprobs"] is None  # logprobs=0: the chosen tokens only
    n_prompt = plain["usage"]["prompt_tokens"]
    assert len(lp["tokens"]) == n_prompt + plain["usage"]["completion_tokens"]
    no_echo, = post(engine, {"prompt": prompt, "max_tokens": 5, "logprobs": 0, "temperature": 0,
                             "ignore_eos": True})
    assert no_echo["choices"][0]["logprobs"]["token_logprobs"] == pytest.approx(lp["token_logprobs"][n_prompt:],
                                                                                 abs=1e-4)
    # streamed: the chunks' logprobs, concatenated, are the same
    (raw,) = post(engine, {"prompt": prompt, "max_tokens": 5, "echo": True, "logprobs": 0, "temperature": 0,
                           "ignore_eos": True}, stream=True)
    events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    parts = [e["choices"][0]["logprobs"] for e in events if e["choices"] and e["choices"][0]["logprobs"]]
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == text
    assert [t for p in parts for t in p["tokens"]] == lp["tokens"]
    assert [x for p in parts for x in p["text_offset"]] == lp["text_offset"]
    assert [x for p in parts for x in p["token_logprobs"]] == pytest.approx(lp["token_logprobs"], abs=1e-4)
