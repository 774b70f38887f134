"""Key-exclusion tries (json_schema/keys.py) and the slice proof over configuration sets
(slice_proof.py): undeclared keys are exactly the canonical spellings of the names not
declared, non-ASCII and escaped names included; a trie node shares its wide-character
and escape tail (key-other) with every other node; a trie state (trie node plus
key-other's start) is proven to survive every slice string without a state search, and
a bounded string is refuted by the probe, in agreement with the search over states.
The IR's key trie (key_trie.py), one NFA node per trie node, has the language and the
masks of its expansion, accepts
exactly the other keys, keeps its open names when its rules match nothing, and has its
calls renamed inside structural tags."""

import itertools
import json
import random

import pytest

from furca.constrain import GrammarCompiler, ir, key_trie
from furca.constrain.prepare import prepare
from furca.constrain.slice_proof import UNBOUNDED
from furca.errors import CompileError

from .conftest import BYTE_EOS, allowed_set, byte_info, walk_checking_masks

NAMES = ["é", "éa", "日本", "a", "ab", 'q"', "b\\", "\n", "\u00e9\u00e9", "x\u0001"]
SCHEMA = {"type": "object", "properties": {n: {"type": "string"} for n in NAMES},
          "additionalProperties": {"type": "integer"}}
ALPHABET = ["a", "b", "é", "日", "本", '"', "\\", "\n", "\u0001", "q", "x", "\u00e8"]


def _accepts(g, text):
    m = g.matcher()
    for b in text.encode():
        if not m.accept_token(b):
            return False
    return m.can_terminate()


def test_undeclared_keys_are_exactly_the_other_canonical_names():
    g = GrammarCompiler(byte_info()).compile_json_schema(SCHEMA)
    keys = {"".join(p) for k in range(3) for p in itertools.product(ALPHABET, repeat=k)}
    for key in keys:
        spelled = json.dumps(key, ensure_ascii=False)
        extra = _accepts(g, "{%s:1}" % spelled)
        declared = _accepts(g, '{%s:"v"}' % spelled)
        assert extra == (key not in NAMES), key
        assert declared == (key in NAMES), key


def test_only_the_canonical_spelling_of_a_key_is_accepted():
    g = GrammarCompiler(byte_info()).compile_json_schema(SCHEMA)
    assert _accepts(g, '{"\\u0002":1}')  # the canonical escape of an undeclared control character
    for text in ['{"\\u0065":1}',  # "e" escaped
                 '{"\\/":1}',  # "/" escaped
                 '{"\\u000A":1}', '{"\\u000a":1}',  # "\n" has a short escape
                 '{"\\u001F":1}',  # upper-case hex
                 '{"\\u00e9a":1}']:  # a declared name with its "é" escaped
        assert not _accepts(g, text), text


def test_masks_at_non_ascii_and_escaped_keys_equal_brute_force():
    info = byte_info(['"', '":', "é", "éa", "日本", '本"', '\\"', "\\\\", "\xe6", '"}', "ab", "\\u00"])
    g = GrammarCompiler(info).compile_json_schema(SCHEMA)
    for seed in range(3):
        walk_checking_masks(g.matcher(), info, random.Random(seed), 60)


def _nfa_nodes(names):
    schema = {"type": "string", "not": {"enum": names}}  # a string that is none of names: the trie alone
    return len(GrammarCompiler(byte_info()).compile_json_schema(schema).automaton.nfa.edges)


def test_trie_nodes_share_the_wide_character_tail():
    # 40 names grown by 6 letters each: 240 more trie nodes. Each is one NFA node (its kid
    # edge; its ASCII class, closing quote and call of key-other go to nodes every trie
    # node shares, key_trie.py); as ordinary IR each cost ~8 (its own join, class target
    # and two calls), and a UTF-8 class of its own for the wide characters ~16 more.
    rng = random.Random(0)
    base = ["k%02d" % i for i in range(40)]
    longer = [n + "".join(rng.choice("abcdefgh") for _ in range(6)) for n in base]
    per_trie_node = (_nfa_nodes(base + longer) - _nfa_nodes(base)) / (40 * 6)
    assert per_trie_node < 2, per_trie_node


def _key_state(g, prefix):
    m = g.matcher()
    for b in prefix.encode():
        assert m.accept_token(b), m.error
    return m


