"""Abstract masks at key trie nodes built from the trie's shared "any key" walk
(key_masks.py): the tokens that close a declared name leave the trie's part and come
back only as the declared key allows them; every mask equals brute force (byte
tokenizer) and the whole walk's masks (Llama-3.1, MaskBench-like objects)."""

import json
import random

import numpy as np
import pytest

from furca.constrain import GrammarCompiler

from .conftest import COMPILED_WALKS, accept_bytes, allowed_set, byte_info, needs_compiled_walks, walk_checking_masks

EXTRA = ['"', '":', '":"', '":1', 'ab"', 'ab":', 'ab":"', 'ab":1', 'abc":"', 'b":"', 'b":1', '"}', '","', "ab", "abc",
         '"a', '":{"', "é", '\\"', '"ab":', 'b":"x"}', 'b":"x"}}', 'b":"x"},"', 'b":"x"},"b', '":"x"}}']
SCHEMA = {"type": "object",
          "properties": {"ab": {"type": "integer"}, "abd": {"type": "string"}, "b": {"enum": ["x", "y"]},
                         "nest": {"type": "object", "properties": {"ab": {"type": "string"}}}},
          "additionalProperties": {"type": "string"}}


def _key_states_used(g):
    """Whether the split made a key state's mask (always, where the split exists)."""
    keys = g.masks._keys
    return not COMPILED_WALKS or (keys is not None and len(keys._any) > 0)


def test_closing_a_name_takes_the_declared_value():
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_json_schema(SCHEMA)
    tok = {t: i for i, t in enumerate(info.token_bytes) if t is not None}
    m = accept_bytes(g, '{"a')
    bits = allowed_set(m, info)
    assert bits[tok[b'b":1']] and not bits[tok[b'b":"']]  # "ab" takes an integer
    assert bits[tok[b'bc":"']] if b'bc":"' in tok else True
    m = accept_bytes(g, '{"')
    bits = allowed_set(m, info)
    assert bits[tok[b'ab":1']] and not bits[tok[b'ab":"']] and bits[tok[b'abc":"']]
    assert _key_states_used(g)


def test_masks_at_key_states_equal_brute_force():
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_json_schema(SCHEMA)
    # (inside "nest", a token may close a declared key, its value and the object: the
    # declared part's walk records where the object's rule returns)
    m = accept_bytes(g, '{"nest":{"a')
    bits = allowed_set(m, info)
    tok = {t: i for i, t in enumerate(info.token_bytes) if t is not None}
    assert bits[tok[b'b":"x"}}']] and bits[tok[b'b":"x"},"b']]
    for prefix in ('{"', '{"a', '{"ab', '{"abd', '{"ab":1,"', '{"nest":{"', '{"nest":{"a'):
        walk_checking_masks(accept_bytes(g, prefix), info, random.Random(len(prefix)), 10)
    for seed in range(4):
        walk_checking_masks(g.matcher(), info, random.Random(seed), 30)
    assert _key_states_used(g)


def test_masks_equal_the_whole_walk_on_a_real_tokenizer(llama):
    info, _compiler, tok = llama
    rng = random.Random(2)
    names = sorted({"".join(rng.choice("abcdefghij_") for _ in range(rng.randint(2, 12))) for _ in range(60)})
    schema = {"type": "object", "additionalProperties": True,
              "properties": {n: [{"type": "string", "maxLength": 128}, {"type": "integer"}, {"enum": ["on", "off"]},
                                 {"type": "object", "properties": {"id": {"type": "integer"}}}][i % 4]
                             for i, n in enumerate(names)}}
    values = ["x y", 7, "on", {"id": 3}]
    doc = {n: values[i % 4] for i, n in enumerate(names) if i % 3 == 0}
    doc["not_declared"] = [1, {"a": "b"}]
    text = json.dumps(doc, separators=(",", ":"))
    fast = GrammarCompiler(info).compile_json_schema(schema)
    whole = GrammarCompiler(info).compile_json_schema(schema)
    whole.masks._keys = None  # every abstract state walked as it is
    mf, mw = fast.matcher(), whole.matcher()
    for t in tok.encode(text, add_special_tokens=False).ids:
        assert (allowed_set(mf, info) == allowed_set(mw, info)).all()
        assert mf.accept_token(t) and mw.accept_token(t)
    assert mf.can_terminate() and _key_states_used(fast)


