"""A hand-written table of hostile inputs against every route of a live server: huge,
negative and non-finite numbers in every numeric field, wrong types, deep nesting, 1 MB
strings, null bytes, lone surrogates, keys that collide with internal names, bodies that
are not JSON. The rule: no answer is a 5xx (no error event in a stream either), every
error is OpenAI-shaped (``{"error": {"message", "type", "param", "code"}}``), the server
is healthy after each case and logs no traceback. Generation is one token long."""

from __future__ import annotations

import json

import httpx
import pytest

pytestmark = pytest.mark.default_model

CHAT, COMPLETIONS, GENERATE = "/v1/chat/completions", "/v1/completions", "/generate"
TOKENIZE, DETOKENIZE, ABORT = "/tokenize", "/detokenize", "/abort_request"
U = [{"role": "user", "content": "hi"}]
BIG = "x" * (1 << 20)  # 1 MB
# numbers no field takes, written as JSON text (NaN / Infinity are not JSON; Python reads them)
HOSTILE_NUMBERS = ["1" + "0" * 30, "-1" + "0" * 30, str(2**64), "1e308", "NaN", "Infinity", "-Infinity", "true",
                   '"4"']

# (route, JSON body without the hostile field, the field's path)
NUMERIC_FIELDS = [
    *[(CHAT, {"messages": U, "max_tokens": 1}, path) for path in (
        "n", "temperature", "top_p", "seed", "frequency_penalty", "presence_penalty", "top_k", "min_p",
        "repetition_penalty", "min_tokens", "max_tokens", "max_completion_tokens", "top_logprobs",
        "logit_bias.0", "stop_token_ids.0")],
    *[(COMPLETIONS, {"prompt": "hi", "max_tokens": 1}, path) for path in (
        "n", "best_of", "logprobs", "max_tokens", "temperature", "seed", "top_k", "min_tokens",
        "stop_token_ids.0", "logit_bias.0")],
    (COMPLETIONS, {"prompt": [1, 2], "max_tokens": 1}, "prompt.0"),
    *[(GENERATE, {"text": "hi", "sampling_params": {"max_new_tokens": 1}}, path) for path in (
        "sampling_params.max_new_tokens", "sampling_params.min_new_tokens", "sampling_params.temperature",
        "sampling_params.top_p", "sampling_params.top_k", "sampling_params.min_p", "sampling_params.n",
        "sampling_params.seed", "sampling_params.sampling_seed", "sampling_params.stop_token_ids.0",
        "sampling_params.logprob_start_len", "sampling_params.top_logprobs_num",
        "sampling_params.stream_interval", "sampling_params.logit_bias.0", "sampling_params.repetition_penalty",
        "logprob_start_len", "top_logprobs_num")],
    (GENERATE, {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 1}}, "input_ids.0"),
    (DETOKENIZE, {"tokens": [1]}, "tokens.0"),
]


def _with_raw(body: dict, path: str, raw: str) -> bytes:
    """`body` as JSON text with the value at `path` (dots; digits index lists, or name a
    dict key) replaced by the JSON text `raw`."""
    marker = "__HOSTILE__"
    doc = json.loads(json.dumps(body))
    *parents, last = path.split(".")
    node = doc
    for part in parents:  # lists where token ids go, objects elsewhere
        default = [0] if part in ("stop_token_ids", "input_ids", "tokens", "prompt") else {}
        node = node.setdefault(part, default) if isinstance(node, dict) else node[int(part)]
    if isinstance(node, list):
        node[int(last)] = marker
    else:
        node[last] = marker
    return json.dumps(doc).replace(json.dumps(marker), raw).encode()


def _nested(depth: int, leaf=1):
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def _deep_schema(levels: int) -> str:
    """JSON text of an object schema `levels` deep (json.dumps recurses per level)."""
    head, tail = '{"type": "object", "properties": {"a": ', '}, "required": ["a"]}'
    return head * levels + '{"type": "string"}' + tail * levels


def _chat_with(key: str, json_text: str) -> bytes:
    return ('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "%s": %s}' % (key, json_text)).encode()


