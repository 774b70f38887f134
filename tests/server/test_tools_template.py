"""Tool-call parsing, streaming hold-back, the ChatML + Hermes fallback template and the
tool constraints: pure functions, no model."""

from __future__ import annotations

import json

import pytest

from furca.server import tools as T
from furca.server.chat_template import ChatRenderer, render_chatml_hermes
from furca.server.protocol import ChatCompletionRequest

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "noop"}}]


def req(**kw):
    return ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], tools=TOOLS, **kw)


NAMES = {"get_weather", "noop"}


@pytest.mark.parametrize("text, content, calls", [
    ("plain answer", "plain answer", []),
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', None,
     [("get_weather", {"city": "Paris"})]),
    ('Let me check. <tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
     '<tool_call>{"name": "noop", "arguments": {}}</tool_call>', "Let me check.",
     [("get_weather", {"city": "Oslo"}), ("noop", {})]),
    ('<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}', None,  # no closing tag (EOS)
     [("get_weather", {"city": "Rome"})]),
    ('<tool_call>{"name": "unknown_tool", "arguments": {}}</tool_call>',
     '<tool_call>{"name": "unknown_tool", "arguments": {}}</tool_call>', []),
    ('<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>',
     '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>', []),
    ('<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Lyon\\"}"}</tool_call>', None,
     [("get_weather", {"city": "Lyon"})]),
])
def test_parse_hermes(text, content, calls):
    got_content, got_calls = T.parse_hermes(text, NAMES)
    assert got_content == content
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got_calls] == calls
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in got_calls)


def test_parse_forced_modes():
    named = T.ToolMode("named", "get_weather")
    content, calls = T.parse_output(named, '{"city": "Paris"}', [])
    assert content is None and calls[0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    required = T.ToolMode("required")
    _, calls = T.parse_output(required, '[{"name": "noop", "parameters": {}}, '
                                        '{"name": "get_weather", "parameters": {"city": "X"}}]', [])
    assert [c["function"]["name"] for c in calls] == ["noop", "get_weather"]
    assert T.parse_output(required, '[{"name": "noop", "par', []) == ('[{"name": "noop", "par', [])


@pytest.mark.parametrize("pieces", [
    ["Sure", ", ", "<tool", "_call>", '{"name": "noop", "arguments": {}}', "</tool_call>"],
    ["Sure, <", "tool_call>{\"name\": \"noop\", \"arguments\": {}}</tool_call>"],
    ["Sure, <tool_call>{\"name\": \"noop\", \"arguments\": {}}"],
])
def test_auto_streamer_holds_back_calls(pieces):
    s = T.AutoToolStreamer(NAMES)
    shown = "".join(s.feed(p) for p in pieces)
    rest, calls = s.finish()
    assert shown + rest == "Sure, "
    assert [c["function"]["name"] for c in calls] == ["noop"]


def test_auto_streamer_releases_false_alarms():
    s = T.AutoToolStreamer(NAMES)
    shown = s.feed("a < b and <to") + s.feed("ol> is not a call")
    rest, calls = s.finish()
    assert shown + rest == "a < b and <tool> is not a call" and calls == []


def test_constraints():
    r = req(tool_choice={"type": "function", "function": {"name": "get_weather"}})
    mode = T.tool_mode(r.tools, r.tool_choice)
    assert T.constraint_fields(mode, r.tools, True, False) == {"json_schema": TOOLS[0]["function"]["parameters"]}
    r = req(tool_choice="required")
    schema = T.constraint_fields(T.tool_mode(r.tools, "required"), r.tools, False, False)["json_schema"]
    assert schema["minItems"] == 1 and schema["maxItems"] == 1 and len(schema["items"]["anyOf"]) == 2
    assert "maxItems" not in T.constraint_fields(T.ToolMode("required"), r.tools, True, False)["json_schema"]
    assert T.constraint_fields(T.ToolMode("auto"), r.tools, True, False) == {}
    tag = T.constraint_fields(T.ToolMode("auto"), r.tools, True, True)["structural_tag"]
    assert tag["triggers"] == ["<tool_call>"] and len(tag["structures"]) == 2
    assert T.tool_mode(r.tools, "none").kind == "none" and T.tool_mode(None, None).kind == "none"


def test_fallback_template_renders_tools_calls_and_results():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "21C"},
        {"role": "tool", "tool_call_id": "c2", "content": "sunny"},
    ]
    text = render_chatml_hermes(messages, TOOLS)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert json.dumps(TOOLS[0]) in text
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n' \
           '</tool_call><|im_end|>' in text
    assert ("<|im_start|>user\n<tool_response>\n21C\n</tool_response>\n<tool_response>\nsunny\n"
            "</tool_response><|im_end|>\n") in text
    assert text.endswith("<|im_start|>assistant\n")


class _Tok:
    chat_template = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
    hf = type("HF", (), {"bos_token": "<s>", "eos_token": "</s>", "unk_token": None, "pad_token": None})()

    def apply_chat_template(self, messages, add_generation_prompt=True, tools=None, **kw):
        return "".join(f"[{m['role']}]{m['content']}" for m in messages) + ("[assistant]" if add_generation_prompt else "")


