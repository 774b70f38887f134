"""The mask of a JSON object's first key (the state after `{"`) is made at the compile
(compiler._prepare_first_key): a document's second step then finds it stored. It is
the mask the step would make, other grammars pay nothing but a dead step, and a limit met
while making it leaves the compile as it was."""
import numpy as np

from furca.constrain import GrammarCompiler, compiler as compiler_mod
from furca.constrain.automaton import AutomatonLimit

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name"], "additionalProperties": False}


def _stored_after(g, data):
    a = g.automaton
    t = a.step(a.start, data)
    return t, (t in g.masks._store if t else None)


def test_the_first_keys_mask_is_made_at_the_compile(llama):
    info, _compiler, tok = llama
    g = GrammarCompiler(info, cache_size=0).compile_json_schema(SCHEMA)
    t, stored = _stored_after(g, b'{"')
    assert t and stored
    # the same mask a matcher's step would have made
    m = g.matcher()
    assert m.accept_string('{"')
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    m.fill_bitmask(bm)
    allowed = {i for i in range(info.vocab_size) if bm[0, i >> 5] >> (i & 31) & 1}
    name = tok.encode("name", add_special_tokens=False).ids
    assert name[0] in allowed and tok.encode("x", add_special_tokens=False).ids[0] not in allowed
    cold = GrammarCompiler(info, cache_size=0).compile_json_schema(SCHEMA)
    cold.masks._store.pop(_stored_after(cold, b'{"')[0])  # made again, as a step would
    m2 = cold.matcher()
    assert m2.accept_string('{"')
    bm2 = np.zeros_like(bm)
    m2.fill_bitmask(bm2)
    assert np.array_equal(bm, bm2)


def test_other_grammars_make_nothing_more(llama):
    info, _compiler, _tok = llama
    g = GrammarCompiler(info, cache_size=0).compile_regex("[a-z]+")
    assert list(g.masks._store) == [g.automaton.start]  # the first mask only
    arr = GrammarCompiler(info, cache_size=0).compile_json_schema({"type": "array", "items": {"type": "string"}})
    assert _stored_after(arr, b'{"')[0] == 0


def test_a_limit_met_there_leaves_the_compile(llama, monkeypatch):
    info, _compiler, _tok = llama
    real = compiler_mod.LazyAutomaton.step

    def step(self, s, data):
        if data == compiler_mod.OBJECT_START:
            raise AutomatonLimit("too many states (test)")
        return real(self, s, data)

    monkeypatch.setattr(compiler_mod.LazyAutomaton, "step", step)
    g = GrammarCompiler(info, cache_size=0).compile_json_schema(SCHEMA)
    monkeypatch.undo()
    m = g.matcher()
    assert m.accept_string('{"name":"x"}') and m.can_terminate()

