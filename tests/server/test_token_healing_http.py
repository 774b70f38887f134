"""Token healing over HTTP (the session server, default model): the native /generate
heals a text prompt unless ``token_healing`` is false, a bad value is a 400 naming the
field, and the OpenAI completions route continues the prompt as sent."""

from __future__ import annotations

from tests.server.conftest import MODEL_NAME, assert_idle

PROMPT = "The url is http:"
PARAMS = {"temperature": 0, "max_new_tokens": 4, "ignore_eos": True}


def _generate(http, **params):
    r = http.post("/generate", json={"text": PROMPT, "sampling_params": {**PARAMS, **params}})
    assert r.status_code == 200, r.text
    return r.json()


def test_native_generate_heals_unless_asked_not_to(http):
    healed = _generate(http)
    plain = _generate(http, token_healing=False)
    assert healed["meta_info"]["prompt_tokens"] == plain["meta_info"]["prompt_tokens"] - 1
    assert not healed["text"].startswith(":") and healed["text"] != plain["text"]
    assert _generate(http, token_healing=True)["text"] == healed["text"]
    r = http.post("/generate", json={"text": PROMPT, "sampling_params": {**PARAMS, "token_healing": "maybe"}})
    assert r.status_code == 400 and "token_healing" in r.text, r.text
    assert_idle(http)


def test_openai_completions_do_not_heal(http):
    plain = _generate(http, token_healing=False)
    r = http.post("/v1/completions", json={"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 4,
                                           "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["prompt_tokens"] == plain["meta_info"]["prompt_tokens"]
    assert body["choices"][0]["text"] == plain["text"]
