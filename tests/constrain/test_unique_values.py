"""uniqueItems over objects, numbers and mixed items (furca/constrain/unique_values.py,
json_schema/distinct.py's watched_values): the matcher compares the items as values.

The masks are checked against the definition, computed here independently of the
watch: a token is allowed when the grammar alone allows it (a plain Matcher of the same
grammar), the text it makes repeats no completed item (as a value: 1 == 1.0, members in
any order) and some continuation over the test's bytes still closes the array without
a repeat (a search through the plain matcher)."""
import json
from decimal import Decimal

import jsonschema
import pytest

from furca.constrain import CompileError, GrammarCompiler
from furca.constrain.json_schema import schema_to_gbnf, schema_to_ir
from furca.constrain.matcher import Matcher
from furca.constrain.value_reader import value_key

from .conftest import BYTE_EOS, allowed_set, byte_info
from .test_unique_items import _walk_against


def _split(text: str):
    """(the completed items' texts, whether the array closed) of an array prefix."""
    items, cur, depth, ins, esc = [], "", 0, False, False
    body = text[text.index("[") + 1:] if "[" in text else ""
    for ch in body:
        if ins:
            cur += ch
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                ins = False
                if depth == 0:
                    items.append(cur)
                    cur = ""
            continue
        if ch == '"':
            ins = True
            cur += ch
        elif ch in "{[":
            depth += 1
            cur += ch
        elif ch in "}]":
            if depth == 0:  # the array's own `]`
                if cur.strip():
                    items.append(cur)
                return [x.strip() for x in items], True
            depth -= 1
            cur += ch
            if depth == 0:
                items.append(cur)
                cur = ""
        elif ch == "," and depth == 0:
            if cur.strip():
                items.append(cur)
            cur = ""
        else:
            cur += ch
    return [x.strip() for x in items], False


def _canon(v):
    if isinstance(v, dict):
        return ("{", tuple(sorted((k, _canon(x)) for k, x in v.items())))
    if isinstance(v, list):
        return ("[", tuple(_canon(x) for x in v))
    if isinstance(v, bool) or v is None:
        return ("lit", v)
    if isinstance(v, str):
        return ("str", v)
    return ("num", Decimal(str(v)).normalize() if v else Decimal(0))


def _repeats(text: str) -> bool:
    items, _closed = _split(text)
    seen = [_canon(json.loads(x, parse_float=Decimal, parse_int=Decimal)) for x in items]
    return len(set(seen)) < len(seen)


class _Definition:
    """allows(text): the definition above, the continuations searched over `chars` (one
    byte a step) up to `depth` bytes (a longer one counts as alive)."""

    def __init__(self, g, chars, depth=24):
        self.g, self.chars, self.depth = g, [c for c in chars.encode()], depth
        self._memo = {}

    def __call__(self, text: str) -> bool:
        m = Matcher(self.g)
        if not m.accept_string(text):
            return False
        return self._alive(text, m, self.depth)

    def _alive(self, text, m, depth):
        key = text
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        if _repeats(text):
            ok = False
        elif _split(text)[1]:
            ok = True
        elif depth == 0:
            ok = True
        else:
            ok = False
            for b in self.chars:
                f = m.fork()
                if f.accept_token(b) and self._alive(text + chr(b), f, depth - 1):
                    ok = True
                    break
        self._memo[key] = ok
        return ok


def _check(schema, chars, extra, seed, walks=25, steps=16, depth=24, **kw):
    """Walks over byte tokens of chars plus the extra tokens; returns how many tokens the
    watch masked that the grammar allowed."""
    c = GrammarCompiler(byte_info(extra))
    g = c.compile_json_schema(schema, **kw)
    finished = []
    masked = _walk_against(c, schema, chars.encode(), _Definition(g, chars, depth), seed, walks, steps,
                           finished=finished.append, **kw)
    for text in finished:
        jsonschema.validate(json.loads(text), schema)
    return masked


FINITE_OBJECTS = {"type": "array", "uniqueItems": True, "items": {
    "type": "object", "properties": {"a": {"type": "boolean"}, "b": {"enum": [1, 2]}},
    "required": ["a"], "additionalProperties": False}}


def test_finite_objects_repeats_and_dead_ends():
    """Six values ({"a":true}, {"a":false,"b":2}, ...): repeats masked, and the prefixes
    only used values complete (the last `,` once all are used, `"b":` with both counts
    used) masked too."""
    extra = ['{"a":', 'true', 'false', ',"b":', '},{"a":', 'true}', 'e}', '1}', '2},', '},', 'e,"b":']
    assert _check(FINITE_OBJECTS, '[]{}",:abtruefls12', extra, seed=0) > 20


def test_numbers_compare_as_values():
    """1, 1.0 and 1.00 are one value; a dead end needs every completion used."""
    schema = {"type": "array", "uniqueItems": True, "items": {"type": "number", "minimum": 0, "maximum": 2}}
    extra = ["1.0", ".0,", "1,", ".00]", "2,1", "0.5,"]
    assert _check(schema, "[],.0125", extra, seed=1, depth=8) > 10