def test_trie_states_are_proven_as_configuration_sets():
    # a trie node alone has no edge on a wide character, and key-other's start none on an
    # ASCII one: only the set is proven
    info = byte_info()
    names = ["n%03d" % i for i in range(150)]
    g = GrammarCompiler(info).compile_json_schema({"type": "object",
                                                   "properties": {n: {"type": "integer"} for n in names}})
    _key_state(g, '{"n0')
    a, bounds = g.automaton, g.masks.slices
    sl = info.slices()[0]
    depths = []
    for x in range(1, a.num_states):
        configs = a.configs[x]
        if len(configs) > 1 and any(len(a.nfa.edges[n]) >= 8 for n, _st in configs):
            depths.append(bounds.slice_depth(x, sl))
    assert depths and max(depths) == UNBOUNDED
    # proven trie nodes: each trie node's part (the slice characters that start on its own
    # edges) is proven, though the node alone has no edge on a wide first byte
    proven = [u for u, ok in bounds.proof._parts[sl.name].items()
              if ok and not bounds.proof.node_covers(u[0][0], sl)]
    assert len(proven) >= 150


def test_bounded_string_is_refuted_by_the_probe():
    # a pattern's {0,12}: twelve copies of the character (a counter would be taken in
    # canonical form, as a token is shorter than the distance to its bound; a maxLength
    # string counts its characters: string_counters.py)
    info = byte_info()
    g = GrammarCompiler(info).compile_json_schema({"type": "string", "pattern": "^[a-z]{0,12}$"})
    m = _key_state(g, '"' + "a" * 11)
    a, proof = g.automaton, g.masks.slices.proof
    sl = info.slices()[0]
    inside = [a.configs[x] for x in range(1, a.num_states) if a.configs[x] and not a.accepting[x]]
    assert len(inside) >= 12
    for configs in inside:
        assert proof._killed(tuple(sorted(configs)), sl, {})
        assert not proof.unbounded(configs, sl)
    bits = allowed_set(m, info)  # one more character, then only the quote
    assert bits[ord("a")] and bits[ord('"')] and not bits[BYTE_EOS]
    assert m.accept_token(ord("a"))
    bits = allowed_set(m, info)
    assert not bits[ord("a")] and bits[ord('"')]


GBNF_STRINGS = r'''root ::= "[" item ("," item)* "]"
item ::= "\"" [^"\\]* "\"" | "\"" short "\"" | "<" one* ">"
short ::= [a-z] [a-z]? [a-z]?
one ::= [^"\\>]
'''


def _free_proven_states(g, sl):
    a, proof = g.automaton, g.masks.slices.proof
    return [x for x in range(1, a.num_states)
            if a.configs[x] and x not in g.masks.split.parts and proof.free_unbounded(a.configs[x], sl)]


def test_stack_free_proof_holds_only_where_no_slice_string_kills():
    # every state the stack-free proof accepts (the calls its closure makes entered, a
    # return counted as dying) survives every slice string, by a search over states;
    # key tries with non-ASCII and escaped names, bounded strings, a length region (an
    # email of at most 60 characters), returns from a callee
    from .test_slices import reaches_death
    info = byte_info(['"', '":', "é", "éa", "日本", '本"', '\\"', "\\\\", '"}', "ab"])
    sl = info.slices()[0]
    schemas = [SCHEMA, {"type": "object", "properties": {"ab": {"type": "string", "maxLength": 3},
                                                          "日": {"type": "string", "pattern": "^[a-z]+$"},
                                                          "mail": {"type": "string", "format": "email",
                                                                   "maxLength": 60}},
                        "additionalProperties": {"type": "string", "maxLength": 2}}]
    grammars = [GrammarCompiler(info).compile_json_schema(s) for s in schemas]
    grammars.append(GrammarCompiler(info).compile_grammar(GBNF_STRINGS))
    texts = [['{"éa":"x","\\n":"y","日x":1,"a\\u0001":2}'], ['{"ab":"xy","日":"ab","mail":"a.b@c.de","q":"z"}'],
             ['["abc",<a b>,"x"]']]
    free = 0
    for g, (text,) in zip(grammars, texts):
        m = g.matcher()
        for b in text.encode():
            allowed_set(m, info)
            assert m.accept_token(b), (text, m.error)
        bounds = g.masks.slices
        proven = _free_proven_states(g, sl)
        free += len(proven)
        for x in proven:
            assert not reaches_death(bounds, x, sl), (text, g.automaton.configs[x])
    assert free >= 10


