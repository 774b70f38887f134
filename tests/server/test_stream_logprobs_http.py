"""Streamed logprobs over a real `Engine` on a tiny random model (no download).

- Native ``/generate``: every event's meta_info holds its own ``output_token_logprobs``
  (and ``output_top_logprobs``) segment and ``output_token_logprobs_length`` (cumulative,
  == ``completion_tokens``), as SGLang's frontend expects (its ``test_stream_logprobs``
  and its stream reader are replayed here); the segments rebuild the non-streamed answer's
  lists, also through jump-forward retractions; the final event keeps every other key.
- OpenAI chat and completions: chunks carry the logprobs of their tokens; concatenated per
  choice they equal the non-streamed answer's (top alternatives, echoed prompt and
  ``text_offset`` included), and every chunk validates against the `openai` types.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletionChunk

from furca.server import ServerArgs, create_app

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8},
                   "version": {"type": "integer", "minimum": 0, "maximum": 999},
                   "tags": {"type": "array", "items": {"enum": ["llm", "json"]}, "maxItems": 3},
                   "ok": {"type": "boolean"}},
    "required": ["name", "version", "tags", "ok"],
    "additionalProperties": False,
}
PROMPTS = ["Hello", "The quick brown fox", "Paris is"]
LP = {"return_logprob": True, "top_logprobs_num": 2, "return_text_in_logprobs": True}


@pytest.fixture(scope="module")
def engine(tiny_model):
    from furca.runtime.engine import Engine

    with Engine(tiny_model, max_total_tokens=4096, check_memory=True) as e:
        yield e


def call(engine, requests: list[tuple[str, dict]]) -> list[httpx.Response]:
    """POST each ``(path, body)`` in turn to an in-process server over ``engine``."""
    async def main():
        app = create_app(engine, args=ServerArgs())
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=300) as c:
                out = []
                for path, body in requests:
                    r = await c.post(path, json=body)
                    assert r.status_code == 200, r.text
                    out.append(r)
                return out

    out = asyncio.run(main())
    engine.check_memory(idle=True)
    return out


def events(r: httpx.Response) -> list[dict]:
    assert r.text.rstrip().endswith("data: [DONE]")
    return [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]


def close(a: list, b: list, tol: float = 1e-5) -> bool:
    """Two lists of meta_info entries: same ids and texts, logprobs within ``tol``."""
    def flat(x):
        return [(e[1], e[2]) for e in x], [e[0] for e in x]

    (ka, va), (kb, vb) = flat(a), flat(b)
    return ka == kb and va == pytest.approx(vb, abs=tol)


# ----------------------------------------------------------------------- native /generate


def rebuild(evs: list[dict], top: bool) -> tuple[list, list | None, int]:
    """The client's rule: list so far = ``merged[:length - len(segment)] + segment``.
    Checks each event's counts; returns (entries, tops, entries retracted)."""
    merged, tops, retracted = [], [] if top else None, 0
    for e in evs:
        meta = e["meta_info"]
        seg, length = meta["output_token_logprobs"], meta["output_token_logprobs_length"]
        assert length == meta["completion_tokens"] == len(e["output_ids"])
        keep = length - len(seg)
        assert 0 <= keep <= len(merged)
        retracted += len(merged) - keep
        merged = merged[:keep] + seg
        if top:
            assert len(meta["output_top_logprobs"]) == len(seg)
            tops = tops[:keep] + meta["output_top_logprobs"]
        assert [x[1] for x in merged] == e["output_ids"]  # the entries follow the ids
    return merged, tops, retracted


def sglang_frontend_view(evs: list[dict]) -> list[tuple[str, dict]]:
    """What SGLang 0.5.23's frontend yields from these events for
    ``text_async_iter(var, return_meta_data=True)``: ``RuntimeEndpoint.generate_stream``
    slices the cumulative text with its own offset; an event without new text has its
    segments merged into the next one (``_merge_stream_meta_info``)."""
    pos, out, pending = 0, [], None
    for e in evs:
        chunk, meta = e["text"][pos:], e["meta_info"]
        pos += len(chunk)
        if pending is not None:
            merged = dict(meta)
            for key in ("output_token_logprobs", "output_top_logprobs"):
                if key in meta or key in pending:
                    merged[key] = list(pending.get(key, [])) + list(meta.get(key, []))
            meta = merged
        if chunk:
            out.append((chunk, meta))
            pending = None
        else:
            pending = meta
    return out


