"""accept_token's cold step through the abstract state (LazyAutomaton._step_abstract): a
token from a state without a row is stepped over its abstract state's rows and rebased
onto the real stack once, as far as it stays inside the rule (then byte by byte from the
real state), instead of interning a real state per byte. Every
step is checked against the reference: the token's bytes stepped one at a time through
the NFA's edges and closures on the real stacks (no rows, no abstract state)."""

import numpy as np
import pytest

from .conftest import needs_compiled_walks

SCHEMAS = {
    # strings in an object (key tries, string bodies returning to "," / "}")
    "object": {"type": "object", "properties": {"name": {"type": "string"}, "tags": {
        "type": "array", "items": {"type": "string"}}, "n": {"type": "integer"}}, "required": ["name"]},
    # a recursive $ref: the same string and object rules at several depths
    "tree": {"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
        "label": {"type": "string"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}},
    # a length region (tick nodes, Closures.live) and a counter (maxItems > 16)
    "bounded": {"type": "object", "properties": {"words": {"type": "array", "maxItems": 40, "items": {
        "type": "string", "pattern": "^(?:\\S+\\s+){0,5}\\S+$", "minLength": 2, "maxLength": 30}}}},
}

TEXTS = {  # compact JSON, properties in their declared order (the compiler's defaults)
    "object": ['{"name":"hello world, \\"quoted\\" and 日本語","tags":["a b","c,d",""],"n":12}',
               '{"name":"x","tags":[]}'],
    "tree": ['{"label":"root node","kids":[{"label":"kid one","kids":[{"label":"deep \\u00e9"}]},'
             '{"label":"two","kids":[]}]}'],
    "bounded": ['{"words":["hello world","a b c d","xyz","end of it"]}', '{"words":["ab"]}'],
}


def reference_step(a, s, data):
    """s after data, one byte at a time from the NFA's edges and the closures of the
    targets on the real stacks (the semantics of a transition row, with no row)."""
    for b in data:
        targets = [(x, st) for n, st0 in a.configs[s] for lo, hi, x in a.nfa.edges[n] if lo <= b <= hi
                   for st in (a.byte_stack(n, st0),) if st >= 0]
        s = a.intern(*a.closure_of(targets)) if targets else 0
        if s == 0:
            break
    return s


@needs_compiled_walks  # abstract states come with the compiled walks
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_cold_steps_through_abstract_states_match_the_reference(llama, name):
    info, compiler, tok = llama
    g = compiler.compile_json_schema(SCHEMAS[name])
    a = g.automaton
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    used = []
    orig = a._step_abstract

    def spy(s, data):
        r = orig(s, data)
        used.append((len(data), len(data) - len(r[1])))  # (bytes, those stepped over the abstract state)
        return r

    a._step_abstract = spy
    for text in TEXTS[name]:
        ids = tok.encode(text, add_special_tokens=False).ids
        m = g.matcher()
        for t in ids:
            m.fill_bitmask(bm)  # walks the abstract state of a wide state (its rows)
            before = m._h.state
            data = info.token_bytes[t]
            ref = reference_step(a, before, data)
            a.step_cache.clear()
            assert m.accept_token(t), (text, data)
            assert m._h.state == ref, (text, data)
            # and a rejected continuation: the same bytes plus one that cannot follow
            for bad in (b'\x01', b'}}]]'):
                assert a.step(before, data + bad) == reference_step(a, before, data + bad)
        m.fill_bitmask(bm)
        assert m.can_terminate()
    # the abstract state of every state, as cached (the steps seed it for the states they
    # return: _step_abstract), is the one computed afresh
    seeded = [t for t, hit in a._abstract.items() if hit is not None]
    assert seeded
    cached = dict(a._abstract)
    a._abstract.clear()
    for t in seeded:
        assert a.abstract(t) == cached[t], (t, a.configs[t])
    # the abstract path served whole tokens, and parts of tokens that leave the rule
    # (`","`: the abstract state after `"` is accepting; the rest from the real state)
    assert any(n == u for n, u in used)
    if name == "bounded":
        assert any(0 < u < n for n, u in used) and any(u == 0 for n, u in used)


def test_without_masks_states_stay_exact(llama):
    # accept_string alone (no mask walked any abstract state: the abstract states and
    # their rows are built by the step itself)
    info, compiler, tok = llama
    g = compiler.compile_json_schema(SCHEMAS["tree"])
    a = g.automaton
    for text in TEXTS["tree"]:
        m = g.matcher()
        s = m._h.state
        for t in tok.encode(text, add_special_tokens=False).ids:
            data = info.token_bytes[t]
            ref = reference_step(a, s, data)
            assert a.step(s, data) == ref
            s = ref
        assert a.accepting[s]