def test_states_of_a_large_trie_are_proven_stack_free_and_masks_equal_brute_force():
    # 300 names, many non-ASCII or escaped: the state after every character-boundary
    # prefix of a name is proven by the stack-free proof, a state inside a character or
    # an escape is not (a slice character kills it there), and the masks at trie states
    # allow exactly the tokens whose step the grammar accepts
    rng = random.Random(1)
    names = ["".join(rng.choice("abcdé日\"\\\n") for _ in range(rng.randint(1, 6))) for _ in range(300)]
    info = byte_info(['"', '":', "é", "éa", "日本", '本"', '\\"', "\\\\", '"}', "ab", "abc", "\\u00"])
    g = GrammarCompiler(info).compile_json_schema(
        {"type": "object", "properties": {n: {"type": "integer"} for n in names},
         "additionalProperties": {"type": "string"}})
    sl = info.slices()[0]
    a, proof = g.automaton, g.masks.slices.proof
    boundary = inside = 0
    for name in names[:60]:
        m = _key_state(g, '{"')
        for ch in name:
            spelled = json.dumps(ch, ensure_ascii=False)[1:-1].encode()
            for k, b in enumerate(spelled):
                assert m.accept_token(b), m.error
                configs = a.configs[m._h.state]
                if k + 1 < len(spelled):
                    inside += 1
                    assert not proof.free_unbounded(configs, sl), (name, ch, k)
            boundary += 1
            assert proof.free_unbounded(configs, sl), (name, ch)
    assert boundary > 150 and inside > 50
    walk_checking_masks(_key_state(g, '{"'), info, random.Random(0), 12)
    for seed in range(3):
        walk_checking_masks(g.matcher(), info, random.Random(seed), 40)


def test_word_limited_string_is_refuted_by_the_word_probe():
    # at most 30 words: no string of spaces kills it (spaces repeat inside a word gap),
    # "a a a ..." does; states inside the string are refuted without a proof's search,
    # and the masks there equal brute force. A 64-byte token keeps the word counts
    # distinct (counts further than the longest token from the bound share a state)
    info = byte_info(["a ", "ab", " a", '"', "a " * 32])
    g = GrammarCompiler(info).compile_json_schema({"type": "string", "pattern": "^(?:\\S+\\s+){0,29}\\S+$"})
    m = _key_state(g, '"' + "a " * 27 + "a")
    a, proof = g.automaton, g.masks.slices.proof
    sl = info.slices()[0]
    inside = [a.configs[x] for x in range(1, a.num_states) if a.configs[x] and not a.accepting[x]]
    assert len(inside) >= 20
    spaces_survive = 0
    for configs in inside:
        unit = tuple(sorted(configs))
        assert proof._killed(unit, sl, {})
        spaces_survive += not proof._probe(unit, {}, b" ")  # after a word, spaces alone never end it
    assert spaces_survive >= 20
    # one walk to the death refutes every unit met at the start of a repetition
    shared = {}
    first = next(u for u in (tuple(sorted(c)) for c in inside) if not proof._probe(u, {}, b" "))
    assert proof._killed(first, sl, shared)
    assert len(shared) >= 20 and not any(shared.values())
    walk_checking_masks(m, info, random.Random(0), 12)


# ---- the IR's key trie (key_trie.py): plain ASCII names built into the NFA directly

def _trie_grammar(trie_expr, rest_body=None):
    """root: a key trie, then ":"; key-rest / key-other in the shape json_schema/keys.py
    gives them (any plain or wide bytes, the closing quote; one wide byte, then key-rest)."""
    if rest_body is None:
        rest_body = ir.seq([("rep", ("byte", ((0x20, 0x21), (0x23, 0x7E), (0x80, 0xFF))), 0, None), ir.literal('"')])
    return ir.Grammar({"root": ir.seq([trie_expr, ir.literal(":")]), "key-rest": rest_body,
                       "key-other": ir.seq([("byte", ((0x80, 0xFF),)), ("ref", "key-rest", 0)])})