def test_native_events_carry_their_own_logprobs(engine):
    bodies = [{"text": p, "sampling_params": {"max_new_tokens": 20, "temperature": 1.0 if i else 0.0, "seed": i,
                                              "ignore_eos": True}, **LP, "logprob_start_len": 0}
              for i, p in enumerate(PROMPTS)]
    bodies.append({"text": "Hello", "sampling_params": {"max_new_tokens": 30, "temperature": 0, "stop": ["o"]},
                   "return_logprob": True})
    reqs = [r for b in bodies for r in (("/generate", {**b, "stream": True}), ("/generate", b))]
    answers = call(engine, reqs)
    for body, streamed, plain in zip(bodies, answers[::2], answers[1::2]):
        evs, want = events(streamed), plain.json()
        top = body.get("top_logprobs_num", 0) > 0
        entries, tops, retracted = rebuild(evs, top)
        assert retracted == 0
        meta = evs[-1]["meta_info"]
        assert close(entries, want["meta_info"]["output_token_logprobs"])
        if top:
            assert [[a[1] for a in t] for t in tops] == [[a[1] for a in t] for t in
                                                         want["meta_info"]["output_top_logprobs"]]
        else:
            assert all("output_top_logprobs" not in e["meta_info"] for e in evs)
        # the final event keeps every other key, the prompt's logprobs once
        assert set(want["meta_info"]) | {"output_token_logprobs_length"} == set(meta)
        assert meta["finish_reason"] == want["meta_info"]["finish_reason"]
        if "logprob_start_len" in body:
            assert close(meta["input_token_logprobs"][1:], want["meta_info"]["input_token_logprobs"][1:])
            assert all("input_token_logprobs" not in e["meta_info"] for e in evs[:-1])
        assert evs[-1]["output_ids"] == want["output_ids"] and evs[-1]["text"] == want["text"]
        # SGLang's own test_stream_logprobs, over what its frontend makes of the events
        chunks = sglang_frontend_view(evs)
        assert chunks
        prev = 0
        for chunk, m in chunks:
            assert chunk and m["completion_tokens"] == m["output_token_logprobs_length"]
            assert len(m["output_token_logprobs"]) == m["completion_tokens"] - prev
            prev = m["completion_tokens"]


def test_native_batch_and_n_samples(engine):
    body = {"text": ["Hello", "Paris is"], "sampling_params": {"max_new_tokens": 12, "temperature": 1.0, "seed": 7,
                                                               "n": 2, "ignore_eos": True}, **LP}
    streamed, plain = call(engine, [("/generate", {**body, "stream": True}), ("/generate", body)])
    evs, want = events(streamed), plain.json()
    assert len(want) == 4
    for i, w in enumerate(want):
        entries, _, _ = rebuild([e for e in evs if e["index"] == i], top=True)
        assert close(entries, w["meta_info"]["output_token_logprobs"])


def test_native_stream_through_retractions(engine):
    """A constrained request whose forced text re-tokenizes tokens already streamed: the
    event after it says so by its length (fewer than the entries received), and the rule
    ``merged[:length - len(segment)] + segment`` rebuilds the answer's list."""
    bodies = [{"text": p, "sampling_params": {"json_schema": SCHEMA, "temperature": 1.0 if s else 0.0, "seed": s,
                                              "max_new_tokens": 80}, **LP}
              for s, p in enumerate(PROMPTS)]
    answers = call(engine, [r for b in bodies for r in (("/generate", {**b, "stream": True}), ("/generate", b))])
    total = 0
    for streamed, plain in zip(answers[::2], answers[1::2]):
        evs, want = events(streamed), plain.json()
        entries, tops, retracted = rebuild(evs, top=True)
        total += retracted
        assert close(entries, want["meta_info"]["output_token_logprobs"], tol=1e-4)
        assert len(tops) == len(entries)
        assert evs[-1]["meta_info"]["jump_forward_tokens"] > 0
    assert total > 0  # a retraction really was streamed


def test_native_stream_without_logprobs_is_unchanged(engine):
    (r,) = call(engine, [("/generate", {"text": "Hello", "sampling_params": {"max_new_tokens": 5}, "stream": True})])
    for e in events(r):
        assert not any(k.endswith("logprobs") or k.endswith("logprobs_length") for k in e["meta_info"])


# ----------------------------------------------------------------------- OpenAI chat

USER = [{"role": "user", "content": "Name a fruit."}]
SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}


def same_chat_items(got: list[dict], want: list[dict]) -> None:
    assert [(x["token"], x["bytes"], [t["token"] for t in x["top_logprobs"]]) for x in got] == \
        [(x["token"], x["bytes"], [t["token"] for t in x["top_logprobs"]]) for x in want]
    assert [x["logprob"] for x in got] == pytest.approx([x["logprob"] for x in want], abs=1e-4)