CASES: list[tuple[str, str, object]] = [  # (name, route, body: a dict as JSON or raw bytes)
    *[(f"{route} {path}={raw}", route, _with_raw(body, path, raw))
      for route, body, path in NUMERIC_FIELDS for raw in HOSTILE_NUMBERS],
    # lone surrogates (valid JSON escapes, not text) everywhere text goes
    *[(f"surrogate {name}", route, body.replace("SUR", "\\ud800").encode()) for name, route, body in [
        ("content", CHAT, '{"messages": [{"role": "user", "content": "aSURb"}], "max_tokens": 1}'),
        ("content part", CHAT, '{"messages": [{"role": "user", "content": [{"type": "text", "text": "SUR"}]}]}'),
        ("model", CHAT, '{"messages": [{"role": "user", "content": "hi"}], "model": "SUR", "max_tokens": 1}'),
        ("rid stream", CHAT, '{"messages": [{"role": "user", "content": "hi"}], "rid": "SUR", "stream": true, '
                             '"max_tokens": 1}'),
        ("stop", CHAT, '{"messages": [{"role": "user", "content": "hi"}], "stop": "SUR", "max_tokens": 1}'),
        ("tool name", CHAT, '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "tools": '
                            '[{"type": "function", "function": {"name": "fSUR"}}]}'),
        ("template kwargs key", CHAT, '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, '
                                      '"chat_template_kwargs": {"SUR": 1}}'),
        ("schema key", CHAT, '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, '
                             '"json_schema": {"type": "object", "properties": {"SUR": {"type": "string"}}}}'),
        ("prompt", COMPLETIONS, '{"prompt": "SUR", "max_tokens": 1}'),
        ("prompt list", COMPLETIONS, '{"prompt": ["ok", "SUR"], "max_tokens": 1}'),
        ("rid", COMPLETIONS, '{"prompt": "hi", "rid": "SUR", "max_tokens": 1}'),
        ("text", GENERATE, '{"text": "SUR", "sampling_params": {"max_new_tokens": 1}}'),
        ("rid", GENERATE, '{"text": "hi", "rid": "SUR", "stream": true, "sampling_params": {"max_new_tokens": 1}}'),
        ("stop", GENERATE, '{"text": "hi", "sampling_params": {"max_new_tokens": 1, "stop": ["SUR"]}}'),
        ("high+low swapped", GENERATE, '{"text": "\\udc00\\ud800", "sampling_params": {"max_new_tokens": 1}}'),
        ("prompt", TOKENIZE, '{"prompt": "SUR"}'),
        ("text", TOKENIZE, '{"text": "SUR"}'),
        ("rid", ABORT, '{"rid": "SUR"}'),
    ]],
    # a valid surrogate pair is text (U+1F600)
    ("surrogate pair", TOKENIZE, b'{"prompt": "\\ud83d\\ude00"}'),
    # null bytes
    ("null content", CHAT, {"messages": [{"role": "user", "content": "a\x00b"}], "max_tokens": 1}),
    ("null model", CHAT, {"messages": U, "model": "\x00", "max_tokens": 1}),
    ("null stop", CHAT, {"messages": U, "stop": "\x00", "max_tokens": 1}),
    ("null regex", CHAT, {"messages": U, "regex": "\x00", "max_tokens": 1}),
    ("null rid", COMPLETIONS, {"prompt": "\x00", "rid": "\x00", "max_tokens": 1}),
    ("null text", GENERATE, {"text": "\x00", "sampling_params": {"max_new_tokens": 1}}),
    ("null detokenize", TOKENIZE, {"prompt": "\x00\x00"}),
    # 1 MB strings
    ("1MB content", CHAT, {"messages": [{"role": "user", "content": BIG}], "max_tokens": 1}),
    ("1MB prompt", COMPLETIONS, {"prompt": BIG, "max_tokens": 1}),
    ("1MB text", GENERATE, {"text": BIG, "sampling_params": {"max_new_tokens": 1}}),
    ("1MB model", CHAT, {"messages": U, "model": BIG, "max_tokens": 1}),
    ("1MB rid", GENERATE, {"text": "hi", "rid": BIG, "sampling_params": {"max_new_tokens": 1}}),
    ("1MB stop", CHAT, {"messages": U, "stop": BIG, "max_tokens": 1}),
    ("64KB regex", CHAT, {"messages": U, "regex": "a" * (1 << 16), "max_tokens": 1}),
    ("1MB tokenize", TOKENIZE, {"prompt": BIG}),
    ("1MB abort", ABORT, {"rid": BIG}),
    # deep nesting: within the limit, past it, past what Python's JSON reader can read
    ("schema 60 deep", CHAT, _chat_with("json_schema", _deep_schema(60))),
    ("schema 1000 deep", CHAT, _chat_with("json_schema", _deep_schema(1000))),
    ("tool parameters 30 deep", CHAT, _chat_with("tools", '[{"type": "function", "function": {"name": "f", '
                                                          f'"parameters": {_deep_schema(30)}}}}}]')),
    ("kwargs 200 deep", CHAT, {"messages": U, "max_tokens": 1, "chat_template_kwargs": {"x": _nested(200)}}),
    ("kwargs 5000 deep", CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"x": '
                              + b"[" * 5000 + b"]" * 5000 + b"}}"),
    ("sampling_params deep", GENERATE, b'{"text": "hi", "sampling_params": {"max_new_tokens": 1, "json_schema": '
                                       + _deep_schema(300).encode() + b"}}"),
    ("structural tag deep", GENERATE, {"text": "hi", "sampling_params": {"max_new_tokens": 1,
                                                                        "structural_tag": _nested(300)}}),
    # keys that collide with internal names
    *[(f"template kwarg {key}", CHAT, {"messages": U, "max_tokens": 1, "chat_template_kwargs": {key: []}})
      for key in ("messages", "chat_template", "tools", "add_generation_prompt", "self", "conversation",
                  "continue_final_message", "raise_exception", "bos_token", "tojson")],
    *[(f"sampling key {key}", GENERATE, {"text": "hi", "sampling_params": {"max_new_tokens": 1, key: 1}})
      for key in ("self", "__class__", "__dict__", "cls", "kwargs", "max_tokens", "replace")],
    ("logit_bias key -1", CHAT, {"messages": U, "max_tokens": 1, "logit_bias": {"-1": 1}}),
    ("logit_bias key word", CHAT, {"messages": U, "max_tokens": 1, "logit_bias": {"__proto__": 1}}),
    ("logit_bias beyond vocab", CHAT, {"messages": U, "max_tokens": 1, "logit_bias": {"999999": 1}}),
    ("stop id beyond vocab", COMPLETIONS, {"prompt": "hi", "max_tokens": 1, "stop_token_ids": [2**31 - 1],
                                           "min_tokens": 1}),
    ("input id beyond vocab", GENERATE, {"input_ids": [2**31 - 1], "sampling_params": {"max_new_tokens": 1}}),
    ("prompt id beyond vocab", COMPLETIONS, {"prompt": [2**31 - 1], "max_tokens": 1}),
    ("structural_tag structures 5", GENERATE, {"text": "hi", "sampling_params": {
        "max_new_tokens": 1, "structural_tag": {"structures": 5, "triggers": []}}}),
    ("structural_tag text", GENERATE, {"text": "hi", "sampling_params": {"max_new_tokens": 1,
                                                                         "structural_tag": "{"}}),
    ("json_schema huge bound", CHAT, {"messages": U, "max_tokens": 1,
                                      "json_schema": {"type": "string", "maxLength": 10**30}}),
    ("json_schema negative bound", CHAT, {"messages": U, "max_tokens": 1,
                                          "json_schema": {"type": "array", "minItems": -5}}),
    ("json_schema bad ref", CHAT, {"messages": U, "max_tokens": 1, "json_schema": {"$ref": "#/nowhere"}}),
    ("json_schema text", CHAT, {"messages": U, "max_tokens": 1, "json_schema": "{not json"}),
    ("regex unbalanced", CHAT, {"messages": U, "max_tokens": 1, "regex": "("}),
    ("ebnf import", CHAT, {"messages": U, "max_tokens": 1, "ebnf": "%import .etc.passwd\nstart: \"a\""}),
    ("rid collides with a batch's", COMPLETIONS, {"prompt": ["a", "b"], "rid": "x-p0", "max_tokens": 1}),
    # wrong types and shapes
    ("messages string", CHAT, {"messages": "hi"}),
    ("messages null item", CHAT, {"messages": [None]}),
    ("messages empty", CHAT, {"messages": []}),
    ("role number", CHAT, {"messages": [{"role": 5, "content": "hi"}]}),
    ("content object", CHAT, {"messages": [{"role": "user", "content": {"text": "hi"}}]}),
    ("tools string", CHAT, {"messages": U, "tools": "f"}),
    ("tool_choice number", CHAT, {"messages": U, "tool_choice": 5}),
    ("stream string", CHAT, {"messages": U, "stream": "yes"}),
    ("response_format no schema", CHAT, {"messages": U, "response_format": {"type": "json_schema"}}),
    ("prompt object", COMPLETIONS, {"prompt": {"a": 1}}),
    ("prompt mixed", COMPLETIONS, {"prompt": [1, "a"]}),
    ("prompt empty list", COMPLETIONS, {"prompt": [[]]}),
    ("n times prompts", COMPLETIONS, {"prompt": ["a"] * 100, "n": 100, "max_tokens": 1}),
    ("generate n", GENERATE, {"text": "hi", "sampling_params": {"max_new_tokens": 1, "n": 1000}}),
    ("text number", GENERATE, {"text": 5}),
    ("input_ids empty", GENERATE, {"input_ids": [[]]}),
    ("sampling_params list mismatch", GENERATE, {"text": ["a", "b"], "sampling_params": [{}]}),
    ("sampling_params array of numbers", GENERATE, {"text": "hi", "sampling_params": [1]}),
    ("tokens strings", DETOKENIZE, {"tokens": ["1"]}),
    ("abort no rid", ABORT, {}),
    # bodies that are not JSON objects
    *[(f"body {body[:12]!r}", route, body) for route in (CHAT, GENERATE, TOKENIZE) for body in (
        b"", b"{", b"null", b"[]", b'"x"', b"\xff\xfe\x00", b'{"messages": [}', b"1" * 5000, b"{} {}")],
]


