"""The slice search's horizon form (slice_horizon.SliceHorizon.form): a counter or length
frame with room for sl.max_level characters is searched at its canonical count, so a
maxLength string is one search for every count, and the masks stay exact near and far
from the bound (brute force over byte tokens plus long ones)."""

import random

import pytest

from furca.constrain import GrammarCompiler

from .conftest import accept_bytes, byte_info, walk_checking_masks

EXTRA = ["ab", "a b", "ww " * 5 + "w", "xyzw" * 4, "a" * 17, "日本" * 9, "\u00e9" * 20, '",', "q" * 40]


@pytest.mark.parametrize("max_length", [40, 50])  # below the longest token (54 bytes): kept by automaton.canonical
def test_a_max_length_string_is_searched_once(max_length):
    info = byte_info(EXTRA, long_tokens=0)
    sl = info.slices()[0]
    g = GrammarCompiler(info).compile_json_schema({"type": "object", "properties": {
        "s": {"type": "string", "maxLength": max_length}}})
    bounds = g.masks.slices
    m = accept_bytes(g, '{"s":"')
    s = m._h.state
    assert bounds.horizon.form(s, sl.max_level)[1]  # a frame that canonical keeps is moved
    assert bounds.slice_depth(s, sl) == sl.max_level
    assert len(bounds._steps[sl.name]) <= 2  # the count after a character is the count before it
    body = next(iter(g.automaton.nfa.counter.values()))[0]
    assert bounds.horizon._whole_bodies(body)  # a JSON string character: each body starts a character


@pytest.mark.parametrize("min_length", [2, 3])
def test_a_string_below_its_min_length_is_searched_in_the_form_after_it(min_length):
    """At a string's first character the counter (count 1) is below minLength, so the
    state itself holds no frame the horizon form moves; the counts after it do, and the
    search takes them in that form: a few steps, not one per count up to the horizon."""
    info = byte_info(EXTRA, long_tokens=0)
    sl = info.slices()[0]
    g = GrammarCompiler(info).compile_json_schema({"type": "object", "properties": {
        "s": {"type": "string", "minLength": min_length, "maxLength": 40}}})
    bounds = g.masks.slices
    s = accept_bytes(g, '{"s":"')._h.state
    assert not bounds.horizon.form(s, sl.max_level)[1]
    assert bounds.slice_depth(s, sl) == sl.max_level
    assert len(bounds._steps[sl.name]) <= min_length + 3  # was one per count: 16


@pytest.mark.parametrize("schema", [
    {"type": "string", "maxLength": 50},
    {"type": "string", "maxLength": 23},
    {"type": "string", "minLength": 2, "maxLength": 40},  # the first character below the minimum
    {"type": "string", "minLength": 3, "maxLength": 35},
    {"type": "string", "minLength": 30, "maxLength": 90},
    {"type": "string", "minLength": 40},  # below the minimum: count 1 (_near_stack)
    {"type": "string", "minLength": 25, "maxLength": 60},
    {"type": "string", "maxLength": 70},
    {"type": "string", "pattern": "^[a-z \u00e9]+$", "maxLength": 60},
    {"type": "string", "pattern": r"^(?:\S+\s+){0,40}\S+$"},
    {"type": "string", "pattern": r"^[a-z]+( [a-z]+)*$", "maxLength": 45},  # a length region
    {"type": "string", "pattern": r"^(?:\S+\s+){0,19}\S+$", "maxLength": 50},
    {"type": "array", "items": {"type": "string", "maxLength": 70}, "maxItems": 40},
])
def test_masks_equal_brute_force_near_and_far_from_the_bound(schema):
    info = byte_info(EXTRA, long_tokens=0)
    g = GrammarCompiler(info).compile_json_schema(schema)
    prefix = '["a","' if "items" in schema else '"'
    limit = schema.get("maxLength") or schema.get("items", {}).get("maxLength") or 99
    for seed, done in enumerate((0, 8, 20, 33, 45, limit - 16, limit - 9)):  # characters already in the string
        m = accept_bytes(g, prefix + "ww " * (min(done, limit - 2) // 3))
        walk_checking_masks(m, info, random.Random(seed), 30)