def test_bounded_integers_use_up():
    """Integers 1..3 (not plain integers: the values watch): after all three, no comma."""
    schema = {"type": "array", "uniqueItems": True, "items": {"type": "integer", "minimum": 1, "maximum": 3}}
    assert _check(schema, "[],123", ["1,", "2,3", ",3]"], seed=2) > 10


def test_a_search_found_alive_counts_only_while_its_item_is_unused():
    """The dead-end search keeps what it found alive, by state and reading (ValueSites._alive:
    the item its path completed first); asked again with another used set, that find
    holds only while the item is unused. Integers 1..3: after `[1,` the search from
    between items finds `2]` (a bare item a `]` ends: the item counts, not the end); after
    `[1,3,2` the same search finds every completion used, so the comma is masked."""
    schema = {"type": "array", "uniqueItems": True, "items": {"type": "integer", "minimum": 1, "maximum": 3}}
    info = byte_info([])
    g = GrammarCompiler(info).compile_json_schema(schema)
    m = g.matcher()
    assert m.accept_string("[1")
    assert allowed_set(m, info)[ord(",")]
    found = dict(g.value_sites._alive)
    assert found and all(x == value_key(b"2") for x in found.values())
    assert m.accept_string(",3,2")
    assert not allowed_set(m, info)[ord(",")]
    assert allowed_set(m, info)[ord("]")]
    assert not m.fork().accept_string(",")


def test_a_found_text_serves_the_same_items_elsewhere(monkeypatch):
    """A search's find is also kept as the text it spelled from its reading
    (ValueSites._texts): from another state with the same reading (the same items in
    another array) the text serves when the grammar allows it there and it completes an
    unused item; else the search runs. Two arrays of {"x": 1 | 2}: the second one's
    searches, served or not, give the masks the first one's did."""
    item = {"type": "object", "properties": {"x": {"enum": [1, 2]}}, "required": ["x"],
            "additionalProperties": False}
    arr = {"type": "array", "uniqueItems": True, "items": item}
    schema = {"type": "object", "properties": {"a": arr, "b": arr}, "required": ["a", "b"],
              "additionalProperties": False}
    info = byte_info([])
    g = GrammarCompiler(info).compile_json_schema(schema)
    served = []
    spells = type(g.value_sites)._spells_unused
    monkeypatch.setattr(type(g.value_sites), "_spells_unused",
                        lambda self, *a: served.append(spells(self, *a)) or served[-1])
    m = g.matcher()
    assert m.accept_string('{"a":[{"x":1}')
    assert allowed_set(m, info)[ord(",")]  # the search: {"x":2} is left
    assert g.value_sites._texts and not served
    assert m.accept_string(',{"x":2}')
    assert not allowed_set(m, info)[ord(",")]  # both used
    assert m.accept_string('],"b":[{"x":1}')
    assert allowed_set(m, info)[ord(",")]
    assert True in served  # the text the first array's search spelled, from the second's state
    served.clear()
    b = m.fork()
    assert m.accept_string(',{"x":2}')
    assert not allowed_set(m, info)[ord(",")]
    assert b.accept_string("]}") and b.can_terminate()
    m2 = g.matcher()
    assert m2.accept_string('{"a":[{"x":2}],"b":[{"x":2}')
    assert allowed_set(m2, info)[ord(",")]  # the kept text repeats {"x":2} here: the search finds {"x":1}
    assert m2.accept_string(',{"x":1}')
    assert not allowed_set(m2, info)[ord(",")]


def test_pattern_strings_and_tokens_writing_two_items():
    """String items of a pattern (the values watch): a token that closes one item and
    writes another whole one (`a","a"`) is masked when the second repeats either."""
    schema = {"type": "array", "uniqueItems": True, "items": {"type": "string", "pattern": "^[ab]{1,2}$"}}
    extra = ['a","a"', 'a","a",', 'b","b"]', '","a"', '"ab"', 'a","ab"', 'b",1']
    assert _check(schema, '[]",ab', extra, seed=5, walks=30, steps=12) > 10


def test_mixed_items_any_value():
    """Items of any type (uniqueItems without items): strings, numbers, literals, arrays."""
    schema = {"type": "array", "uniqueItems": True, "maxItems": 4}
    extra = ['"a"', '"a",', '[1]', '[1],', 'true,', '1,', '{}']
    assert _check(schema, '[]{}",:a1', extra, seed=3, walks=20, steps=14, depth=10) > 5


def test_flexible_whitespace_and_member_order():
    """Whitespace inside and between items; members of extra properties in any order
    still equal (repeats masked by value)."""
    schema = {"type": "array", "uniqueItems": True, "items": {
        "type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"],
        "additionalProperties": False}}
    extra = ['{ "a": ', 'true }', ' , ', 'false}']
    assert _check(schema, '[]{}":, truefals', extra, seed=4, depth=30, whitespace="flexible",
                  max_whitespace=1) > 5