def _bad(resp: httpx.Response) -> str | None:
    """Why `resp` breaks the rule (None: it holds)."""
    if resp.status_code >= 500:
        return f"status {resp.status_code}"
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        for line in resp.text.splitlines():
            if line.startswith("data: {") and '"error"' in line:
                code = json.loads(line[6:]).get("error", {}).get("code")
                if isinstance(code, int) and code >= 500:
                    return f"error event {line[:300]}"
        return None
    if resp.status_code >= 400:
        try:
            err = resp.json()["error"]
        except (ValueError, KeyError, TypeError):
            return f"not OpenAI-shaped: {resp.text[:300]}"
        if set(err) != {"message", "type", "param", "code"} or not err["message"]:
            return f"not OpenAI-shaped: {resp.text[:300]}"
    return None


def test_hostile_inputs(server):
    tracebacks = server.read_log().count("Traceback")
    failures = []
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=300) as c:
        for name, route, body in CASES:
            if isinstance(body, bytes):
                resp = c.post(route, content=body, headers={"Content-Type": "application/json"})
            else:
                resp = c.post(route, json=body)
            why = _bad(resp)
            if why:
                failures.append(f"{name}: {why}")
            health = c.get("/health")
            assert health.status_code == 200, f"after {name}: /health {health.status_code} {health.text[:300]}"
    assert not failures, "\n".join(failures)
    assert server.read_log().count("Traceback") == tracebacks, server.read_log()