@pytest.mark.parametrize("body", [
    {"messages": USER, "max_tokens": 16, "temperature": 0, "logprobs": True, "top_logprobs": 3},
    {"messages": USER, "max_tokens": 12, "temperature": 1.0, "seed": 3, "n": 2, "logprobs": True},
    {"messages": USER, "max_tokens": 60, "temperature": 1.0, "seed": 1, "logprobs": True, "top_logprobs": 2,
     "response_format": SCHEMA_FORMAT},
    {"messages": USER, "max_tokens": 30, "temperature": 1.0, "seed": 4, "logprobs": True, "top_logprobs": 1,
     "stop": ["a", "e"], "regex": "[a-z ]{4,40}"},
], ids=["greedy-top3", "seeded-n2", "json-schema", "regex-stop"])
def test_chat_chunks_carry_the_logprobs_of_their_tokens(engine, body):
    streamed, plain = call(engine, [("/v1/chat/completions", {**body, "stream": True}),
                                    ("/v1/chat/completions", body)])
    want = plain.json()
    chunks = events(streamed)
    for raw in chunks:
        ChatCompletionChunk.model_validate_json(json.dumps(raw), strict=True)
    constrained = "response_format" in body or "regex" in body
    for choice in want["choices"]:
        mine = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["index"] == choice["index"]]
        got = [x for c in mine if c["logprobs"] for x in c["logprobs"]["content"]]
        same_chat_items(got, choice["logprobs"]["content"])
        if len(got) >= 8:  # streamed along, not all at the end
            assert sum(1 for c in mine if c["logprobs"]) > 1
        if not constrained:  # every chunk of text brings its tokens' logprobs
            assert all(c["logprobs"] and c["logprobs"]["content"] for c in mine if c["delta"].get("content"))


# ----------------------------------------------------------------------- OpenAI completions


def concat(choices: list[dict]) -> dict:
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for c in choices:
        if c["logprobs"] is None:
            continue
        for k in out:
            out[k] += c["logprobs"][k] or []
    return out


@pytest.mark.parametrize("body", [
    {"prompt": "Paris é 東京 and", "max_tokens": 12, "temperature": 0, "ignore_eos": True, "logprobs": 2,
     "echo": True},
    {"prompt": ["Hello", "The quick"], "max_tokens": 10, "temperature": 1.0, "seed": 5, "n": 2, "logprobs": 0},
    {"prompt": "1, 2,", "max_tokens": 16, "temperature": 1.0, "seed": 2, "logprobs": 3, "stop": [" 4", "7"]},
    {"prompt": "Hello", "max_tokens": 60, "temperature": 1.0, "seed": 1, "logprobs": 2, "json_schema": SCHEMA},
], ids=["echo-utf8", "batch-n2", "stop", "json-schema"])
def test_completion_chunks_add_up_to_the_answer(engine, body):
    streamed, plain = call(engine, [("/v1/completions", {**body, "stream": True}), ("/v1/completions", body)])
    want = plain.json()
    chunks = events(streamed)
    for raw in json.loads(json.dumps(chunks)):  # validated on a copy, patched
        for ch in raw["choices"]:
            if ch["finish_reason"] is None:  # the SDK reads chunks as `Completion` (see test_response_fields)
                ch["finish_reason"] = "stop"
            if ch["logprobs"] and ch["logprobs"]["token_logprobs"][0] is None:  # the echoed prompt's first
                ch["logprobs"]["token_logprobs"][0], ch["logprobs"]["top_logprobs"][0] = 0.0, {}  # (vLLM's null)
        Completion.model_validate_json(json.dumps(raw), strict=True)
    for choice in want["choices"]:
        mine = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["index"] == choice["index"]]
        got, lp = concat(mine), choice["logprobs"]
        assert "".join(c["text"] for c in mine) == choice["text"]
        assert got["tokens"] == lp["tokens"] and got["text_offset"] == lp["text_offset"]
        assert got["token_logprobs"] == pytest.approx(lp["token_logprobs"], abs=1e-4)
        if lp["top_logprobs"] is None:
            assert all(c["logprobs"] is None or c["logprobs"]["top_logprobs"] is None for c in mine)
        else:
            assert [t and sorted(t) for t in got["top_logprobs"]] == [t and sorted(t) for t in lp["top_logprobs"]]
        if len(got["tokens"]) >= 8:  # streamed along, not all at the end
            assert sum(1 for c in mine if c["logprobs"]) > 1


