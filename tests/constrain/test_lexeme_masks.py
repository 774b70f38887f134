"""Lexeme masks shared across grammars (lexeme_masks._LEXEME_MASKS): the abstract state of a
plain string, number, integer, boolean or any-JSON-value rule lies wholly in the NFA's
closed layout of lasting rules, so its abstract mask is computed once per process and
tokenizer and reused by every other grammar. The masks a grammar then serves must be
the masks it computes alone, and the reuse must happen."""
import json

import numpy as np

from furca.constrain import GrammarCompiler
from furca.constrain import lexeme_masks

from .conftest import needs_compiled_walks

A = {"type": "object", "properties": {"s": {"type": "string"}, "n": {"type": "number"}, "i": {"type": "integer"},
                                      "b": {"type": "boolean"}}}
A_TEXTS = ['{"s":"plain text, 12 words","n":-1.5e3,"i":42,"b":true,"x":{"k":["v",1,null]}}']
B = {"type": "array", "items": {"type": "object", "required": ["name"],
                                "properties": {"name": {"type": "string"}, "count": {"type": "integer", "minimum": 0},
                                               "tags": {"type": "array", "items": {"type": "string"}}}}}
B_TEXTS = ['[{"name":"a b c","count":3,"tags":["x","y z"],"extra":{"q":[1.5,"w"]}},{"name":""}]',
           '[{"name":"\\u00e9t\\u00e9","tags":[],"more":"text"}]']


def _walk(g, tok, text):
    """The packed masks along text's tokens, then whether the matcher may end."""
    info = g.info
    m = g.matcher()
    out = []
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    for t in tok.encode(text, add_special_tokens=False).ids:
        m.fill_bitmask(bm)
        out.append(bm.copy())
        assert m.accept_token(t)
    m.fill_bitmask(bm)
    out.append(bm.copy())
    return out, m.can_terminate()


@needs_compiled_walks  # the shared masks are abstract states' recording walks
def test_shared_lexeme_masks_equal_the_grammars_own(llama, no_shared_masks):
    info, _, tok = llama
    first = GrammarCompiler(info)
    for text in A_TEXTS:
        _walk(first.compile_json_schema(A), tok, text)
    filled = dict(no_shared_masks)
    assert len(filled) >= 4  # string, number, integer, boolean, any value: inside the lexemes
    shared = GrammarCompiler(info).compile_json_schema(B)
    walks = [_walk(shared, tok, text) for text in B_TEXTS]
    # B's abstract masks include A's objects themselves: reused, not recomputed
    reused = [v for v in shared.masks.split._abs.values() if any(v is f[1] for f in filled.values())]
    assert reused
    no_shared_masks.clear()
    alone = GrammarCompiler(info).compile_json_schema(B)
    for text, (masks, end) in zip(B_TEXTS, walks):
        masks2, end2 = _walk(alone, tok, text)
        assert end == end2
        assert len(masks) == len(masks2)
        for i, (x, y) in enumerate(zip(masks, masks2)):
            assert np.array_equal(x, y), (text, i)


def test_only_closed_layouts_share(llama, no_shared_masks):
    info, _, tok = llama
    # flexible whitespace: any value calls `ws`, whose body is not lasting (max_whitespace
    # differs between grammars with the same any-value body): nothing is shared from it
    gc = GrammarCompiler(info)
    before = dict(no_shared_masks)  # the compact lexemes the compiler made
    g = gc.compile_json_schema({"type": "array", "items": {}}, whitespace="flexible", max_whitespace=1)
    _walk(g, tok, '[{"a": [1, "x"]}]')
    assert not g.automaton.nfa.layout.closed
    assert no_shared_masks == before
    assert not any(v is m[1] for v in g.masks.split._abs.values() for m in before.values())
    g2 = gc.compile_json_schema({"type": "array", "items": {}}, whitespace="flexible", max_whitespace=3)
    m = g2.matcher()
    assert m.accept_string('[{"a":   [1,   "x"]}]') and m.can_terminate()


def test_a_real_schema_walk_is_unchanged_by_sharing(llama, no_shared_masks):
    # the instance of an unrelated grammar first (warm lexemes), then the same walk alone
    info, _, tok = llama
    schema = {"type": "object", "properties": {
        "id": {"type": "integer"}, "title": {"type": "string"}, "price": {"type": "number"},
        "meta": {"type": "object"}, "flags": {"type": "array", "items": {"type": "boolean"}}}}
    text = json.dumps({"id": 7, "title": "Zwölf Boxkämpfer", "price": 9.99, "meta": {"a": {"b": [None, "c"]}},
                       "flags": [True, False], "other": 1}, ensure_ascii=False, separators=(",", ":"))
    _walk(GrammarCompiler(info).compile_json_schema(A), tok, A_TEXTS[0])
    warm = _walk(GrammarCompiler(info).compile_json_schema(schema), tok, text)
    no_shared_masks.clear()
    cold = _walk(GrammarCompiler(info).compile_json_schema(schema), tok, text)
    assert warm[1] == cold[1] and len(warm[0]) == len(cold[0])
    assert all(np.array_equal(x, y) for x, y in zip(warm[0], cold[0]))


