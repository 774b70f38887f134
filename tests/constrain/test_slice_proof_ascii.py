"""SliceProof's path for stack-free parts on one-byte characters
(`key_trie_proof.KeyTrieParts.ascii_units`, a key trie node's part): the same
requirements and the same verdicts as the general path (`_spans` / `_pieces`), on the
Llama-3.1 tokenizer's slices."""

from furca.constrain.slice_proof import SliceProof

NAMES = ["alpha", "alpine", "alp", "beta", "b", "bet", "gamma", "日本", "日", "x\"y", "a\\b", "zeta", "zz", "z",
         "id", "identifier", "idle", "name", "names", "n"]
SCHEMAS = [
    {"type": "object", "properties": {n: {"type": "string", "maxLength": 5} for n in NAMES},
     "additionalProperties": {"type": "integer"}},
    {"type": "object", "properties": {n: {"type": "integer"} for n in NAMES[:8]},
     "additionalProperties": {"type": "string", "pattern": "^[a-z ]{0,12}$"}},
    {"type": "object", "properties": {"a": {"type": "object", "properties": {n: {"type": "boolean"} for n in NAMES},
                                            "additionalProperties": False}, "b": {"type": "string"}}},
]


def _general(proof):
    """A SliceProof of the same automaton that never takes the one-byte path."""
    p = SliceProof(proof._a)
    p.tries.ascii_units = lambda cfg, bits, unit_of: None
    return p


def test_ascii_units_are_the_general_pieces(llama):
    info, compiler, _tok = llama
    taken = 0
    for schema in SCHEMAS:
        g = compiler.compile_json_schema(schema)
        proof = g.masks.slices.proof
        for sl in info.slices():
            for n in range(len(g.automaton.nfa.edges)):
                cfg = (n, None)
                fast = proof.tries.ascii_units(cfg, sl.first_bytes, proof.closure_unit)
                if fast is None:
                    continue
                taken += 1
                pieces = proof._spans(cfg, sl.first_bytes, {})
                assert all(b <= 0x80 for _a, b, _o in pieces), n
                assert all(len(o) <= 1 for _a, _b, o in pieces), n
                assert set(fast) == {o[0] if o else () for _a, _b, o in pieces}, n
    assert taken > 50


def test_verdicts_equal_the_general_path(llama):
    # every NFA node's stack-free unit, proven from scratch with and without the path
    info, compiler, _tok = llama
    proven = 0
    for schema in SCHEMAS:
        g = compiler.compile_json_schema(schema)
        proof = g.masks.slices.proof
        for sl in info.slices():
            fast, slow = SliceProof(proof._a), _general(proof)
            for n in range(len(g.automaton.nfa.edges)):
                got = fast.free_unbounded([(n, None)], sl)
                assert got == slow.free_unbounded([(n, None)], sl), (n, sl.name)
                proven += got
            assert fast._parts[sl.name] == {k: v for k, v in slow._parts[sl.name].items() if k in fast._parts[sl.name]}
    assert proven > 20