def test_renderer_falls_back_only_when_needed(caplog):
    r = ChatRenderer(_Tok())
    plain = [{"role": "user", "content": "hi"}]
    assert r.render(plain) == "[user]hi[assistant]"
    with caplog.at_level("WARNING", logger="furca.server"):
        text = r.render(plain, TOOLS)
    assert "<tools>" in text and "fallback" in caplog.text
    assert r.render(plain + [{"role": "assistant", "content": "Hel"}], continue_final_message=True) == \
        "[user]hi[assistant]Hel"


@pytest.mark.parametrize("kw", [
    {"tools": []},
    {"tool_choice": "auto", "tools": None},
    {"tool_choice": {"type": "function", "function": {"name": "missing"}}},
    {"tool_choice": "required", "regex": "a"},
])
def test_tool_request_validation(kw):
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        ChatCompletionRequest(messages=[{"role": "user", "content": "x"}], **{"tools": TOOLS, **kw})


def _real_tokenizer():
    """A furca `Tokenizer` over a three-token word-level vocabulary, with _Tok's template."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models
    from transformers import PreTrainedTokenizerFast

    from furca.runtime.tokenizer import Tokenizer

    backend = HFTokenizer(models.WordLevel({"<s>": 0, "</s>": 1, "<unk>": 2}, unk_token="<unk>"))
    hf = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                 chat_template=_Tok.chat_template)
    return Tokenizer(hf)


def test_chat_template_override(tmp_path):
    text = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}" \
           "{% if tools %}T{% endif %}{% if add_generation_prompt %}<assistant>{% endif %}"
    tok = _real_tokenizer()
    r = ChatRenderer(tok, text)  # rendered by the tokenizer's public apply_chat_template(chat_template=...)
    assert r.render([{"role": "user", "content": "hi"}]) == "<s><user>hi<assistant>"
    assert ChatRenderer(tok).render([{"role": "user", "content": "hi"}]) == "[user]hi"
    path = tmp_path / "t.jinja"
    path.write_text(text.replace("{% if tools %}T{% endif %}", "{% if tools %}{{ tools | tojson }}{% endif %}"
                                 "{# tool_call #}"))
    r = ChatRenderer(tok, str(path))
    assert r.supports_tools and '"get_weather"' in r.render([{"role": "user", "content": "hi"}], TOOLS)


@pytest.mark.parametrize("text, names, closed", [
    ('[{"name": "noop", "parameters": {}}]', ["noop"], True),
    (' [ {"name": "noop", "parameters": {}} ,\n {"name": "get_weather", "parameters": {"city": "X"}} ] ',
     ["noop", "get_weather"], True),
    ('[{"name": "noop", "parameters": {}}, {"name": "get_weather", "parameters": {"ci', ["noop"], False),
    ('[{"name": "noop", "parameters": {}}, ', ["noop"], False),
    ('[{"name": "noop", "parameters": {}}', ["noop"], False),
    ('[{"name": "noop", "param', [], False),
    ("", [], False),
    ('{"name": "noop"}', [], False),
])
def test_parse_call_array_keeps_every_complete_call(text, names, closed):
    items, got_closed = T.parse_call_array(text)
    assert [i["name"] for i in items] == names and got_closed == closed
    content, calls = T.parse_output(T.ToolMode("required"), text, [])
    assert [c["function"]["name"] for c in calls] == names
    assert content == (None if names else text)
    assert T.calls_complete(T.ToolMode("required"), text, calls) == bool(names)


def test_required_streamer_sends_each_call_once_when_complete():
    text = '[{"name": "get_weather", "parameters": {"city": "Paris"}}, {"name": "noop", "parameters": {}}]'
    s = T.RequiredCallStreamer()
    sent = []
    for i in range(0, len(text), 3):  # pieces of 3 characters
        for call in s.feed(text[i:i + 3]):
            sent.append((i, call["function"]["name"], json.loads(call["function"]["arguments"])))
    assert [(n, a) for _, n, a in sent] == [("get_weather", {"city": "Paris"}), ("noop", {})]
    assert sent[0][0] < text.index('{"name": "noop"')  # the first went out before the second began


def test_named_call_is_complete_only_when_its_arguments_parse():
    named = T.ToolMode("named", "get_weather")
    assert T.calls_complete(named, '{"city": "Paris"}', [None])
    assert not T.calls_complete(named, '{"city": "Par', [None])


def test_legacy_stream_deltas():
    from furca.server import legacy_functions as L

    first = {"role": "assistant", "content": None, "tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}]}
    assert L.stream_delta(first) == {"role": "assistant", "content": None,
                                     "function_call": {"name": "f", "arguments": ""}}
    assert L.stream_delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}) == \
        {"function_call": {"arguments": '{"a"'}}
    assert L.stream_delta({"tool_calls": [{"index": 1, "function": {"name": "g", "arguments": "{}"}}]}) is None
    assert L.stream_delta({"content": "hi"}) == {"content": "hi"}
    calls = [T.make_call("f", {"a": 1}), T.make_call("g", {})]
    assert L.function_call(calls) == {"name": "f", "arguments": '{"a": 1}'} and L.function_call([]) is None