@needs_compiled_walks  # the shared masks are abstract states' recording walks
def test_a_compiler_makes_the_lexeme_masks_of_its_tokenizer(llama, no_shared_masks):
    # a compiler made for a tokenizer not yet seen fills the shared lexeme masks at once
    info, _, tok = llama
    gc = GrammarCompiler(info)
    mine = {k: v for k, v in no_shared_masks.items() if v[0]() is info}
    assert len(mine) >= 5  # inside a string, number, integer, boolean, any value
    # a schema's first string value takes its abstract mask from there
    g = gc.compile_json_schema({"type": "object", "properties": {"title": {"type": "string"}}})
    _walk(g, tok, '{"title":"some words"}')
    assert any(v is m[1] for v in g.masks.split._abs.values() for m in mine.values())
    n = len(no_shared_masks)
    GrammarCompiler(info)  # once per tokenizer and process
    assert len(no_shared_masks) == n


@needs_compiled_walks  # the shared masks are abstract states' recording walks
def test_the_shared_masks_do_not_keep_a_tokenizer_alive(no_shared_masks):
    # a tokenizer dropped by its user is freed; its entries make room when the table is full
    import gc
    import weakref

    from .conftest import byte_info

    info = byte_info()
    GrammarCompiler(info)
    assert any(v[0]() is info for v in no_shared_masks.values())
    ref = weakref.ref(info)
    del info
    gc.collect()
    assert ref() is None
    n = len(no_shared_masks)
    saved = lexeme_masks.MAX_LEXEME_MASKS
    lexeme_masks.MAX_LEXEME_MASKS = n  # full of dead entries
    try:
        other = byte_info()
        GrammarCompiler(other)
        assert all(v[0]() is other for v in no_shared_masks.values()) and no_shared_masks
    finally:
        lexeme_masks.MAX_LEXEME_MASKS = saved


def _own_calls_into_lasting(nfa):
    size = nfa.layout.size
    return [(c, r) for c, (callee, r) in nfa.call.items() if callee < size <= c]


def test_calls_into_lasting_rules_keep_their_frame(llama):
    # a call from the grammar's own rules into a lasting rule keeps its frame even in tail
    # position (build_nfa), so the lasting rule's states are cut there (automaton.abstract):
    # the same abstract states, and masks, for every caller; except where a matcher
    # watches the keys, whose watch reads the stacks as the tail calls leave them
    info, compiler, _ = llama
    schema = {"type": "object", "properties": {"id": {"type": "integer"}}}  # free members: any value, in tail position
    nfa = compiler.compile_json_schema(schema).automaton.nfa
    calls = _own_calls_into_lasting(nfa)
    assert calls and not any(r in nfa.is_tail for _c, r in calls)
    nfa = compiler.compile_json_schema(schema, member_order="any").automaton.nfa
    calls = _own_calls_into_lasting(nfa)
    assert any(r in nfa.is_tail for _c, r in calls)


@needs_compiled_walks
def test_a_scalar_in_a_type_list_is_a_lexeme(llama, no_shared_masks):
    # `"type": ["string", "null"]` (Kubernetes' and Snowplow's nullable fields): the string
    # is a call of the lasting string rule, not a copy of its body inside the grammar's own
    # rule, so the state inside the value takes the string lexeme's shared mask
    info, _, tok = llama
    schema = {"type": "object", "properties": {"s": {"type": ["string", "null"]}, "n": {"type": ["null", "integer"]},
                                                "b": {"type": ["boolean", "string"]}}}
    g = GrammarCompiler(info).compile_json_schema(schema)
    a = g.automaton
    for prefix in ('{"s":"', '{"n":-', '{"b":"', '{"b":t'):  # (after a digit the integer may end: no frame below all)
        ab = a.abstract(a.step(a.start, prefix.encode()))
        assert ab is not None and lexeme_masks.lexeme_key(a, ab[0]) is not None, prefix
    text = '{"s":"some words here","n":null,"b":"x y"}'
    shared, end = _walk(g, tok, text)
    assert end
    assert any(v is f[1] for v in g.masks.split._abs.values() for f in no_shared_masks.values())
    no_shared_masks.clear()  # the same masks computed without any shared entry
    alone = GrammarCompiler(info).compile_json_schema(schema)
    assert all(np.array_equal(x, y) for x, y in zip(shared, _walk(alone, tok, text)[0]))
