"""Bounded strings' abstract masks from the tokenizer's tables (string_counters.py): the
table reads each token as string content, and every abstract state it serves gets the
words and return nodes the recording walk gives (byte-level tokens with quotes, escapes
and wide characters; the Llama-3.1 tokenizer), masks equal to brute force."""

import json
import random

import numpy as np
import pytest

from furca.constrain import GrammarCompiler, string_counters

from .conftest import accept_bytes, byte_info, needs_compiled_walks, walk_checking_masks

pytestmark = needs_compiled_walks

EXTRA = ["ab", 'a"', '",', '"}', "\\n", "\\", "a\\", "\\u00e9", "\\u0", "é", "日本", "\u00e9\"", "a b c d e f",
         "xyz" * 7, '\\"', "\x01a", "abc", '"a', "\xe6"]


def _path(trie, x):
    """The bytes of DFS node x of a token trie."""
    out = []
    while x:
        out.append(int(trie.dfs_byte[x]))
        x = int(trie.dfs_parent[x])
    return bytes(reversed(out))


def _served_against_walks(g):
    """Every abstract state the tables serve in g so far, against the recording walk (the
    tables off): (states compared, states served)."""
    masks, a = g.masks, g.automaton
    bounded, served = masks.bounded, 0
    info = a.info
    for ab in range(1, a.num_states):
        if not a.configs[ab]:
            continue
        for trie in (info.trie, info.long_trie):
            got = bounded.part(ab, trie)
            if got is None:
                continue
            served += 1
            masks.bounded = None
            try:
                if trie is info.trie:
                    ref_words, ref_roots, ref_trie, _base = masks._compute_mask(ab, record=True)
                else:
                    ref_words = np.zeros(info.num_words, np.uint32)
                    ref_roots = string_counters_walk(a, ab, trie, ref_words)
                    ref_trie = trie
            finally:
                masks.bounded = bounded
            words, roots, _trie, base = got
            assert np.array_equal(words, ref_words), (ab, a.configs[ab])
            assert ({_path(trie, x) for x in roots.tolist()}
                    == {_path(ref_trie, x) for x in ref_roots.tolist()}), (ab, a.configs[ab])
            assert base is None or not base.flags.writeable
    return served


def string_counters_walk(a, ab, trie, words):
    from furca.constrain.trie_walks import walk_recording

    return walk_recording(a, ab, trie, words)


@pytest.mark.parametrize("lo,hi", [(0, 40), (36, 36), (20, 300), (1, 17), (3, 25), (0, 5), (4, 4)])
def test_abstract_masks_from_the_table_equal_the_recording_walks(lo, hi):
    info = byte_info(EXTRA)
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": lo, "maxLength": hi},
                                               "n": {"type": "integer"}}, "required": ["s", "n"],
              "additionalProperties": False}
    g = GrammarCompiler(info).compile_json_schema(schema)
    rng = random.Random(lo * 1000 + hi)
    for text in ['{"s":"' + "a" * k for k in (0, 1, lo // 2, max(lo - 1, 0), lo, hi - 2, hi - 1, hi)]:
        if len(text) - 6 <= hi:
            walk_checking_masks(accept_bytes(g, text), info, rng, 6)
    assert _served_against_walks(g) >= 5


def test_a_pattern_counter_and_the_real_tokenizer(llama):
    info, compiler, tok = llama
    schema = {"type": "object", "properties": {
        "id": {"type": "string", "minLength": 36, "maxLength": 36},
        "w": {"type": "string", "pattern": "^[a-z0-9]{1,64}$"},
        "t": {"type": "string", "maxLength": 300}}, "required": ["id", "w", "t"], "additionalProperties": False}
    g = GrammarCompiler(info).compile_json_schema(schema)
    value = {"id": "123e4567-e89b-12d3-a456-426614174000", "w": "abc123xyz",
             "t": "Some text, \"quoted\" \u00e9\u65e5\u672c and\nmore " * 3}
    m = g.matcher()
    bm = np.zeros((1, info.num_words), np.int32)
    for t in tok.encode(json.dumps(value, ensure_ascii=False, separators=(",", ":")), add_special_tokens=False).ids:
        m.fill_bitmask(bm)
        assert bm[0, t >> 5] >> (t & 31) & 1
        assert m.accept_token(t)
    assert _served_against_walks(g) >= 40


def test_the_table_reads_tokens_as_string_content():
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_json_schema({"type": "string", "maxLength": 30})
    a = g.automaton
    counter = next(iter(a.nfa.counter))
    dfa, _exit = g.masks.bounded._spec(counter)
    table = string_counters.string_table(info, dfa, info.trie)
    ids = {tok: i for i, tok in enumerate(info.token_bytes) if tok}
    lens = dict(zip(table._ids.tolist(), table._lens.tolist()))
    expect = {"ab": 2, "\\n": 1, "\\": 1, "a\\": 2, "\\u00e9": 1, "\\u0": 1, "é": 1, "日本": 2, "abc": 3,
              '\\"': 1, "xyz" * 7: 21, "\xe6": 1}
    for text, n in expect.items():
        assert lens.get(ids[text.encode()]) == n, text
    for text in ('a"', '",', '"}', "\x01a", '"a', "é\""):
        assert ids[text.encode()] not in lens, text
    closing = {_path(info.trie, x): k for x, k in zip(table._close_node.tolist(), table._close_k.tolist())}
    assert closing[b'"'] == 0 and closing[b'a"'] == 1 and closing["é\"".encode()] == 1
    assert b'",' not in closing  # below the quote: the caller's, not the string's
    words, base, roots = table.part(1, 2)
    allowed = {i for i in range(len(info.token_bytes)) if words[i >> 5] >> (i & 31) & 1}
    assert ids[b"ab"] in allowed and ids[b"abc"] not in allowed and ids[b'a"'] in allowed
    assert ids[b'"'] not in allowed  # closing at once needs 0 >= need = 1
    assert {_path(info.trie, x) for x in roots.tolist()} == {b'a"', "é\"".encode()}


def test_rooms_past_the_longest_token_share_one_part(llama):
    # a maxLength past every token's length (and every closing quote's count) admits the
    # same tokens at each of its counts: one base and one part, made at the warm-up, not
    # a 16 KB base and a part per count (each ~1.2 ms and ~330 page faults in a forked child)
    info, compiler, _tok = llama
    table = next(t for t in info.string_tables.values() if t._levels is not None)  # the JSON string's
    assert table.cap >= 100 and table.close_max < table.cap
    made = len(table._bases), len(table._parts)
    words, base, roots = table.part(1, table.cap)
    assert made == (len(table._bases), len(table._parts))  # the warm-up made it
    for room in (table.cap + 1, 300, 5000, 10**6):
        w, b, r = table.part(1, room)
        assert b is base and np.array_equal(w, words) and np.array_equal(r, roots)
    assert made == (len(table._bases), len(table._parts))
    # below the cap, a room admits fewer tokens: the longest content token is out at cap - 1
    fewer = table.part(1, table.cap - 1)[0]
    assert (fewer & ~words).sum() == 0 and not np.array_equal(fewer, words)