@needs_compiled_walks
def test_a_trie_whose_rules_do_not_fit_is_walked_whole():
    # key_trie.py takes any rules: here `rest` also takes a backslash and no DEL, unlike
    # a plain character then `rest` from a trie node, so the split does not hold and
    # key_rules.rules_fit refuses it; the masks are the whole walk's (brute force)
    from furca.constrain import key_trie

    from .test_key_tries import _compiled, _trie_grammar

    info = byte_info(['"', '":', "ab", "abc", "a", "b", "\\", "a\\", "\x7f"])
    g = _compiled(_trie_grammar(key_trie.keys(["a", "ab", "b c"], "key-rest", "key-other")), info)
    for seed in range(3):
        walk_checking_masks(g.matcher(), info, random.Random(seed), 12)
    fits = g.masks._keys._fits
    assert fits and not any(fits.values())
    g = GrammarCompiler(info).compile_json_schema(SCHEMA)
    walk_checking_masks(accept_bytes(g, '{"a'), info, random.Random(0), 4)
    assert g.masks._keys._fits and all(g.masks._keys._fits.values())


@needs_compiled_walks
def test_the_rules_check_is_shared_by_the_layout_across_grammars(monkeypatch):
    """Grammars of different lasting rules (different layouts) name the trie's rules by
    the same layout key (key_rules._layout_shape: the bodies' blocks and their calls),
    so the rules check of the first serves the second without walking the rules' NFA;
    the masks stay the whole walk's (brute force)."""
    from furca.constrain import key_rules

    info = byte_info(EXTRA)
    other = {"type": "object", "properties": {"n": {"type": "number"}, "q": {"type": "array"}},
             "additionalProperties": {"type": "boolean"}}
    g1 = GrammarCompiler(info, cache_size=0).compile_json_schema(SCHEMA)
    g2 = GrammarCompiler(info, cache_size=0).compile_json_schema(other)
    assert g1.automaton.nfa.layout is not g2.automaton.nfa.layout

    def key_of(g):
        nfa = g.automaton.nfa
        narrow_to, other_call, _inner = next(iter(nfa.key_trie_nodes.values()))
        return key_rules._layout_shape(nfa, (nfa.call[nfa.eps[narrow_to][0]][0], nfa.call[other_call][0]))

    assert key_of(g1) is not None and key_of(g1)[0] == key_of(g2)[0]
    walk_checking_masks(accept_bytes(g1, '{"a'), info, random.Random(0), 4)
    assert key_of(g1)[0] in key_rules._LAYOUT_FITS
    calls = []
    monkeypatch.setattr(key_rules, "_rules_shape", lambda *a: calls.append(a))
    monkeypatch.setattr(key_rules, "rules_fit", lambda *a: calls.append(a))
    walk_checking_masks(accept_bytes(g2, '{"'), info, random.Random(1), 6)
    assert g2.masks._keys._fits and all(g2.masks._keys._fits.values()) and not calls


@needs_compiled_walks
def test_the_rules_check_from_a_names_node_finds_the_tries_end(monkeypatch):
    """The rules check (key_rules.rules_fit) compares the trie's rules up to the trie's
    end. Where a process's first key state lies at a name's node that a longer name
    goes on from (its first token spells "ab" of "ab" and "abd"), the node has no
    closing quote of the trie's and none is found below it either: the end is the
    trie's (key_trie.trie_end), so the check passes, and what it caches for every
    grammar of the process is True (it was False: every grammar of those rules walked
    its key states whole)."""
    from furca.constrain import key_rules, key_trie

    info = byte_info(EXTRA)
    compiler = GrammarCompiler(info, cache_size=0)  # its lexeme grammar's key states checked first
    monkeypatch.setattr(key_rules, "_FITS", {})
    monkeypatch.setattr(key_rules, "_LAYOUT_FITS", {})
    g = compiler.compile_json_schema(SCHEMA)
    nfa = g.automaton.nfa
    quotes = [([t for lo, _hi, t in nfa.edges[k] if lo == 0x22], key_trie.trie_end(narrow_to))
              for k, (narrow_to, _other, _inner) in nfa.key_trie_nodes.items()]
    assert all(ts in ([], [end]) for ts, end in quotes) and any(ts for ts, _end in quotes)  # to the end, or none
    m = accept_bytes(g, '{"ab')  # at the node of "ab", a name below which "abd" goes on: its first mask
    walk_checking_masks(m, info, random.Random(0), 6)
    fits = g.masks._keys._fits
    assert fits and all(fits.values()) and all(v for v, _bodies in key_rules._LAYOUT_FITS.values())


