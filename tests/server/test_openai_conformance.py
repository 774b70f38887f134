"""OpenAI-API conformance on an in-process server over a real `Engine` (tiny random model):
tool calls cut by max_tokens, finish reasons, the legacy functions API, strict schemas,
the `default` model alias. Exact and fast; scoring and errors have files of their own."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from furca.server import ServerArgs, create_app

# a chat template that knows tools (so the fallback's long preamble does not fill the tiny
# model's 256-token context)
TOOLS_TEMPLATE = (
    "{% if tools %}[tools:{% for t in tools %} {{ t.function.name }}{% endfor %}]{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}tool_call:{{ c.function.name }}{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
NOOP = {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}}
CITY = {"type": "function", "function": {"name": "city", "parameters": {
    "type": "object", "properties": {"name": {"type": "string", "maxLength": 6}}, "required": ["name"]}}}
USER = [{"role": "user", "content": "Call the tools."}]


@pytest.fixture(scope="module")
def engine(tiny_model):
    from furca.runtime.engine import Engine

    with Engine(tiny_model, max_total_tokens=4096) as e:
        yield e


def serve(engine, fn, **args):
    """Run ``await fn(client)`` against a fresh app over `engine`."""
    async def main():
        app = create_app(engine, args=ServerArgs(chat_template=TOOLS_TEMPLATE, **args))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as c:
                return await fn(c)

    return asyncio.run(main())


def post_all(engine, bodies, path="/v1/chat/completions", **args):
    async def fn(c):
        return [await c.post(path, json=b) for b in bodies]

    return serve(engine, fn, **args)


async def stream_events(c, body, path="/v1/chat/completions"):
    events = []
    async with c.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    return events


def streamed_calls(events, index=0, key="tool_calls"):
    """Tool calls (or the legacy function call) assembled from a choice's deltas."""
    calls: dict[int, dict] = {}
    for e in events:
        for ch in e["choices"]:
            if ch["index"] != index:
                continue
            parts = ch["delta"].get(key) or []
            for part in (parts if key == "tool_calls" else [{"index": 0, "function": parts}]):
                call = calls.setdefault(part["index"], {"name": "", "arguments": ""})
                fn = part.get("function") or {}
                call["name"] += fn.get("name") or ""
                call["arguments"] += fn.get("arguments") or ""
    return [calls[k] for k in sorted(calls)]


def finish_reasons(events):
    return {ch["index"]: ch["finish_reason"] for e in events for ch in e["choices"] if ch["finish_reason"]}


# -- required: complete calls survive max_tokens ---------------------------------------------


def test_required_calls_cut_by_max_tokens_are_kept_as_tool_calls(engine):
    """A small model may go on calling until max_tokens: the calls it completed come back
    as tool_calls with finish_reason tool_calls (not raw text with length), streamed too."""
    base = {"messages": USER, "tools": [NOOP, CITY], "tool_choice": "required", "max_tokens": 40,
            "temperature": 1.0, "n": 8, "logprobs": True}
    found = None
    for seed in range(12):
        (r,) = post_all(engine, [{**base, "seed": seed}])
        assert r.status_code == 200, r.text
        for ch in r.json()["choices"]:
            calls = ch["message"]["tool_calls"]
            if calls:
                assert ch["finish_reason"] == "tool_calls" and ch["message"]["content"] is None
                for call in calls:
                    args = json.loads(call["function"]["arguments"])
                    assert call["function"]["name"] in ("noop", "city") and isinstance(args, dict)
                    assert call["id"].startswith("call_") and call["type"] == "function"
            else:  # not one whole call within max_tokens: the text, cut
                assert ch["finish_reason"] == "length" and ch["message"]["content"]
        cut = [ch for ch in r.json()["choices"]  # whole calls, then more until max_tokens
               if ch["message"]["tool_calls"] and len(ch["logprobs"]["content"]) == base["max_tokens"]]
        if cut:
            found = (seed, r.json())
            break
    assert found, "no seed gave a call list cut by max_tokens"
    seed, plain = found

    async def fn(c):
        return await stream_events(c, {**base, "seed": seed})

    events = serve(engine, fn)
    for i, ch in enumerate(plain["choices"]):
        want = [{"name": t["function"]["name"], "arguments": t["function"]["arguments"]}
                for t in ch["message"]["tool_calls"]]
        assert streamed_calls(events, i) == want
        assert finish_reasons(events)[i] == ch["finish_reason"]


def test_parallel_tool_calls_false_means_exactly_one_call(engine):
    (r,) = post_all(engine, [{"messages": USER, "tools": [NOOP, CITY], "tool_choice": "required",
                              "parallel_tool_calls": False, "max_tokens": 60, "temperature": 1.0, "n": 6,
                              "seed": 5}])
    for ch in r.json()["choices"]:
        if ch["finish_reason"] == "tool_calls":
            assert len(ch["message"]["tool_calls"]) == 1
        else:
            assert ch["finish_reason"] == "length" and not ch["message"]["tool_calls"]
    assert any(ch["finish_reason"] == "tool_calls" for ch in r.json()["choices"])


