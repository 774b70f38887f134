"""Every answer of the live server, and every streamed chunk, against the `openai`
package's own response types: each validates in pydantic's strict mode, and each field
the types declare is present in the JSON (null allowed), nested objects included.

Left out, as OpenAI leaves them out unless a request asks for them: ``moderation``
(moderated completions), ``metadata`` (stored completions), ``obfuscation`` (stream
obfuscation). Stream deltas are sparse by design (OpenAI sends only what changed), so
they are validated, not walked.
"""

from __future__ import annotations

import json
import typing

import pytest
from openai.types import Completion, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import ChoiceDelta
from pydantic import BaseModel

pytestmark = pytest.mark.default_model

NOT_SENT = {"moderation", "metadata", "obfuscation"}
USER = [{"role": "user", "content": "Name a fruit."}]
TOOL = {"type": "function", "function": {"name": "pick", "parameters": {
    "type": "object", "properties": {"fruit": {"type": "string", "enum": ["apple", "pear"]}}, "required": ["fruit"]}}}


def _models(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _pick(value: dict, candidates: list[type[BaseModel]]) -> type[BaseModel] | None:
    for m in candidates:  # a union's member: the one the value validates as
        try:
            m.model_validate(value)
            return m
        except Exception:  # noqa: BLE001 - try the next member
            continue
    return None


def missing_fields(data, model: type[BaseModel], path: str = "") -> list[str]:
    """The declared fields of `model` (recursively) that `data` lacks."""
    out = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key in NOT_SENT:
            continue
        where = f"{path}{key}"
        if key not in data:
            out.append(where)
            continue
        candidates = [m for m in _models(field.annotation) if m is not ChoiceDelta]
        if not candidates or data[key] is None:
            continue
        values = data[key] if isinstance(data[key], list) else [data[key]]
        for i, value in enumerate(values):
            if isinstance(value, dict) and (sub := _pick(value, candidates)) is not None:
                sub_path = f"{where}[{i}]." if isinstance(data[key], list) else f"{where}."
                out += missing_fields(value, sub, sub_path)
    return out


def check(raw: str, model: type[BaseModel], strict: bool = True) -> dict:
    if strict:
        model.model_validate_json(raw, strict=True)
    data = json.loads(raw)
    assert missing_fields(data, model) == [], raw
    return data


def chunks(http, path, body) -> list[str]:
    with http.stream("POST", path, json={**body, "stream": True, "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200, r.read()
        return [line[6:] for line in r.iter_lines() if line.startswith("data: {")]


CHATS = [
    {"messages": USER, "max_tokens": 3},
    {"messages": USER, "max_tokens": 2, "n": 2, "logprobs": True, "top_logprobs": 2},
    {"messages": USER, "max_tokens": 30, "tools": [TOOL], "tool_choice": "required"},
    {"messages": USER, "max_tokens": 30, "tools": [TOOL], "tool_choice": {"type": "function",
                                                                          "function": {"name": "pick"}}},
    {"messages": USER, "max_tokens": 30, "functions": [TOOL["function"]], "function_call": {"name": "pick"}},
]


@pytest.mark.parametrize("body", CHATS, ids=["plain", "n2-logprobs", "required", "named", "legacy"])
def test_chat_answers_and_chunks_have_every_field(http, body):
    r = http.post("/v1/chat/completions", json={**body, "temperature": 0})
    assert r.status_code == 200, r.text
    data = check(r.text, ChatCompletion)
    assert data["system_fingerprint"] and data["choices"][0]["message"]["refusal"] is None
    events = chunks(http, "/v1/chat/completions", {**body, "temperature": 0})
    for raw in events:
        check(raw, ChatCompletionChunk)
    assert json.loads(events[-1])["usage"]["total_tokens"] == data["usage"]["total_tokens"]


@pytest.mark.parametrize("body", [
    {"prompt": "The capital of France is", "max_tokens": 3},
    {"prompt": ["1, 2,", "a, b,"], "max_tokens": 2, "logprobs": 2},
])
def test_completion_answers_and_chunks_have_every_field(http, body):
    r = http.post("/v1/completions", json={**body, "temperature": 0})
    assert r.status_code == 200, r.text
    check(r.text, Completion)
    for raw in chunks(http, "/v1/completions", {**body, "temperature": 0}):
        # the SDK reads completion chunks as `Completion`, whose finish_reason is not
        # optional; OpenAI (and furca) send null until a choice's last chunk
        data = json.loads(raw)
        for ch in data["choices"]:
            if ch["finish_reason"] is None:
                ch["finish_reason"] = "stop"
        check(json.dumps(data), Completion)


def test_echoed_prompt_logprobs_have_every_field(http):
    """The first prompt token's logprob is null, as vLLM and lm-eval have it, which the
    SDK's type does not foresee: walked, not validated strictly."""
    r = http.post("/v1/completions", json={"prompt": "Hello there", "max_tokens": 0, "echo": True, "logprobs": 1})
    data = check(r.text, Completion, strict=False)
    assert data["choices"][0]["logprobs"]["token_logprobs"][0] is None


def test_model_cards_have_every_field(http):
    listing = http.get("/v1/models").json()
    for card in listing["data"]:
        check(json.dumps(card), Model)
    check(http.get("/v1/models/default").text, Model)
