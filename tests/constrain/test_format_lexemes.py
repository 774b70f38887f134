"""String formats as lexemes: a `format` alone (no length bound, no pattern) is a call of
a lasting rule whose body is one object per process (formats.format_body), so its NFA
nodes are laid out once and its states' abstract masks are shared by every grammar of
the process (lexeme_masks.py). A compiler fills them for a few ordinary values of each
format (compiler._warm_formats). A format whose nodes would not be plain (email and
hostname count their parts' lengths) stays inline, and the grammar keeps its layout."""
import json

import numpy as np
import pytest

from furca.constrain import GrammarCompiler, lexeme_masks
from furca.constrain.json_schema import formats, schema_to_ir

from .conftest import needs_compiled_walks
from .test_lexeme_masks import _walk

FORMATS = sorted(set(formats._BUILDERS) - set(formats._RULES))  # regex has a form of rules of its own


def _schema(fmt):
    return {"type": "object", "properties": {"v": {"type": "string", "format": fmt}, "n": {"type": "integer"}}}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_format_is_a_lasting_rule_where_its_nodes_are_plain(llama, fmt):
    _info, compiler, _tok = llama
    g = schema_to_ir(_schema(fmt))
    body = formats.format_body(fmt)
    rules = [n for n in g.lasting if n.startswith("format-")]
    if body is None:
        assert fmt in ("email", "idn-email", "hostname") and not rules
    else:
        assert len(rules) == 1
    lay = compiler.compile_json_schema(_schema(fmt)).automaton.nfa.layout
    assert lay is not None and lay.closed  # the lexemes' masks stay shared either way


def test_formats_of_equal_name_in_one_grammar_are_one_rule_and_a_definition_may_share_the_name(llama):
    _info, compiler, _tok = llama
    schema = {"$defs": {"format-uri": {"type": "string", "enum": ["x"]}}, "type": "object",
              "properties": {"a": {"$ref": "#/$defs/format-uri"}, "b": {"type": "string", "format": "uri"},
                             "c": {"type": "array", "items": {"type": "string", "format": "uri"}}}}
    g = schema_to_ir(schema)
    assert len([n for n in g.lasting if n.startswith("format-uri")]) == 1
    cg = compiler.compile_json_schema(schema)
    for text, ok in (('{"a":"x","b":"https://a.example/p","c":["urn:x:y"]}', True),
                     ('{"a":"https://a.example"}', False), ('{"b":"x"}', False), ('{"c":["1:x"]}', False)):
        m = cg.matcher()
        assert (m.accept_string(text) and m.can_terminate()) == ok, text


@needs_compiled_walks  # the shared masks are abstract states' recording walks
def test_format_masks_are_shared_and_equal_the_grammars_own(llama, no_shared_masks):
    info, _, tok = llama
    GrammarCompiler(info)  # fills the lexemes' and the formats' shared masks
    filled = dict(no_shared_masks)
    schema = {"type": "object", "properties": {
        "url": {"type": "string", "format": "uri"}, "when": {"type": "string", "format": "date-time"},
        "links": {"type": "array", "items": {"type": "string", "format": "uri"}}}}
    text = json.dumps({"url": "https://docs.example.org/a/b?x=1", "when": "2021-07-04T08:09:10Z",
                       "links": ["http://example.com/", "mailto:someone@example.com"]}, separators=(",", ":"))
    g = GrammarCompiler(info).compile_json_schema(schema)
    warm = _walk(g, tok, text)
    reused = [v for v in g.masks.split._abs.values() if any(v is f[1] for f in filled.values())]
    assert len(reused) >= 3  # the uri's states among them: computed once, by the compiler
    no_shared_masks.clear()
    lexeme_masks.MAX_LEXEME_MASKS, saved = 0, lexeme_masks.MAX_LEXEME_MASKS  # nothing shared now
    try:
        alone = GrammarCompiler(info).compile_json_schema(schema)
        cold = _walk(alone, tok, text)
    finally:
        lexeme_masks.MAX_LEXEME_MASKS = saved
    assert warm[1] == cold[1] and len(warm[0]) == len(cold[0])
    for i, (x, y) in enumerate(zip(warm[0], cold[0])):
        assert np.array_equal(x, y), i


@needs_compiled_walks
def test_a_uri_scheme_state_takes_its_mask_from_the_shared_table(llama, no_shared_masks):
    # the first state inside a uri takes letters only: narrow by the slices' pre-check, but
    # inside the lasting layout it goes through its abstract state, which the compiler made
    info, _, tok = llama
    GrammarCompiler(info)
    g = GrammarCompiler(info).compile_json_schema({"type": "string", "format": "uri"})
    m = g.matcher()
    assert m.accept_string('"')
    s = m._t[0]
    assert g.masks._wide(s)
    ab, _base = g.automaton.abstract(s)
    key = lexeme_masks.lexeme_key(g.automaton, ab)
    assert key is not None and lexeme_masks.shared(key, info) is not None
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    m.fill_bitmask(bm)
    https = tok.encode("https", add_special_tokens=False).ids
    assert len(https) == 1 and bm[0, https[0] >> 5] >> (https[0] & 31) & 1
    digit = tok.encode("1", add_special_tokens=False).ids[0]
    assert not bm[0, digit >> 5] >> (digit & 31) & 1  # a scheme starts with a letter