def test_named_call_finish_reason_says_whether_the_arguments_are_whole(engine):
    body = {"messages": USER, "tools": [CITY], "tool_choice": {"type": "function", "function": {"name": "city"}},
            "temperature": 1.0, "seed": 2, "n": 4}
    short, full = post_all(engine, [{**body, "max_tokens": 3}, {**body, "max_tokens": 60}])
    for ch in short.json()["choices"]:  # 3 tokens cannot hold {"name": "..."}: cut, as OpenAI returns it
        assert ch["finish_reason"] == "length" and len(ch["message"]["tool_calls"]) == 1
    for ch in full.json()["choices"]:
        args = json.loads(ch["message"]["tool_calls"][0]["function"]["arguments"])
        assert ch["finish_reason"] == "tool_calls" and set(args) == {"name"}


# -- strict schemas ---------------------------------------------------------------------------


LOOSE = {"type": "object", "properties": {"a": {"type": "integer"}}}  # no additionalProperties


def _objects(resp):
    out = []
    for ch in resp.json()["choices"]:
        text = ch["message"]["content"]
        if ch["finish_reason"] == "stop":
            out.append(json.loads(text))
    return out


def test_json_schema_objects_carry_only_declared_properties_unless_the_server_is_lax(engine):
    bodies = [{"messages": USER, "max_tokens": 40, "temperature": 1.5, "seed": s, "n": 8,
               "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": LOOSE}}}
              for s in range(3)]
    bodies.append({"messages": USER, "max_tokens": 40, "temperature": 1.5, "seed": 9, "n": 8, "json_schema": LOOSE})
    strict = [obj for r in post_all(engine, bodies) for obj in _objects(r)]
    assert len(strict) >= 8 and all(set(obj) <= {"a"} for obj in strict)
    lax = [obj for r in post_all(engine, bodies, json_schema_allow_extra_properties=True) for obj in _objects(r)]
    assert any(set(obj) - {"a"} for obj in lax)  # the same sampling, JSON Schema's reading: extras appear
    # the tool arguments follow the same rule
    tool = {"type": "function", "function": {"name": "f", "parameters": LOOSE}}
    (r,) = post_all(engine, [{"messages": USER, "tools": [tool], "tool_choice": "required", "max_tokens": 60,
                              "temperature": 1.5, "seed": 1, "n": 8}])
    for ch in r.json()["choices"]:
        for call in ch["message"]["tool_calls"]:
            assert set(json.loads(call["function"]["arguments"])) <= {"a"}


# -- legacy functions ---------------------------------------------------------------------------


def test_legacy_functions_answer_with_function_call(engine):
    fns = [CITY["function"], NOOP["function"]]
    named = {"messages": USER, "functions": fns, "function_call": {"name": "city"}, "max_tokens": 60,
             "temperature": 1.0, "seed": 4}
    r, none = post_all(engine, [named, {**named, "function_call": "none", "max_tokens": 4}])
    ch = r.json()["choices"][0]
    assert ch["finish_reason"] == "function_call" and ch["message"]["tool_calls"] == []
    fc = ch["message"]["function_call"]
    assert fc["name"] == "city" and set(json.loads(fc["arguments"])) == {"name"}
    assert none.json()["choices"][0]["message"]["function_call"] is None
    assert none.json()["choices"][0]["finish_reason"] == "length"

    async def fn(c):
        return await stream_events(c, named)

    events = serve(engine, fn)
    assert streamed_calls(events, key="function_call") == [fc]
    assert finish_reasons(events) == {0: "function_call"}
    assert all("tool_calls" not in ch["delta"] for e in events for ch in e["choices"])


def test_legacy_function_history_renders_as_a_tool_round_trip(engine):
    messages = USER + [{"role": "assistant", "content": None,
                        "function_call": {"name": "city", "arguments": '{"name": "Oslo"}'}},
                       {"role": "function", "name": "city", "content": "cold"}]
    r, bad = post_all(engine, [{"messages": messages, "functions": [CITY["function"]], "max_tokens": 2},
                               {"messages": messages[:2] + [{"role": "function", "content": "cold"}],
                                "max_tokens": 2}])
    assert r.status_code == 200, r.text
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages[2].name"


@pytest.mark.parametrize("body, param", [
    ({"tools": [NOOP], "functions": [NOOP["function"]]}, "functions"),
    ({"function_call": "auto"}, "function_call"),
    ({"functions": [NOOP["function"]], "function_call": {"name": "other"}}, "function_call"),
    ({"functions": [NOOP["function"]], "tool_choice": "auto"}, "tool_choice"),
    ({"functions": []}, "functions"),
])
def test_legacy_functions_misuse_is_400(engine, body, param):
    (r,) = post_all(engine, [{"messages": USER, **body}])
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