NAME_SETS = [["a"], ["", "a", "ab"], [""], ["ab", "abc", "b", "a b"], ["apiVersion", "kind", "metadata", "spec"],
             ["z" * 40, "~", " ", "x{", "x}"]]


def _compiled(g, info):
    return GrammarCompiler(info)._compile(g, ("grammar",))


def test_trie_built_directly_has_the_language_and_masks_of_its_expansion():
    # one NFA node per trie node (the rest shared) against the expansion's ~7: the same
    # strings accepted, the same mask at every step of random walks
    rng = random.Random(1)
    sets = NAME_SETS + [sorted({"".join(rng.choice("abc") for _ in range(rng.randint(0, 4))) for _ in range(12)})
                        for _ in range(12)]
    info = byte_info(['"', '":', "ab", "abc", "a", "b", "ca", "\xe6"])
    for names in sets:
        e = key_trie.keys(names, "key-rest", "key-other")
        direct, expanded = _compiled(_trie_grammar(e), info), _compiled(_trie_grammar(key_trie.expand(e)), info)
        for key in ["".join(p) for k in range(4) for p in itertools.product("abc ", repeat=k)] + names:
            text = ('"%s":' % key).encode()
            got = [_accepts_bytes(g, text) for g in (direct, expanded)]
            assert got[0] == got[1] == (key not in names), (names, key)
        for seed in range(2):
            walk_checking_masks(direct.matcher(), info, random.Random(seed), 12)
    nodes = [len(_compiled(_trie_grammar(key_trie.keys(names, "key-rest", "key-other")), info).automaton.nfa.edges)
             for names in (["k%02d" % i for i in range(40)], ["k%02dabcdef" % i for i in range(40)])]
    assert nodes[1] - nodes[0] == 40 * 6  # six more trie nodes a name: six more NFA nodes


def _accepts_bytes(g, data):
    m = g.matcher()
    return all(m.accept_token(b) for b in data) and m.can_terminate()


def test_trie_accepts_exactly_the_other_plain_keys():
    names = ["", "a", "ab", "b c"]
    compiled = _compiled(_trie_grammar(key_trie.keys(names, "key-rest", "key-other")), byte_info())
    keys = {"".join(p) for k in range(4) for p in itertools.product(["a", "b", " ", "c"], repeat=k)}
    for key in keys:
        assert _accepts_bytes(compiled, ('"%s":' % key).encode()) == (key not in names), key
    for key in ["\u00e9", "a\u00e9", "\u65e5b"]:  # a wide character leaves the trie through key-other
        assert _accepts_bytes(compiled, ('"%s":' % key).encode())


def test_trie_without_its_rules_keeps_the_open_names():
    # key-rest matches nothing: prepare expands the trie and drops the branches calling it;
    # what is left are the prefixes that are not names, then the closing quote
    names = ["ab", "b"]
    g = _trie_grammar(key_trie.keys(names, "key-rest", "key-other"), rest_body=ir.NOTHING)
    compiled = _compiled(g, byte_info())
    for key, want in [("", True), ("a", True), ("ab", False), ("b", False), ("abc", False), ("x", False)]:
        assert _accepts_bytes(compiled, ('"%s":' % key).encode()) == want, key
    closed = _trie_grammar(key_trie.keys(["", "a"], "key-rest", "key-other"), rest_body=ir.NOTHING)
    with pytest.raises(CompileError, match="matches no string"):
        prepare(closed)


def test_trie_names_must_be_plain_ascii():
    for bad in (['q"'], ["b\\"], ["é"], ["\n"]):
        with pytest.raises(ValueError, match="plain ASCII"):
            key_trie.keys(bad, "key-rest", "key-other")


def test_structural_tag_renames_the_calls_of_a_trie():
    schema = {"type": "object", "properties": {"ab": {"type": "integer"}}}
    g = GrammarCompiler(byte_info()).compile_structural_tag(
        [{"begin": "<f>", "schema": schema, "end": "</f>"}, {"begin": "<g>", "schema": schema, "end": "</g>"}], ["<"])
    for text, want in [('<f>{"ab":1,"x":2}</f>', True), ('<g>{"ab":1,"ab":2}</g>', False)]:
        assert _accepts_bytes(g, text.encode()) == want, text