# one object schema with a key trie, met at the root's member, in an array's items and one
# level deeper: its "any key" words are walked once with the object's frame cut and
# continued per context below the nodes where the object ends (KeyTrieMasks._any_key)
SHARED = {"$defs": {"env": {"type": "object", "properties": {"ab": {"type": "integer"}, "b": {"type": "string"}},
                            "additionalProperties": {"type": "string"}}},
          "type": "object",
          "properties": {"one": {"$ref": "#/$defs/env"},
                         "many": {"type": "array", "items": {"$ref": "#/$defs/env"}},
                         "deep": {"type": "object", "properties": {"env": {"$ref": "#/$defs/env"}}}},
          "additionalProperties": False}
ENDS = ['"}', '"},', '"}]', '"}}', '"},{"', 'x"}', 'x"},"', 'x"}]}', '":"x"}', '":"x"},', 'b":"x"}}', '"}],"']


def _counting_any_key_walks(g):
    """Counts the "any key" states walked (TokenMasks._compute_recorded, which only
    KeyTrieMasks.words calls) in the returned list."""
    walks, compute = [], g.masks._compute_recorded

    def counted(s):
        walks.append(s)
        return compute(s)
    g.masks._compute_recorded = counted
    return walks


def _contexts_shared(g, walks):
    """Whether "any key" words were made for more stacks than were walked: the other
    contexts' from the cut stack's (a key at the cut stack, one at another stack)."""
    a = g.automaton
    anys = g.masks._keys._any
    return not COMPILED_WALKS or len(anys) > len(walks) and any((n, a.cut) in anys and st != a.cut for n, st in anys)


def test_any_key_words_shared_across_contexts_equal_brute_force():
    info = byte_info(EXTRA + ENDS)
    g = GrammarCompiler(info).compile_json_schema(SHARED)
    walks = _counting_any_key_walks(g)
    prefixes = ('{"one":{"', '{"one":{"a', '{"many":[{"', '{"many":[{"b":"x"},{"', '{"deep":{"env":{"',
                '{"deep":{"env":{"ab":1,"', '{"one":{"b":"y","')
    for k, prefix in enumerate(prefixes):
        walk_checking_masks(accept_bytes(g, prefix), info, random.Random(k), 12)
    assert _contexts_shared(g, walks)


def test_any_key_words_shared_across_contexts_equal_the_whole_walk(llama):
    info, _compiler, tok = llama
    doc = {"one": {"ab": 1, "b": "s", "zz": "q"}, "many": [{"x": "1"}, {"ab": 2, "y": "2"}, {}],
           "deep": {"env": {"ab": 3, "k": "v"}}}
    fast = GrammarCompiler(info).compile_json_schema(SHARED)
    whole = GrammarCompiler(info).compile_json_schema(SHARED)
    whole.masks._keys = None  # every abstract state walked as it is
    walks = _counting_any_key_walks(fast)
    mf, mw = fast.matcher(), whole.matcher()
    for t in tok.encode(json.dumps(doc, separators=(",", ":")), add_special_tokens=False).ids:
        assert (allowed_set(mf, info) == allowed_set(mw, info)).all()
        assert mf.accept_token(t) and mw.accept_token(t)
    assert mf.can_terminate()
    assert _contexts_shared(fast, walks)