# -- the default model alias ---------------------------------------------------------------------


def test_default_names_the_served_model(engine):
    async def fn(c):
        chat = await c.post("/v1/chat/completions", json={"model": "default", "messages": USER, "max_tokens": 1})
        comp = await c.post("/v1/completions", json={"model": "default", "prompt": "Hi", "max_tokens": 1})
        card = await c.get("/v1/models/default")
        other = await c.post("/v1/completions", json={"model": "gpt-4", "prompt": "Hi", "max_tokens": 1})
        return chat, comp, card, other

    chat, comp, card, other = serve(engine, fn, served_model_name="tiny")
    assert chat.status_code == comp.status_code == card.status_code == 200
    assert chat.json()["model"] == comp.json()["model"] == card.json()["id"] == "tiny"
    assert other.status_code == 404 and other.json()["error"]["code"] == "model_not_found"
    assert "`default`" in other.json()["error"]["message"]


def test_the_sdk_parse_helper_takes_calls_cut_by_max_tokens(engine):
    """``chat.completions.parse`` raises LengthFinishReasonError on finish_reason length;
    an answer whose whole calls went on to max_tokens is tool_calls, and parses."""
    from pydantic import BaseModel

    class noop(BaseModel):  # noqa: N801 - the tool's name
        pass

    class city(BaseModel):  # noqa: N801
        name: str

    tools = [openai.pydantic_function_tool(noop), openai.pydantic_function_tool(city)]

    async def fn(c):
        client = openai.AsyncOpenAI(base_url="http://test/v1", api_key="none", http_client=c, max_retries=0)
        for seed in range(40):
            try:
                r = await client.chat.completions.parse(
                    model="default", messages=USER, tools=tools, tool_choice="required", max_tokens=40,
                    temperature=1.0, seed=seed, logprobs=True)
            except openai.LengthFinishReasonError:  # cut inside its first call: no whole call to return
                continue
            choice = r.choices[0]
            if len(choice.logprobs.content) == 40:
                return choice
        return None

    choice = serve(engine, fn)
    assert choice is not None, "no seed gave whole calls cut by max_tokens"
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    for call in choice.message.tool_calls:
        assert isinstance(call.function.parsed_arguments, {"noop": noop, "city": city}[call.function.name])


def test_logit_bias_steers_and_bans_tokens(engine):
    """OpenAI's ``logit_bias`` (token id as a string -> bias in [-100, 100]) on both routes:
    +100 makes greedy pick the token, -100 bans greedy's own pick; a bad id is a 400."""
    body = {"prompt": "Hello there", "max_tokens": 3, "temperature": 0}

    async def fn(c):
        plain = (await c.post("/v1/completions", json={**body, "logprobs": 0})).json()
        first = plain["choices"][0]["logprobs"]["tokens"][0]
        return plain, first

    plain, _ = serve(engine, fn)
    ids = engine.tokenizer.encode(plain["choices"][0]["text"], add_special_tokens=False)
    greedy_first = ids[0]
    forced = 7 if greedy_first != 7 else 8

    async def fn2(c):
        steer = await c.post("/v1/completions", json={**body, "logit_bias": {str(forced): 100}})
        ban = await c.post("/v1/completions", json={**body, "max_tokens": 1,
                                                     "logit_bias": {str(greedy_first): -100}})
        chat = await c.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 2, "temperature": 0,
                                                          "logit_bias": {str(forced): 100}})
        bad = await c.post("/v1/completions", json={**body, "logit_bias": {"99999999": 5}})
        worse = await c.post("/v1/completions", json={**body, "logit_bias": {"5": 101}})
        return steer, ban, chat, bad, worse

    steer, ban, chat, bad, worse = serve(engine, fn2)
    assert steer.status_code == ban.status_code == chat.status_code == 200, (steer.text, ban.text, chat.text)
    tok = engine.tokenizer
    assert steer.json()["choices"][0]["text"] == tok.decode([forced] * 3, skip_special_tokens=True)
    assert chat.json()["choices"][0]["message"]["content"] == tok.decode([forced] * 2, skip_special_tokens=True)
    banned_out = engine.generate(prompt=body["prompt"], sampling_params={"max_new_tokens": 1, "temperature": 0,
                                                                         "token_healing": False})  # as the OpenAI route
    assert banned_out.output_ids[0] == greedy_first  # without the bias, greedy picks it...
    assert ban.json()["choices"][0]["text"] != tok.decode([greedy_first], skip_special_tokens=True)  # ...with it, not
    assert bad.status_code == 400 and "99999999" in bad.json()["error"]["message"], bad.text
    assert worse.status_code == 400 and "logit_bias" in worse.json()["error"]["message"], worse.text