@pytest.mark.parametrize("route, body, param, words", [
    (CHAT, b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "messages[0].content", "surrogate"),
    (GENERATE, b'{"text": "hi", "rid": "\\udfff", "stream": true}', "rid", "surrogate"),
    (TOKENIZE, b'{"prompt": "a\\ud800"}', "prompt", "surrogate"),
    (CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', "temperature", "finite"),
    (CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": "4"}', "max_tokens",
     "must be an integer"),
    (COMPLETIONS, b'{"prompt": "hi", "stop_token_ids": [true]}', "stop_token_ids[0]", "must be an integer"),
    (CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"chat_template": "x"}}',
     "chat_template_kwargs.chat_template", "may not set 'chat_template'"),
    (CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"messages": []}}',
     "chat_template_kwargs.messages", "may not set 'messages'"),
    (CHAT, b'{"messages": [{"role": "user",\n "content": "hi"},]}', None, "not valid JSON: "),
    (CHAT, _chat_with("json_schema", _deep_schema(1000)), None, "nested too deeply"),
    (GENERATE, b'{"text": "hi", "sampling_params": {"n": 1000, "max_new_tokens": 1}}', "sampling_params.n",
     "sequences (n x prompts)"),
])
def test_precise_messages(http, route, body, param, words):
    """The issue's cases: a 400 that names the field and says what is wrong."""
    resp = http.post(route, content=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["param"] == param and words in err["message"], err


def test_invalid_json_says_where(http):
    resp = http.post(CHAT, content=b'{"messages": [{"role": "user",\n "content": "hi"},]}',
                     headers={"Content-Type": "application/json"})
    assert resp.json()["error"]["message"].endswith("at line 2 column 19"), resp.text


def test_prompt_past_the_context_by_size(http):
    """A prompt whose length alone proves it past the context gets the context-length 400
    (same shape and code) without being tokenized."""
    ctx = http.get("/v1/models").json()["data"][0]["max_model_len"]
    # 12 MB (below the 16 MiB body limit): over 1,000 characters per token of the context,
    # more than any vocabulary piece covers
    resp = http.post(COMPLETIONS, json={"prompt": "x" * 12_000_000, "max_tokens": 1})
    assert 12_000_000 // ctx > 1000
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["code"] == "context_length_exceeded" and err["param"] == "prompt", err
    assert f"maximum context length is {ctx} tokens" in err["message"] and "at least" in err["message"], err
