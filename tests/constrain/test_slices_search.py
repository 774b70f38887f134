"""The slice search (slices.SliceBounds): a slice step followed over configuration sets
equals the step over the automaton's rows, a state under an array's counter frame is
searched once for every count (the counter cut), and the masks stay exact (brute force,
and real text through the Llama-3.1 tokenizer)."""

import json
import random

from furca.constrain import GrammarCompiler

from .conftest import accept_bytes, allowed_set, byte_info, walk_checking_masks

WORDS = r"^(?:\S+\s+){0,5}\S+$"
EXTRA = ["ab", "a b", "abc de", '"', '",', '","', "日本", "本 ", " \u3000", "\u00a0x", "xyzw" * 4, "a " * 8]


def _schema(items_max_length=40, pattern=WORDS, max_items=30):
    return {"type": "object", "properties": {
        "a": {"type": "array", "maxItems": max_items, "items": {"type": "string", "maxLength": items_max_length,
                                                                 "pattern": pattern}},
        "b": {"type": "string", "pattern": r"^(?:\S+\s+){0,40}\S+$"}}}


def _row_step(a, s, sl):
    """The slice step as the automaton's rows give it (every state on the way expanded)."""
    succ = set()
    for seq in sl.utf8_seqs:
        cur = {s}
        for lo, hi in seq:
            nxt = set()
            for u in cur:
                a.expand(u)
                nxt.update(a.trans[u, lo: hi + 1].tolist())
            if 0 in nxt:
                return True, set()
            cur = nxt
        succ |= cur
    return False, succ


def _text(value):
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def test_step_over_configuration_sets_equals_the_rows():
    info = byte_info(EXTRA)
    sl = info.slices()[0]
    cases = [(_schema(), {"a": ["ab cd", "x \u00a0y", "日本 語"], "b": "p q"}),
             (_schema(pattern=r"^[^\s]{2,30}$"), {"a": ["abcd", "日本語"], "b": "p"}),
             ({"type": "string", "maxLength": 20}, "ab c")]
    for schema, value in cases:
        g = GrammarCompiler(info).compile_json_schema(schema)
        accept_bytes(g, _text(value))
        a, bounds = g.automaton, g.masks.slices
        states = [x for x in range(1, a.num_states) if a.configs[x]]
        assert len(states) > 10
        for x in states[:300]:
            dies, succ = bounds._step(x, sl)
            ref_dies, ref = _row_step(a, x, sl)
            assert dies == ref_dies, x
            if not dies:
                assert set(succ) == ref, x


def test_items_under_a_counter_share_one_search():
    info = byte_info(EXTRA)
    sl = info.slices()[0]
    g = GrammarCompiler(info).compile_json_schema(_schema(300, r"^(?:\S+\s+){0,29}\S+$"))
    bounds = g.masks.slices
    starts = []
    for k in range(1, 5):  # items 2..5 after a character: the counter frame holds another count each
        m = accept_bytes(g, '{"a":[' + '"w",' * k + '"x')
        starts.append(m._h.state)
    cuts = {bounds._counter_cut(s)[0] for s in starts}
    assert len(set(starts)) == 4 and len(cuts) == 1 and cuts != set(starts)
    depths = [bounds.slice_depth(s, sl) for s in starts]
    assert depths[0] >= sl.max_level and len(set(depths)) == 1
    memo = bounds._depth[sl.name]
    assert all(memo[s] == depths[0] for s in starts) and memo[cuts.pop()] == depths[0]


def test_a_counter_whose_body_ends_soon_is_not_cut_again():
    # a word counter (at least 20 words: counted on the stack, every configuration inside
    # it): a word ends within a few characters, so the cut state proves less than the
    # state itself
    info = byte_info(EXTRA)
    sl = info.slices()[0]
    g = GrammarCompiler(info).compile_json_schema({"type": "string", "pattern": r"^(?:[^ ]+ +){20,99}$"})
    m = accept_bytes(g, '"ab cd ef')
    bounds = g.masks.slices
    allowed_set(m, info)
    depth = bounds.slice_depth(m._h.state, sl)
    assert depth >= sl.max_level
    assert False in [v for (name, _node), v in bounds._cut_verdict.items() if name == sl.name]


def test_masks_equal_brute_force_in_counted_arrays_of_word_strings():
    info = byte_info(EXTRA)
    for seed, schema in enumerate((_schema(), _schema(items_max_length=12), _schema(pattern=r"^(?:\S+\s+){0,20}\S+$"))):
        g = GrammarCompiler(info).compile_json_schema(schema)
        m = accept_bytes(g, '{"a":["p","q r","')
        walk_checking_masks(m, info, random.Random(seed), 60)


def test_real_tokenizer_array_of_word_strings(llama):
    info, compiler, tok = llama
    g = compiler.compile_json_schema(_schema(items_max_length=300, pattern=r"^(?:\S+\s+){0,29}\S+$"))
    items = ["Experience working in agile environments", "Ability to work collaboratively", "Strong skills",
             "Experience working in a team", "Ability to work in a fast-paced environment"] * 4
    text = _text({"a": items, "b": "one two three"})
    m = g.matcher()
    for t in tok.encode(text, add_special_tokens=False).ids:
        bits = allowed_set(m, info)
        assert bits[t], t
        assert m.accept_token(t), m.error
    assert m.can_terminate()
    too_many = _text({"a": items + ["x"] * 11})  # 31 items: past maxItems
    m = g.matcher()
    ok = True
    for t in tok.encode(too_many, add_special_tokens=False).ids:
        bits = allowed_set(m, info)
        if not bits[t] or not m.accept_token(t):
            ok = False
            break
    assert not ok
