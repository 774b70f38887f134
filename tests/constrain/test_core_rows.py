"""The row kernel (core_rows.py; FURCA_CORE=0 turns it off) against rows.py on real grammars: every
10th schema of the in-repo MaskBench sample compiled twice, the kernel on from each
grammar's first row and off, each valid instance walked token by token on the Llama-3.1
tokenizer: the masks of every step equal, the same tokens accepted, the same number of
automaton states (the kernel's rows, canonical forms and walks make the same states as
Python's). The rows themselves are compared byte by byte in test_rows.py and
test_expand_plans.py."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from furca.constrain import GrammarCompiler, automaton, core_keys, core_rows, lexeme_masks
from furca.constrain.key_masks import KeyTrieMasks
from furca.constrain.lexeme_masks import lexeme_key
from furca.constrain.nfa import closed_layout_size
from furca.errors import CompileError

from .test_json_schema_helpers import instance_text, maskbench_cases


@pytest.fixture
def kernel_on(llama, monkeypatch):
    """llama's (info, compiler, tokenizer), the kernel on from each grammar's first row
    (skipped without numba)."""
    monkeypatch.setenv("FURCA_CORE", "1")
    if not core_rows.enabled():
        pytest.skip("numba is not installed (or FURCA_NO_NUMBA is set)")
    monkeypatch.setattr(automaton, "CORE_AFTER", 0)
    return llama


def _walks(info, tok, schema, tests):
    """(the masks of every step of every valid instance, accepted flags, automaton) of a
    fresh compile (the kernel as the environment says)."""
    g = GrammarCompiler(info).compile_json_schema(schema)
    masks, accepted = [], []
    for test in tests:
        if test["valid"]:
            m, ok = _decode_steps(g, info, tok.encode(instance_text(test["data"], schema), add_special_tokens=False).ids)
            masks += m
            accepted += ok
    return masks, accepted, g.automaton


def _decode_steps(g, info, ids):
    """(the mask before each step, whether the step's token was accepted) of ids then EOS
    decoded through a new matcher of g, up to the first token refused."""
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    m = g.matcher()
    masks, accepted = [], []
    for t in ids + [info.eos_token_id]:
        m.fill_bitmask(bm)
        masks.append(bm.copy())
        ok = m.accept_token(t)
        accepted.append(ok)
        if not ok:
            break
    return masks, accepted


def test_kernel_rows_give_the_same_masks(kernel_on, monkeypatch):
    info, _compiler, tok = kernel_on
    # the same states too: a state of literals walked down their bytes (Core.literal_words,
    # the kernel's only) makes fewer; test_literal_masks.py compares its masks
    monkeypatch.setattr(core_keys, "LITERAL_MIN", 10**9)
    # both runs read the process's shared lexeme masks as they are, and neither adds to
    # them: a mask the first run shared would save the second its states (the store
    # holds what earlier tests left, other tokenizers' entries too, up to its bound)
    monkeypatch.setattr(lexeme_masks, "MAX_LEXEME_MASKS", 0)
    compared = kernel_states = 0
    for name, schema, tests in list(maskbench_cases())[::10]:
        monkeypatch.setenv("FURCA_CORE", "1")
        try:
            on = _walks(info, tok, schema, tests)
        except CompileError:
            continue
        monkeypatch.setenv("FURCA_CORE", "0")
        off = _walks(info, tok, schema, tests)
        assert on[2].core is not None and off[2].core is None
        assert on[1] == off[1], name
        assert len(on[0]) == len(off[0]) and all(np.array_equal(x, y) for x, y in zip(on[0], off[0])), name
        assert on[2].num_states == off[2].num_states, name
        compared += len(on[0])
        kernel_states += int(on[2].core.cnt[2])  # the states the kernel tables hold
    assert compared > 500 and kernel_states > 500, (compared, kernel_states)


def test_bounds_past_int32_leave_the_grammar_to_python(kernel_on):
    # a counter bound the kernel's int32 tables cannot hold (a hostile maxLength): the
    # grammar gets no kernel and rows.py computes its rows, its masks as usual
    info, _compiler, tok = kernel_on
    g = GrammarCompiler(info).compile_json_schema({"type": "string", "maxLength": 10**20})
    assert g.automaton.core is None and g.automaton._rows_to_core == -1
    m = g.matcher()
    assert m.accept_string('"' + "ab" * 40 + '"') and m.can_terminate()
    g2 = GrammarCompiler(info).compile_json_schema({"type": "string", "maxLength": 300})
    assert g2.automaton.core is not None


def _decode(g, info, tok, schema, tests):
    """Each valid instance of tests decoded through g, token by token (mask, accept)."""
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    for test in tests:
        if test["valid"]:
            m = g.matcher()
            for t in tok.encode(instance_text(test["data"], schema), add_special_tokens=False).ids:
                m.fill_bitmask(bm)
                if not m.accept_token(t):
                    break


def _decoded(info, tok, first=None, every=40):
    """The automata of `first` (schema, tests), if given, and of every `every`-th in-repo
    MaskBench case, each after its valid instances decoded (the states a decode meets),
    with a kernel."""
    cases = [(schema, tests) for _name, schema, tests in list(maskbench_cases())[::every]]
    for schema, tests in ([first] if first else []) + cases:
        try:
            g = GrammarCompiler(info).compile_json_schema(schema)
        except CompileError:
            continue
        _decode(g, info, tok, schema, tests)
        assert g.automaton.core is not None
        yield g.automaton


def test_kernel_byte_steps_are_pythons(kernel_on):
    # a state without a row stepped over one byte (automaton._step_byte: accept_token's
    # path through abstract states, a walk's counter state past its room): the kernel's
    # successor (core_rows.Core.step_byte) is the very state rows.py's bucket of that
    # byte gives (the same id: both intern into one automaton), for every byte of the
    # row-less states of grammars with calls, counters and length regions
    info, _compiler, tok = kernel_on
    first = ({"type": "object", "properties": {"a": {"type": "string", "minLength": 2, "maxLength": 9},
                                               "b": {"type": "array", "items": {"type": "integer"}, "maxItems": 4},
                                               "c": {"type": "string", "pattern": "^[a-z]{2,5}-[0-9]+$"}},
              "required": ["a"]}, [{"valid": True, "data": {"a": "xyzzy", "b": [1, 22, 333], "c": "abc-42"}}])
    compared = kernel_made = 0
    for a in _decoded(info, tok, first):  # the states a decode meets: rows, row-less states stepped through
        core = a.core
        kernel_step = core.step_byte
        rowless = [s for s in range(1, a.num_states) if not a.expanded[s] and not a.walkable[s]][:30]
        for s in rowless:
            for b in range(256):
                n0 = a.num_states
                t = kernel_step(a, s, b)
                assert t >= 0
                kernel_made += a.num_states - n0
                core.step_byte, a._byte_steps = lambda *_: -1, {}  # rows.py's bucket (interning as ever)
                try:
                    assert a._step_byte(s, b) == t, (s, b)
                finally:
                    del core.step_byte
                compared += 1
    assert compared > 5000 and kernel_made > 50, (compared, kernel_made)


def test_kernel_abstract_states_are_pythons(kernel_on):
    # a state's base frame and its abstract state (automaton.abstract: the configurations
    # rebased from the base onto the context frame, interned), and back (_step_abstract:
    # from the context frame onto the base) made in the kernel (core_rows.Core.base /
    # rebased) are Python's: the same base, the very state stacks.rebased and intern give
    info, _compiler, tok = kernel_on
    first = ({"type": "array", "items": {"type": "object", "properties": {
        "a": {"type": "string", "maxLength": 9}, "b": {"type": "array", "items": {"type": "integer"}, "maxItems": 4}}}},
        [{"valid": True, "data": [{"a": "xy", "b": [1, 22]}, {"b": [3]}, {}]}])
    compared = back = 0
    for a in _decoded(info, tok, first):
        core = a.core
        for s in range(1, min(a.num_states, 400)):
            base = core.base(a, s)
            configs = a.configs[s]
            assert base == a._base(configs), s
            if not base or a.stacks.frames[base][0] == automaton.CUT_RET:
                continue
            t = core.rebased(a, s, base, a.cut)
            assert t == a.intern(a.stacks.rebased(configs, base, a.cut), False), s
            if a._base(a.configs[t]) == a.cut:  # the abstract state stepped back onto its base
                assert core.rebased(a, t, a.cut, base) == a.intern(a.stacks.rebased(a.configs[t], a.cut, base), False)
                back += 1
            compared += 1
    assert compared > 200 and back > 100, (compared, back)


def test_kernel_layout_check_is_the_lexeme_keys(kernel_on):
    # core_rows.Core.in_layout tells, from the kernel's tables, the abstract states that
    # lie wholly in the layout of lasting rules: exactly those lexeme_masks.lexeme_key keys
    # (the others, most of them, are told without reading their configurations)
    info, _compiler, tok = kernel_on
    keyed = unkeyed = 0
    for _name, schema, tests in list(maskbench_cases())[::20]:
        try:
            g = GrammarCompiler(info).compile_json_schema(schema)
        except CompileError:
            continue
        _decode(g, info, tok, schema, tests)
        a, lay = g.automaton, g.automaton.nfa.layout
        if lay is None or not lay.closed:
            continue
        core = a.core
        for s in range(1, a.num_states):
            a.core = None  # Python's key alone
            try:
                ref = lexeme_key(g.automaton, s)
            finally:
                a.core = core
            assert core.in_layout(a, s, lay.size) == (ref is not None), s
            assert lexeme_key(g.automaton, s) == ref
            keyed += ref is not None
            unkeyed += ref is None
    assert keyed > 20 and unkeyed > 500, (keyed, unkeyed)


def test_the_compilers_warm_up_loads_every_kernel_python_calls(kernel_on):
    # each kernel Python calls is loaded (compiled, or read from numba's disk cache: 0.1-1
    # s) by the compiler's warm-up, with the argument types requests call it with: a
    # request's step never waits on it (a byte step's kernel first loaded inside a decode
    # step cost it 1 s, read from the disk cache 14 ms). In a fresh process: the warm-up
    # alone; here: decodes add no signature
    info, _compiler, tok = kernel_on
    names = ("K.row, K.step_byte, K.step_bytes, T.insert_stacks, T.insert_states, T.intern, K.after_return, "
             "W.walk_roots_core, W.state_wide, W.state_depth, W.state_base, W.rebase_state, "
             "W.state_in_layout, S.sparse_words, S.clear_bits, Y.split_key, Y.key_words, Z.string_table, "
             "Z.len_levels, Z.set_bits, Z.by_length")
    code = ("from furca.constrain import GrammarCompiler, TokenizerInfo, _core_kernels as K, _core_tables as T, "
            "_core_walk_kernels as W, _walk_kernels as S, _key_kernels as Y, _string_kernels as Z\n"
            "from constrain.tokenizers_cache import tokenizer_json\n"
            "path, eos = tokenizer_json('llama3_1')\n"
            "GrammarCompiler(TokenizerInfo.from_tokenizer_json(path, eos_token=eos))\n"
            f"print([len(k.signatures) for k in ({names})])\n")
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "FURCA_CORE": "1",
           "PYTHONPATH": os.pathsep.join([tests_dir, os.path.dirname(tests_dir), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    fresh = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(fresh) == 21 and all(fresh), fresh
    from furca.constrain import _core_kernels as K, _core_tables as T, _core_walk_kernels as W  # noqa: N812
    from furca.constrain import _key_kernels as Y, _string_kernels as Z, _walk_kernels as S  # noqa: N812

    called = [K.row, K.step_byte, K.step_bytes, T.insert_stacks, T.insert_states, T.intern, K.after_return,
              W.walk_roots_core, W.state_wide, W.state_depth, W.state_base, W.rebase_state,
              W.state_in_layout, S.sparse_words, S.clear_bits, Y.split_key, Y.key_words, Z.string_table,
              Z.len_levels, Z.set_bits, Z.by_length]  # as names
    GrammarCompiler(info)
    loaded = [len(k.signatures) for k in called]
    for _a in _decoded(info, tok, every=25):
        pass
    assert [len(k.signatures) for k in called] == loaded


def test_the_kernels_states_are_read_when_python_needs_them(kernel_on):
    # the states the kernel makes stay in its table until Python reads them
    # (automaton._Configs: most never are); read, each is the configurations it was
    # interned with, and interning them again (Python's own states go through the
    # kernel's table too: core_rows.Core.intern) gives its id back: no state has two ids
    info, _compiler, tok = kernel_on
    unread = checked = 0
    for a in _decoded(info, tok, every=20):
        raw = [list.__getitem__(a.configs, s) for s in range(a.num_states)]
        unread += sum(x is None for x in raw)
        keys = set()
        for s in range(a.num_states):
            cfg = a.configs[s]
            assert cfg == tuple(sorted(cfg)) and a.intern(cfg, a.accepting[s]) == s, (s, cfg)
            keys.add((cfg, a.accepting[s]))
            checked += 1
        assert len(keys) == a.num_states
        assert all(list.__getitem__(a.configs, s) is not None for s in range(a.num_states))
    assert checked > 2000 and unread > checked // 4, (checked, unread)


def test_kernel_rows_of_states_of_many_configurations(kernel_on, monkeypatch):
    # an object of 150 declared names and any other key (Snowplow sp_138's shape): its key
    # states hold a configuration per name that the prefix still allows, over 64 of them;
    # the kernel makes their rows (up to its 256: Core.sts), the masks and states as
    # rows.py's
    from furca.constrain import rows

    info, _compiler, tok = kernel_on
    names = [f"{a}{b}_field" for a in "abcdefghijklmno" for b in "pqrstuvwxy"]
    schema = {"type": "object", "additionalProperties": True,
              "properties": {n: {"type": "string", "maxLength": 255} for n in names}}
    tests = [{"valid": True, "data": {"ap_field": "x", "bq_field": "yy", "zz ": {"k": [1, "v"]}}},
             {"valid": True, "data": {"cr_field": "é", "other": None}}]
    python_rows = []
    multi = rows.Rows.multi
    monkeypatch.setattr(rows.Rows, "multi", lambda self, a, s, configs: python_rows.append(len(configs)) or
                        multi(self, a, s, configs))
    on = _walks(info, tok, schema, tests)
    a = on[2]
    big = [s for s in range(a.num_states) if a.expanded[s] and a.configs[s] and len(a.configs[s]) > 64]
    assert big and not [n for n in python_rows if n > 64], python_rows
    monkeypatch.setenv("FURCA_CORE", "0")
    off = _walks(info, tok, schema, tests)
    assert on[1] == off[1] and all(on[1])
    assert all(np.array_equal(x, y) for x, y in zip(on[0], off[0]))
    assert a.num_states == off[2].num_states


def test_kernel_returns_through_frames_are_pythons(kernel_on):
    # the state after a rule end returns through a frame (automaton.after_return: the
    # masks' continuation states and the key tries' "any key"): the
    # kernel's (core_rows.Core.after_return) is the very state closures.py gives, for
    # every call, counter (items, characters) and length frame of decoded grammars
    info, _compiler, tok = kernel_on
    first = ({"type": "object", "properties": {"a": {"type": "string", "minLength": 2, "maxLength": 300},
                                               "b": {"type": "array", "items": {"type": "integer"},
                                                     "minItems": 1, "maxItems": 40},
                                               "c": {"type": "string", "pattern": "^[a-z]{2,50}-[0-9]+$"},
                                               "d": {"type": "string", "pattern": "^[a-z]+-[0-9]+$", "minLength": 3,
                                                     "maxLength": 40}},
              "required": ["a"]},
             [{"valid": True, "data": {"a": "xyzzy" * 9, "b": list(range(0, 300, 11)), "c": "abcdefghijk-42",
                                       "d": "abc-12"}}])
    compared, kinds = 0, set()
    for a in _decoded(info, tok, first):
        core = a.core
        frames = [x for x, (ret, _p, _k) in enumerate(a.stacks.frames) if x and ret >= 0][:400]
        for x in frames:
            t = core.after_return(a, x)
            assert t >= 0
            core.after_return = lambda *_: -1  # closures.py's (interning as ever: one id a state)
            try:
                assert a.after_return(x) == t, x
            finally:
                del core.after_return
            ret, _p, k = a.stacks.frames[x]
            kinds.add("call" if not k else "length" if ret in a.nfa.length else "counter")
            compared += 1
    assert compared > 150 and kinds == {"call", "length", "counter"}, (compared, kinds)


def test_kernel_state_tests_are_pythons(kernel_on):
    # masks.TokenMasks._wide, the deepest stack (compiled.limit_check) and a key trie
    # state's split (key_masks.KeyTrieMasks.split) read off the kernel's tables, without
    # the configurations' tuples (core_rows.Core.wide, depth, key_split), against
    # Python's over every state of decoded grammars, with and without key tries and
    # patterns
    info, _compiler, tok = kernel_on
    checked = wide = deep = split = 0
    for name, schema, tests in list(maskbench_cases())[3::25]:
        try:
            _masks, _accepted, a = _walks(info, tok, schema, tests)
        except CompileError:
            continue
        node_bytes = {}
        keys = KeyTrieMasks(a) if a.nfa.key_trie_nodes else None

        def takes(n):
            if n not in node_bytes:
                node_bytes[n] = sum((1 << (hi + 1)) - (1 << lo) for lo, hi, _t in a.nfa.edges[n])
            return node_bytes[n]

        lasting = closed_layout_size(a.nfa)
        for s in range(a.num_states):
            bits = 0
            for n, _st in a.configs[s]:
                bits |= takes(n)
            inside = all(n < lasting for n, _st in a.configs[s])  # in the lasting rules: "a" and "A" suffice
            want = bool(bits >> 0x61 & (bits >> 0x20 | bits >> 0x30 | bits >> 0x41 & inside) & 1)
            assert a.core.wide(a, s) == want, (name, s)
            depth = max((a.stacks.depth[st] for _n, st in a.configs[s]), default=0)
            assert a.core.depth(a, s) == depth, (name, s)
            if keys is not None:  # the key trie's split from the tables, as from the configurations
                got, exp = keys.split(s), keys._split_configs(s)
                if exp is not None:
                    exp = (exp[0], exp[1], [n << 32 | st for n, st in exp[2]])
                    got = (got[0], got[1], got[2].tolist())
                assert got == exp, (name, s)
                split += exp is not None
            checked += 1
            wide += want
            deep += depth > 2
    assert checked > 2000 and wide > 100 and deep > 100 and split > 20, (checked, wide, deep, split)


def test_matchers_of_one_grammar_in_threads_fill_the_masks_of_one_thread(kernel_on):
    # the server fills the masks of a batch on worker threads: matchers of one grammar
    # decode at once, their new masks made under the automaton's lock, the warm fills
    # and the nesting check (compiled.limit_check, which reads the kernel's tables) not;
    # the masks of every step equal those of the same instances decoded one by one
    import threading

    info, _compiler, tok = kernel_on
    cases = [(schema, [t for t in tests if t["valid"]]) for _n, schema, tests in list(maskbench_cases())[1::3]]
    cases = [(schema, valid) for schema, valid in cases if len(valid) >= 2][:4]
    assert len(cases) == 4
    for schema, valid in cases:
        texts = [tok.encode(instance_text(t["data"], schema), add_special_tokens=False).ids for t in valid] * 2
        want = [_decode_steps(GrammarCompiler(info).compile_json_schema(schema), info, ids) for ids in texts]
        g = GrammarCompiler(info).compile_json_schema(schema)
        got, errors = [None] * len(texts), []

        def work(k):
            try:
                got[k] = _decode_steps(g, info, texts[k])
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(len(texts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for k, ((x, ok_x), (y, ok_y)) in enumerate(zip(got, want)):
            assert all(ok_x) and all(ok_y), k  # every token of the valid instances accepted
            assert len(x) == len(y) and all(np.array_equal(p, q) for p, q in zip(x, y)), k


LOOPING = [  # (regex, text): states that lead back to themselves on most of a subtree's bytes
    (r"[A-Za-z]+", "Hello"),
    (r"[A-Za-z]{1,50}", "Hello"),  # a counter: its canonical forms loop (short[])
    (r"[a-z0-9_]{3,40}@[a-z]+\.com", "john_smith42@example.com"),
    (r'"[^"\\]{0,40}"', '"The quick brown fox"'),  # JSON string content under a length bound
    (r"[!-~]{1,300}", "a+b=c;d/e?f"),  # ASCII without a space, past the counter's short forms
]


@pytest.mark.parametrize("pattern,text", LOOPING)
def test_walks_through_looping_states_are_pythons(kernel_on, monkeypatch, pattern, text):
    """The kernel walk takes the subtree of a trie node whole where its state leads back to
    itself on every byte below (walk_roots_core's loops_over): the masks of every step, the
    tokens accepted and the states made equal Python's walk of every node."""
    info, _compiler, tok = kernel_on
    ids = tok.encode(text, add_special_tokens=False).ids
    runs = []
    for core in ("1", "0"):
        monkeypatch.setenv("FURCA_CORE", core)
        g = GrammarCompiler(info).compile_regex(pattern)
        runs.append((*_decode_steps(g, info, ids), g.automaton))
    (on, ok_on, a_on), (off, ok_off, a_off) = runs
    assert a_on.core is not None and a_off.core is None
    assert ok_on == ok_off and all(ok_on[:-1]), pattern
    assert len(on) == len(off) and all(np.array_equal(x, y) for x, y in zip(on, off)), pattern
    assert a_on.num_states == a_off.num_states, pattern


def test_subtree_bytes_are_the_bytes_below_each_node():
    """token_trie.subtree_bytes against the bytes of every node's subtree, one by one."""
    from furca.constrain.token_trie import TokenTrie

    words = [b"a", b"ab", b"abc", b"ab\x00", b"b\xc3\xa9", b"b~", b"~\x7f", b"zz{", b"A"]
    t = TokenTrie(words)
    for n in range(t.num_nodes):
        lo = hi = 0
        for i in range(n + 1, int(t.dfs_end[n])):
            b = int(t.dfs_byte[i])
            b = b if 1 <= b <= 126 else 0
            if b < 64:
                lo |= 1 << b
            else:
                hi |= 1 << (b - 64)
        assert (int(t.below[n, 0]), int(t.below[n, 1])) == (lo, hi), n


def test_root_child_is_each_first_bytes_node():
    """token_trie.TokenTrie.root_child: the DFS node of the root's child on each byte, -1
    where no token starts with it."""
    from furca.constrain.token_trie import TokenTrie

    t = TokenTrie([b"b", b"ab", b"abc", b"\xc3\xa9", b"zz", None, b"b~"])
    expect = {int(t.dfs_byte[n]): n for n in range(1, t.num_nodes) if t.dfs_depth[n] == 1}
    assert sorted(expect) == [ord("a"), ord("b"), ord("z"), 0xC3]
    assert [int(x) for x in t.root_child] == [expect.get(b, -1) for b in range(256)]


@pytest.mark.parametrize("pattern", [r"(ab|b~|zz)+", r"[a-z]{2,6}", r"(é|zz|b)*ab?", r"\{\"[ab]+\":1\}"])
def test_walks_from_the_root_skip_its_dead_children(kernel_on, monkeypatch, pattern):
    """A kernel walk of the whole trie goes from one child of the root to the next through
    its state's row (root_child), reading no node of a child the row kills, over a
    vocabulary where most bytes start no token (root_child -1): at every step of random
    walks the mask is exactly the tokens accept_token takes (and EOS where the matcher may
    end), and the same as Python's walk of every node."""
    import random

    from furca.constrain import TokenizerInfo

    toks = [b"a", b"b", b"ab", b"ba", b"abab", b"b~", b"zz", b"z", b"{", b"{\"", b"\"", b"\":", b"1", b"}", b"1}",
            b"\xc3\xa9", b"\xc3\xa9zz", b"~", None]
    eos = len(toks) - 1
    runs = []
    for core in ("1", "0"):
        monkeypatch.setenv("FURCA_CORE", core)
        info = TokenizerInfo(toks, [eos], vocab_size=32)
        g = GrammarCompiler(info).compile_regex(pattern)
        rng, seen = random.Random(7), []
        for _walk in range(6):
            m = g.matcher()
            for _ in range(12):
                bm = np.zeros((1, info.num_words), dtype=np.int32)
                m.fill_bitmask(bm)
                bits = np.unpackbits(bm.view(np.uint8), bitorder="little")[: len(toks)].astype(bool)
                ref = np.array([m.fork().accept_token(t) for t in range(len(toks))])
                ref[eos] = m.can_terminate()
                assert (bits == ref).all(), (pattern, np.flatnonzero(bits != ref))
                seen.append(bits)
                live = [t for t in np.flatnonzero(bits) if t != eos]
                if not live:
                    break
                assert m.accept_token(int(rng.choice(live)))
        runs.append((seen, g.automaton))
    (on, a_on), (off, a_off) = runs
    assert a_on.core is not None and a_off.core is None
    assert len(on) == len(off) and all(np.array_equal(x, y) for x, y in zip(on, off)), pattern


def test_packed_layouts_are_the_packs_of_their_nodes(kernel_on):
    """core_pack.pack with the lasting rules' edges from their layout (layout_edges, packed
    once per layout) is the array packed from every node's own edges, on the grammars of
    every 10th schema of the in-repo MaskBench sample, ten of them or more with a layout."""
    from furca.constrain.core_pack import pack

    info, _compiler, _tok = kernel_on
    with_layout = 0
    for _name, schema, _tests in list(maskbench_cases())[::10]:
        try:
            nfa = GrammarCompiler(info).compile_json_schema(schema).automaton.nfa
        except CompileError:
            continue
        got = pack(nfa)
        lay, nfa.layout = nfa.layout, None
        try:
            assert np.array_equal(got, pack(nfa)), _name
        finally:
            nfa.layout = lay
        if lay is not None:
            with_layout += 1
            assert lay.packed is not None and not lay.packed[1].flags.writeable
    assert with_layout >= 10, with_layout