FREE_MEMBERS = [
    ({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}},
     ['{"name":"Ada","age":36,"nickname":"the \\"first\\"","x":"","y":[1,{"k":null}],"z":{}}'], {}),
    # free members in three objects of two shapes, nested: one "any key" continuation per object
    ({"type": "object", "properties": {
        "a": {"type": "object", "properties": {"id": {"type": "integer"}}},
        "b": {"type": "object", "properties": {"id": {"type": "integer"}}},
        "c": {"type": "object", "properties": {"tag": {"type": "string"}, "n": {"type": "number"}}}}},
     ['{"a":{"id":1,"x":"","y":{"z":[true]}},"b":{"id":2,"w":3.5},"c":{"tag":"t","n":-1e3,"q":null}}',
      '{"a":{"k":[]},"c":{"u":"","v":{}}}'], {}),
    # free members whose values have a schema of their own (not a lasting rule)
    ({"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     ['{"id":7,"note":"free text","":"","x\\"y":"z"}'], {}),
    # flexible whitespace: the declared names' literal walks (no split: the layout is open)
    ({"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}},
     ['{ "name": "Ada", "tags": [ "a", "b" ], "x": { "y": 1 } }', '{"name":"","extra":[]}'], {"whitespace": "flexible"}),
]


@pytest.mark.parametrize("case", range(len(FREE_MEMBERS)))
def test_free_members_values_equal_the_whole_walk(llama, case):
    """The "any key" continuation and the declared names' literal walks enter a member's
    value at `":` (any JSON value, a lexeme, a value of its own schema, nested objects):
    the masks along real instances equal those of every state walked as it is."""
    info, _compiler, tok = llama
    schema, texts, kw = FREE_MEMBERS[case]
    fast = GrammarCompiler(info).compile_json_schema(schema, **kw)
    whole = GrammarCompiler(info).compile_json_schema(schema, **kw)
    whole.masks._keys = None  # every abstract state walked as it is
    for text in texts:
        mf, mw = fast.matcher(), whole.matcher()
        for t in tok.encode(text, add_special_tokens=False).ids:
            assert (allowed_set(mf, info) == allowed_set(mw, info)).all(), (text, t)
            assert mf.accept_token(t) and mw.accept_token(t)
        assert mf.can_terminate() and mw.can_terminate()
    assert _key_states_used(fast)


@pytest.mark.parametrize("path", ["kernel", "kernel stopped", "return nodes past the buffer", "python"])
def test_key_state_masks_along_nested_objects_equal_the_whole_walk(llama, monkeypatch, path):
    """A key state's mask in the row kernel's two calls (core_rows.Core.key_split and
    key_words: the split, the closers cleared, the declared names' literals and their
    continuation walks), in Python where the kernel stops (a row budget of one row a
    call: the key states whose walks make more; a buffer of no return node, which
    the kernel reports full), and without the kernel (the
    declared names' plain runs walked once per NFA node and trie, served to every key
    state that holds them): the items of an array (other stacks), the keys left after a
    member, nested objects of the same properties. The masks along real instances equal
    the whole walk's."""
    from furca.constrain import core_rows, key_masks

    if path == "python":
        monkeypatch.setenv("FURCA_CORE", "0")
    elif path == "kernel stopped":
        monkeypatch.setattr(core_rows, "WALK_ROWS", 1)
    info, _compiler, tok = llama
    item = {"type": "object", "additionalProperties": True,
            "properties": {"alpha": {"type": "integer"}, "alphabet": {"type": "string"}, "beta": {"type": "boolean"},
                           "kids": {"type": "array", "items": {"$ref": "#/$defs/kid"}}}}
    schema = {"type": "array", "items": item,
              "$defs": {"kid": {"type": "object", "properties": {"alpha": {"type": "integer"}, "gamma": {"type": "null"}}}}}
    doc = [{"alpha": 1, "beta": True}, {"alphabet": "x", "beta": False, "kids": [{"gamma": None}, {"alpha": 2}]},
           {"alpha": 4, "kids": [], "zeta": 3}]  # the declared names in their order (as the compiler keeps them)
    fast = GrammarCompiler(info).compile_json_schema(schema)
    whole = GrammarCompiler(info).compile_json_schema(schema)
    whole.masks._keys = None  # every abstract state walked as it is
    calls, kernel = [], []
    run = key_masks.KeyTrieMasks._plain_run
    monkeypatch.setattr(key_masks.KeyTrieMasks, "_plain_run", lambda self, n, t: calls.append(n) or run(self, n, t))
    key_words = core_rows.Core.key_words

    def counted(self, *args):
        if path == "return nodes past the buffer":
            self._krec, self._kfound = np.zeros(self._key_rec, np.int32), np.empty(0, np.int32)
        kernel.append(key_words(self, *args))
        return kernel[-1]

    monkeypatch.setattr(core_rows.Core, "key_words", counted)
    mf, mw = fast.matcher(), whole.matcher()
    for t in tok.encode(json.dumps(doc, separators=(",", ":")), add_special_tokens=False).ids:
        assert (allowed_set(mf, info) == allowed_set(mw, info)).all()
        assert mf.accept_token(t) and mw.accept_token(t)
    assert mf.can_terminate()
    if not COMPILED_WALKS:  # the key states' split (key tries) runs on the compiled walks only
        return
    done = sum(r is not None for r in kernel)
    if path == "kernel":
        assert done >= 10 and done == len(kernel) and not calls, (done, len(kernel), len(calls))
    elif path != "python":  # the kernel's stops walked in Python
        assert len(kernel) > done and calls, (done, len(kernel), len(calls))
    else:
        runs = fast.masks._keys._plain
        assert not kernel and runs and len(calls) > len(runs)  # runs served again from the cache


@needs_compiled_walks
def test_the_compile_makes_each_tries_any_key_words(monkeypatch):
    """The compile makes the "any key" words of each trie at the cut stack (KeyTrieMasks
    .prepare), so a key state's first mask walks none: only the narrow part and the
    continuation per context are left to the steps. The masks stay brute force's."""
    info = byte_info(EXTRA + ENDS)
    g = GrammarCompiler(info).compile_json_schema(SHARED)
    a, keys = g.automaton, g.masks._keys
    tries = {v[0] for v in a.nfa.key_trie_nodes.values()}
    assert tries and {(n, a.cut) for n in tries} <= set(keys._any)
    assert g.masks.mask_bytes >= keys.nbytes > 0
    walks = _counting_any_key_walks(g)
    for k, prefix in enumerate(('{"one":{"', '{"one":{"a', '{"many":[{"', '{"deep":{"env":{"ab":1,"')):
        walk_checking_masks(accept_bytes(g, prefix), info, random.Random(k), 12)
    assert not walks  # each context's words continued from the cut stack's, none walked again


@needs_compiled_walks
def test_the_compile_prepares_at_most_its_bound_of_tries(monkeypatch):
    from furca.constrain import key_masks

    info = byte_info(EXTRA)
    monkeypatch.setattr(key_masks, "PREPARED_TRIES", 1)
    g = GrammarCompiler(info).compile_json_schema(SCHEMA)  # two tries: the root's and "nest"'s

    def prepared():
        return {n for n, st in g.masks._keys._any if st == g.automaton.cut}

    assert len({v[0] for v in g.automaton.nfa.key_trie_nodes.values()}) == 2
    root = prepared()
    assert len(root) == 1
    walk_checking_masks(accept_bytes(g, '{"a'), info, random.Random(0), 8)
    assert prepared() == root  # the root object's trie: the outermost, prepared first
    walk_checking_masks(accept_bytes(g, '{"nest":{"a'), info, random.Random(0), 8)  # "nest"'s made in a step
    assert len(prepared()) == 2


@needs_compiled_walks
def test_a_limit_met_while_preparing_leaves_the_compile_and_the_masks_whole(monkeypatch):
    """A state past a limit (automaton.AutomatonLimit) met while the compile makes the
    "any key" words stops that work, not the compile: the step that needs the words
    makes them as before."""
    from furca.constrain import key_masks
    from furca.constrain.stacks import AutomatonLimit

    info = byte_info(EXTRA)
    compiler = GrammarCompiler(info)  # the process's lexeme grammar compiled first, unlimited
    compiling = [True]
    any_key = key_masks.KeyTrieMasks._any_key

    def limited(self, *args):
        if compiling[0]:
            raise AutomatonLimit("too many states")
        return any_key(self, *args)

    monkeypatch.setattr(key_masks.KeyTrieMasks, "_any_key", limited)
    g = compiler.compile_json_schema(SCHEMA)
    compiling[0] = False
    assert not g.masks._keys._any
    for k, prefix in enumerate(('{"', '{"a', '{"nest":{"')):
        walk_checking_masks(accept_bytes(g, prefix), info, random.Random(k), 10)
    assert g.masks._keys._any