def test_value_key():
    assert value_key(b"1") == value_key(b"1.0") == value_key(b"1e0") == value_key(b"10E-1")
    assert value_key(b"true") != value_key(b"1")
    assert value_key(b'{"a":1,"b":[2]}') == value_key(b'{"b":[2.0],"a":1}')
    assert value_key(b'"\\u0041"') == value_key(b'"A"')
    assert value_key(b"[1,2]") != value_key(b"[2,1]")


def test_llama_object_items(llama):
    """Real tokens: an object repeated is refused token by token, and the mask of a
    state where every completion is used is empty of such tokens."""
    info, c, _tok = llama
    g = c.compile_json_schema(FINITE_OBJECTS)
    m = g.matcher()
    assert m.accept_string('[{"a":true},{"a":false},{"a":true,"b":1},{"a":true,"b":2},{"a":false,"b":1},')
    bits = allowed_set(m, info)
    allowed = {info.token_bytes[i] for i in range(info.vocab_size) if bits[i] and info.token_bytes[i]}
    assert b'{"' in allowed and b'{"a":false' not in allowed  # {"a":false,"b":2} is left
    m2 = m.fork()
    assert m2.accept_string('{"a":false,"b":')
    bits = allowed_set(m2, info)
    allowed = {info.token_bytes[i] for i in range(info.vocab_size) if bits[i] and info.token_bytes[i]}
    assert b"2" in allowed and b"1" not in allowed and b"1}" not in allowed


def test_nested_value_arrays(llama):
    """Arrays of distinct values inside the items of another (and the same array
    recursively, through a $ref): one reader per open array, each masking its own."""
    _info, c, _tok = llama
    nested = {"type": "array", "uniqueItems": True, "items": {
        "type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True, "items": {"type": "number"}}},
        "required": ["xs"], "additionalProperties": False}}
    m = c.compile_json_schema(nested).matcher()
    assert m.accept_string('[{"xs":[1,2]},{"xs":[1')
    assert not m.fork().accept_string(",1.0]")  # the inner array: 1 again
    assert not m.fork().accept_string(",2]}")  # the outer: {"xs":[1,2]} again
    assert m.fork().accept_string(",2,3]}]")
    assert m.accept_string("]}")
    assert m.accept_string(',{"xs":[2,1]}')  # the same numbers in another order: another value
    assert not m.fork().accept_string(',{"xs":[2,1]}')
    tree = {"$defs": {"n": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "uniqueItems": True, "items": {"$ref": "#/$defs/n"}}},
        "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/n"}
    m = c.compile_json_schema(tree).matcher()
    assert m.accept_string('{"v":1,"kids":[{"v":2,"kids":[{"v":3},{"v":4}]},{"v":2,"kids":[{"v":3}')
    assert not m.fork().accept_string(',{"v":3}')  # the innermost array
    assert m.accept_string(']}')  # {"v":2,"kids":[{"v":3}]}: not the first kid (it had two)
    assert not m.fork().accept_string(',{"v":2,"kids":[{"v":3},{"v":4}]}')  # the middle array
    assert m.accept_string(']}')
    # strings inside object items: the strings' watch and this one, both kept
    both = {"type": "array", "uniqueItems": True, "items": {
        "type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True, "items": {"type": "string"}}}}}
    m = c.compile_json_schema(both).matcher()
    assert m.accept_string('[{"xs":["a"]},{"xs":["a","b"]},{"xs":["a"')
    assert not m.fork().accept_string(',"a"')
    assert not m.fork().accept_string(']}')
    assert not m.fork().accept_string(',"b"]}')
    assert m.accept_string(',"c"]}]')


def test_gbnf_and_prefix_items_stay_unsupported():
    with pytest.raises(CompileError, match="uniqueItems"):
        schema_to_gbnf(FINITE_OBJECTS)
    with pytest.raises(CompileError, match="uniqueItems"):
        schema_to_ir({"type": "array", "uniqueItems": True, "prefixItems": [{"type": "object"}]})


def test_the_compiler_makes_the_watch_tables_once_per_tokenizer():
    # the watches' per-tokenizer tables (token_tables.py, value_tokens.py) are made with
    # the GrammarCompiler, so no request's compile or step makes them; every later
    # compiler and grammar of the tokenizer uses those same tables
    info = byte_info(['"a', 'b"', '","', '"]', "1,", "[1"])
    assert info._unique_tables is None
    GrammarCompiler(info)
    tables = info._unique_tables
    assert tables is not None and tables.value_tables is not None
    g = GrammarCompiler(info).compile_json_schema({"type": "array", "uniqueItems": True})
    m = g.matcher()
    for b in b'[1,"a",[1]]':
        assert m.accept_token(b)
    assert m.can_terminate()
    assert info._unique_tables is tables and tables.value_tables is not None
