"""Abstract states cut at an array item's counter frame (nfa.item_counters,
automaton._base): the items of an array of more than 16 items (a counter on the stack,
not copies) share their abstract states whatever their count, and the tokens that pass an
item's end are walked from the state after it (automaton.after_return: the next item
below the maximum, the array's end at or past the minimum). Checked: which counters are
items, that items share abstract states and build no rows of their own, and masks against
brute force through the items, near both bounds."""

import random

import pytest

from furca.constrain import GrammarCompiler

from .conftest import accept_bytes, byte_info, check_mask, walk_checking_masks

EXTRA = ["ab", "a b", '","', '"]', '"],', '",', '"}', '"},{"', "},{", "}]", '{"', '":"', '":', ",", '1,', "12",
         " \"", "abc\",\"ab", "\"]}"]

WORDS = {"type": "string", "pattern": r"^(?:\S+\s+){0,5}\S+$", "maxLength": 40}


def test_item_counters_are_those_of_array_items():
    info = byte_info(EXTRA)
    compile_ = GrammarCompiler(info).compile_json_schema
    items = compile_({"type": "array", "items": {"type": "string"}, "maxItems": 20}).automaton.nfa
    assert items.counter and set(items.counter) == items.item_counters
    chars = compile_({"type": "string", "pattern": "^[a-f0-9]{36}$"}).automaton.nfa
    assert chars.counter and not chars.item_counters
    words = compile_({"type": "string", "pattern": r"^(?:\S+\s+){0,40}\S+$"}).automaton.nfa
    assert words.counter and not words.item_counters
    few = compile_({"type": "array", "items": {"type": "string"}, "maxItems": 16}).automaton.nfa
    assert not few.counter  # up to 16 items are copies, each its own nodes


@pytest.mark.parametrize("item, text", [
    (WORDS, '"ab a"'),
    ({"type": "string", "maxLength": 6}, '"abc"'),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"],
      "additionalProperties": False}, '{"a":12,"b":"x"}'),
])
def test_items_share_their_abstract_states(item, text):
    """The states at each byte of items 2 to 9 have the same abstract states, item after
    item, and the masks of items 3 to 9 expand no state: every row they need was built for
    item 2 (the real states are interned, never expanded)."""
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_json_schema({"type": "array", "items": item, "maxItems": 30})
    a = g.automaton
    m = accept_bytes(g, "[" + text)
    per_item = []
    for i in range(2, 10):
        if i == 3:
            expanded = int(a.expanded.sum())
        seen = []
        for b in ("," + text).encode():
            check_mask(m, info)  # its mask, against brute force
            hit = a.abstract(m._h.state)
            seen.append(None if hit is None else hit[0])
            assert m.accept_token(b), m.error
        per_item.append(seen)
    assert all(x == per_item[0] for x in per_item)
    assert sum(x is not None for x in per_item[0]) >= len(text) - 1  # inside the item: cut at its counter
    assert int(a.expanded.sum()) == expanded


@pytest.mark.parametrize("schema, text", [
    ({"type": "array", "items": WORDS, "minItems": 18, "maxItems": 20}, '"ab a"'),
    ({"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 18}, '"abc"'),
    ({"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                                 "required": ["a", "b"], "additionalProperties": False},
      "minItems": 17, "maxItems": 19}, '{"a":1,"b":"ab"}'),
    ({"type": "array", "items": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 18},
      "maxItems": 20}, "[" + ",".join(['"ab"'] * 18) + "]"),
    ({"type": "array", "items": {"type": "string", "maxLength": 6}, "minItems": 18}, '"abc"'),  # no maximum
    ({"type": "array", "items": {"enum": ["ab", "a b", "abc"]}, "maxItems": 20}, '"a b"'),
])
def test_masks_equal_brute_force_through_the_items(schema, text):
    """Every count from the first item to the maximum (each byte's mask by brute force
    in the first two and the last three items), then random walks near the end of the
    array (the minimum reached, one item left, none): the tokens that pass an item's end
    (`","`, `"]`, `"},{"`) go on after the right count."""
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_json_schema(schema)
    m = g.matcher()
    assert m.accept_token(ord("["))
    top = schema.get("maxItems", 22)
    for i in range(top):
        for b in (("," if i else "") + text).encode():
            if i < 2 or i >= top - 3:
                check_mask(m, info)
            assert m.accept_token(b), m.error
    check_mask(m, info)
    assert m.accept_token(ord(",")) == ("maxItems" not in schema)  # past maxItems
    for k in sorted({1, top - 2, top - 1, top}):
        m = accept_bytes(g, "[" + ",".join([text] * k))
        walk_checking_masks(m, info, random.Random(k), 30)