# ----------------------------------------------------------------------- the pieces, on made-up deltas


def test_completion_token_texts_wait_while_a_character_is_unfinished(engine):
    """A stream that ends on no entries of its own (an abort) after a token that ends
    inside a character: that token waited, so the rest of its text lands on it as in
    the whole answer (`scoring.completion_logprobs`)."""
    from furca.runtime.output import StreamDelta
    from furca.server.scoring import completion_logprobs
    from furca.server.stream_logprobs import CompletionLogprobs

    tok = engine.tokenizer
    prompt = tok.encode("Paris")
    ids = [t for ch in " é東" for t in tok.encode(ch)]
    cut = next(i for i in range(1, len(ids)) if tok.decode(ids[:i]).endswith("\ufffd"))  # inside a character
    entries = [[-0.5 - i, t, None] for i, t in enumerate(ids[:cut])]
    stream = CompletionLogprobs(tok, prompt, num_top=0, echo=False)
    first = stream.chunk(StreamDelta("r", "x", ids[:cut], output_token_logprobs=entries, output_top_logprobs=None))
    last = stream.chunk(StreamDelta("r", "", [], finished=True, output_token_logprobs=[]))
    assert first is not None and last is not None and len(last["tokens"]) == 1  # the unfinished one waited
    whole = completion_logprobs({"output_token_logprobs": entries}, 0, tok, prompt, echo=False)
    assert first["tokens"] + last["tokens"] == whole["tokens"]
    assert first["text_offset"] + last["text_offset"] == whole["text_offset"]
    assert last["tokens"][0].endswith("\ufffd")


def test_settled_entries_are_never_taken_back():
    from furca.runtime.output import StreamDelta
    from furca.server.stream_logprobs import SettledLogprobs

    feed = SettledLogprobs(top=False)
    e = [[-1.0, t, None] for t in range(5)]
    got, _ = feed.feed(StreamDelta("r", "a", [0, 1, 2, 3], output_token_logprobs=e[:4], settled=2))
    assert got == e[:2]  # the last two may still be re-tokenized
    got, _ = feed.feed(StreamDelta("r", "b", [9], retract=2, output_token_logprobs=[e[4]], logprob_retract=2,
                                   settled=3))
    assert got == [e[4]] and feed.entries == e[:2] + [e[4]]  # unsent entries went back freely
    with pytest.raises(RuntimeError, match="already streamed"):
        feed.feed(StreamDelta("r", "c", [], retract=2, output_token_logprobs=[], logprob_retract=2))
    got, _ = SettledLogprobs(top=False).feed(StreamDelta("r", "", [0, 1], finished=True, output_token_logprobs=e[:2],
                                                         settled=0))
    assert got == e[:2]  # the end settles everything


# ----------------------------------------------------------------------- tool calls, on the default model

TOOL = {"type": "function", "function": {"name": "pick", "parameters": {
    "type": "object", "properties": {"fruit": {"type": "string", "enum": ["apple", "pear"]}}, "required": ["fruit"]}}}


@pytest.mark.default_model
@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "pick"}}, "auto"],
                         ids=["required", "named", "auto"])
def test_tool_call_chunks_carry_logprobs(http, tool_choice):
    """Tool-call streams (whole calls, argument deltas, held-back text) put each token's
    logprobs on some chunk of the choice; every chunk validates strictly."""
    body = {"messages": [{"role": "user", "content": "Pick a fruit."}], "max_tokens": 30, "temperature": 0,
            "tools": [TOOL], "tool_choice": tool_choice, "logprobs": True, "top_logprobs": 2}
    want = http.post("/v1/chat/completions", json=body).json()
    with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        assert r.status_code == 200
        raws = [line[6:] for line in r.iter_lines() if line.startswith("data: {")]
    for raw in raws:
        ChatCompletionChunk.model_validate_json(raw, strict=True)
    got = [x for raw in raws for c in json.loads(raw)["choices"] if c["logprobs"] for x in c["logprobs"]["content"]]
    expected = want["choices"][0]["logprobs"]["content"]
    assert [x["token"] for x in got] == [x["token"] for x in expected]
    # the streamed request finds the prompt cached, so its bf16 projections see other row
    # counts than the first one's (docs/runtime.md: bf16 scores vary with the batch's shape)
    assert [x["logprob"] for x in got] == pytest.approx([x["logprob"] for x in expected], abs=0.1)
    assert len(got) == want["usage"]["completion_tokens"]
