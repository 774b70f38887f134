"""Structural tags with the byte tokenizer: free text, triggers, tag bodies, EOS."""

import pytest

from furca.constrain import CompileError

from .conftest import BYTE_EOS, walk_ids

TAGS = [
    {"begin": "<tool_call>get_weather:", "schema": {}, "end": "</tool_call>"},
    {"begin": "<tool_call>search:", "schema": "{}", "end": "</tool_call>"},
]


def run(g, info, text):
    m = g.matcher()
    return walk_ids(m, list(text.encode()) + [BYTE_EOS], info, check_probes=40)


def test_structural_tag_table(byte_compiler):
    g = byte_compiler.compile_structural_tag(TAGS, ["<tool_call>"])
    info = byte_compiler.info
    for ok in ["", "hello <tool", "a < b <tool_cal", 'x<tool_call>get_weather:{"city":"Paris"}</tool_call> done',
               '<tool_call>search:[1,2]</tool_call><tool_call>get_weather:"x"</tool_call>', "<<tool_call>search:1</tool_call>"]:
        assert run(g, info, ok), ok
    for bad in ["<tool_call>", "<tool_call>other:{}</tool_call>", "<tool_call>search:{</tool_call>",
                '<tool_call>search:{"a":1}', '<tool_call>search:{"a":1}</tool_call']:
        assert not run(g, info, bad), bad


def test_structural_tag_jump_forward(byte_compiler):
    g = byte_compiler.compile_structural_tag([{"begin": "<f=get>", "schema": {}, "end": "</f>"}], ["<f="])
    m = g.matcher()
    for b in b"hi <f=":
        assert m.accept_token(b)
    assert m.jump_forward() == "get>"


def test_structural_tag_errors(byte_compiler):
    with pytest.raises(CompileError, match="starts with none of the triggers"):
        byte_compiler.compile_structural_tag([{"begin": "<a>", "schema": {}, "end": "</a>"}], ["<b"])
    with pytest.raises(CompileError, match="no triggers"):
        byte_compiler.compile_structural_tag(TAGS, [])
    with pytest.raises(CompileError, match="has no 'end'"):
        byte_compiler.compile_structural_tag([{"begin": "<tool_call>", "schema": {}}], ["<tool_call>"])
