"""Objects in any member order (member_order="any": json_schema/any_order.py builds
the grammar, furca/constrain/members.py keeps each object's keys distinct).

The masks are checked against the definition, computed here independently of the
watch: a token is allowed when the grammar alone allows it (a plain Matcher of the same
grammar) and the text it makes writes no key twice in one object, and, where the keys
are a finite set, does not stop inside a key that only used names complete, or after a
comma once every name is used."""
import json
import os

import jsonschema
import numpy as np
import pytest

from furca.constrain import GrammarCompiler
from furca.constrain.json_schema import schema_to_gbnf

from .conftest import BYTE_EOS, allowed_set, byte_info
from .test_unique_items import _walk_against


def _objects(text: str):
    """The objects of a JSON prefix (closed ones too), each as a dict: its complete
    keys, the open key's raw body or None, whether a key is expected, after a comma;
    read with a plain scan of strings and brackets (no code shared with the watch)."""
    stack, seen, i, n = [], [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            frame = stack[-1] if stack else None
            is_key = isinstance(frame, dict) and frame["want_key"]
            if j >= n:  # an open string ends the text
                if is_key:
                    frame["open"] = text[i + 1:]
                return seen
            if is_key:
                frame["keys"].append(json.loads(text[i:j + 1]))
                frame["want_key"] = False
                frame["comma"] = False
            i = j + 1
            continue
        if ch == "{":
            stack.append({"keys": [], "want_key": True, "comma": False, "open": None, "depth": len(stack)})
            seen.append(stack[-1])
        elif ch == "[":
            stack.append("[")
        elif ch in "}]":
            stack.pop()
        elif ch == "," and isinstance(stack[-1], dict):
            stack[-1]["want_key"] = True
            stack[-1]["comma"] = True
        i += 1
    return seen


def _definition_allows(text: str, names=None, open_prefix=None) -> bool:
    """names: the finite key set of every object, a function of an object's depth to
    it, or None (free keys); open_prefix: keys starting so are also taken, endlessly
    (a patternProperties pattern `^b`): a body starting so is never a dead end, nor is
    a comma."""
    for f in _objects(text):
        if not isinstance(f, dict):
            continue
        here = names(f["depth"]) if callable(names) else names
        if here == "any value":  # an object inside a value of any JSON: not watched
            continue
        if len(set(f["keys"])) < len(f["keys"]):
            return False
        if here is None:
            continue
        unused = [json.dumps(k)[1:-1] for k in here if k not in f["keys"]]
        body = f["open"]
        if body is not None and not any(u.startswith(body) for u in unused):
            if open_prefix is None or not (body.startswith(open_prefix) or open_prefix.startswith(body)):
                return False
        if body is None and f["want_key"] and f["comma"] and not unused and open_prefix is None:
            return False
    return True


_EXTRA = ['","', '"a"', '"a":', ',"a"', ',"a":', '"b":1,"a"', '1,"a":', '1,"b"', '"a":1,"a"', 'a"', 'ab"', '{"a',
          '{"a":1,"a"', '},"a"', '}},"b"', '"}', '1}', '"a":1}', ',"ab"', '"ab":', 'b"', ',"a', '1,"a', ',"b',
          '","a', '"a', '"b', '"ab', '":1,"a"', 'b":1,"b"', 'a":{},"a"', 'a":1,', '":1,', '"b":1,', '{"a":1,',
          'a":"",', '","b":1,', '{},', '{}}', '{"a":{},', '},', '}},', '1},']


def _walk(schema, seed, names=None, walks=40, steps=24, chars=b'{}[]",:ab1', open_prefix=None):
    """Random walks over a small alphabet (keys repeat often); at every step the mask of
    every token equals the definition, and accept_token agrees with the mask. Returns
    how many tokens the grammar allowed and the watch masked, and how many walks ended
    (each a valid instance)."""
    done = []

    def finished(text):
        jsonschema.validate(json.loads(text), schema)
        done.append(text)

    masked = _walk_against(GrammarCompiler(byte_info(_EXTRA)), schema, chars,
                           lambda text: _definition_allows(text, names, open_prefix), seed, walks, steps, finished,
                           member_order="any")
    return masked, len(done)


def test_free_keys_are_never_written_twice():
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    masked, _ = _walk(schema, 0)
    assert masked > 30


def test_declared_and_extra_keys_in_any_order():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "ab": {"type": "integer"}},
              "required": ["ab"], "additionalProperties": {"type": "integer"}}
    masked, _ = _walk(schema, 1)
    assert masked > 30


def test_a_finite_key_set_masks_dead_keys_and_the_last_comma():
    names = ["a", "b", "ab", "ba", "aa"]
    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in names}, "required": ["b"],
              "additionalProperties": False}
    masked, finished = _walk(schema, 2, names=names, walks=60, steps=40)
    assert masked > 50 and finished > 3


def test_pattern_keys_beside_a_finite_key_set():
    """patternProperties `^b` and additionalProperties false: the declared names {a, ab}
    are a finite set (a body only they complete is dead once they are used), the
    pattern's keys are not (a body starting with b never is, and the comma never is)."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "ab": {"type": "integer"}},
              "patternProperties": {"^b": {"type": "integer"}}, "additionalProperties": False}
    masked, finished = _walk(schema, 6, names=["a", "ab"], open_prefix="b", walks=60, steps=30)
    assert masked > 30 and finished > 3


def test_keys_no_pattern_names_take_additional_properties_alone_in_any_order():
    """patternProperties `^b` beside additionalProperties: a key that is neither declared
    nor starts with b takes additionalProperties alone (exact, as in schema order: the
    keys no pattern names never run out of completions, so the watch may take them as
    free keys); was merged with the pattern's schema (o7573's `$ref` key, o82144)."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}},
              "patternProperties": {"^b": {"type": "integer"}}, "additionalProperties": {"type": "string"}}
    g = GrammarCompiler(byte_info([])).compile_json_schema(schema, member_order="any")
    for doc, ok in [('{"x":"s","b1":1,"a":1}', True), ('{"b":1,"x":"s"}', True), ('{"x":1}', False),
                    ('{"bx":"s"}', False), ('{"x":"s","x":"t"}', False)]:
        m = g.matcher()
        assert (m.accept_string(doc) and m.accept_token(BYTE_EOS)) == ok, doc
    masked, finished = _walk(schema, 7, walks=60, steps=30)  # every finished walk valid (jsonschema)
    assert masked > 10 and finished > 3
    # keys no pattern names that run out (`[\s\S]` names every non-empty key: only "" is
    # left; `.` would leave keys of line terminators, endless) cannot be the watch's free
    # keys: the object keeps the schema orders, exact (was the merged, narrower value)
    finite = {"type": "object", "patternProperties": {"[\\s\\S]": {"type": "integer"}},
              "additionalProperties": {"type": "string"}}
    g = GrammarCompiler(byte_info([])).compile_json_schema(finite, member_order="any")
    for doc, ok in [('{"a":1}', True), ('{"":"s"}', True), ('{"":1}', False), ('{"a":"s"}', False)]:
        m = g.matcher()
        assert (m.accept_string(doc) and m.accept_token(BYTE_EOS)) == ok, doc


def test_pattern_keys_by_region_in_any_order():
    """Two patterns of different schemas: each region of keys (named by `^a` alone, by
    `b` alone, by both) takes the merge of its patterns' schemas, in any member order
    too (the regions never run out of completions); was every pattern key taking both
    schemas (o60038, o76944, o11975). Integer values: the walk's definition watches
    every object, and furca does not watch objects inside values of any JSON."""
    schema = {"type": "object", "patternProperties": {"^a": {"type": "integer"}, "b": {"type": "integer", "minimum": 5}},
              "additionalProperties": {"type": "integer", "maximum": 3}}
    g = GrammarCompiler(byte_info([])).compile_json_schema(schema, member_order="any")
    for doc, ok in [('{"a1":1}', True), ('{"xb":7,"a":2}', True), ('{"ab":7,"z":3}', True),
                    ('{"ab":1}', False), ('{"xb":1}', False), ('{"a":"s"}', False), ('{"a":1,"a":2}', False),
                    ('{"z":4}', False)]:
        m = g.matcher()
        assert (m.accept_string(doc) and m.accept_token(BYTE_EOS)) == ok, doc
    masked, finished = _walk(schema, 8, walks=60, steps=30)  # every finished walk valid (jsonschema)
    assert masked > 10 and finished > 3


def test_a_value_object_not_yet_opened_is_not_the_object_watched():
    """Before a value object's `{` the state's configurations already sit at that
    object's rule (its entry): the keys that count are still the outer object's. Here
    the outer's are {a, b}, the values free objects: `{},` after the last name is a dead
    end (the regression: the value object's free keys were taken for the outer's). The
    free objects' own values are any JSON, whose objects are not watched."""
    schema = {"type": "object", "properties": {"a": {"type": "object"}, "b": {"type": "object"}},
              "additionalProperties": False}
    masked, finished = _walk(schema, 7, walks=60, steps=30,
                             names=lambda depth: ["a", "b"] if depth == 0 else None if depth == 1 else "any value")
    assert masked > 30 and finished > 3


def test_three_nested_objects_each_keep_their_level():
    """A value whose rule ends in a call (a tail call: no frame of its own) puts two
    objects' rules next to each other on a stack; the levels must still tell them
    apart. Here {ab: [{a: {b}, b}]}: after the innermost closes with `},` the middle
    one's names {a, b} are both used (the pool fuzz found this on Github_medium o6766,
    where the middle object was merged with the innermost and the outer's names counted
    for it)."""
    inner = {"type": "object", "properties": {"b": {"type": "integer"}}, "additionalProperties": False}
    middle = {"type": "object", "properties": {"a": inner, "b": {"type": "integer"}}, "additionalProperties": False}
    schema = {"type": "object", "properties": {"ab": {"type": "array", "items": middle}},
              "additionalProperties": False}
    names = {0: ["ab"], 2: ["a", "b"], 3: ["b"]}  # depth 1: the array
    masked, finished = _walk(schema, 8, names=lambda depth: names[depth], walks=80, steps=30)
    assert masked > 30 and finished > 3


def test_nested_objects_keep_their_own_keys():
    """A recursive schema: each object level watched with its own used keys; string
    values with brackets and quotes inside are not read as structure."""
    names = ["a", "b", "ab"]
    schema = {"type": "object", "properties": {"a": {"$ref": "#"}, "b": {"type": "string"},
                                               "ab": {"type": "array", "items": {"$ref": "#"}}},
              "additionalProperties": False}
    masked, finished = _walk(schema, 3, names=names, walks=60, steps=40)
    assert masked > 50 and finished > 3


def test_an_object_used_up_by_the_token_that_opens_it():
    """An inner object of one name: `{"a":1,` opens it, uses its only key and writes a
    comma after which no key is left (a dead end the mask must see from outside it)."""
    inner = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}
    schema = {"type": "object", "properties": {"a": inner, "b": {"type": "integer"}}, "additionalProperties": False}
    masked, finished = _walk(schema, 4, names=lambda depth: ["a", "b"] if depth == 0 else ["a"], walks=60, steps=30)
    assert masked > 30 and finished > 3
    masked, finished = _walk(inner, 5, names=["a"], walks=20, steps=12)  # the first token, outside the watch
    assert masked >= 20 and finished > 3


def test_the_key_set_narrows_as_alternatives_die():
    """oneOf two finite objects: once `"a":1` chose the first, its keys {a, b} are all
    the keys left (the second's `ab` no longer is), so after both the comma is a dead
    end and masked; in the second the comma stays."""
    one = {"type": "object", "properties": {"a": {"const": 1}, "b": {"type": "integer"}},
           "required": ["a"], "additionalProperties": False}
    two = {"type": "object", "properties": {"a": {"const": 11}, "b": {"type": "integer"}, "ab": {"type": "integer"}},
           "required": ["a"], "additionalProperties": False}
    c = GrammarCompiler(byte_info([]))
    g = c.compile_json_schema({"oneOf": [one, two]}, member_order="any")
    comma = ord(",")
    for text, open_ in (('{"a":1,"b":1', False), ('{"b":1,"a":1', False), ('{"a":11,"b":1', True),
                        ('{"b":1,"a":11', True)):
        m = g.matcher()
        assert m.accept_string(text)
        assert bool(allowed_set(m, c.info)[comma]) == open_ and m.fork().accept_token(comma) == open_, text
        assert m.accept_string("}") and m.accept_token(BYTE_EOS)


def test_any_order_accepts_what_the_schema_orders_reject():
    schema = {"type": "object", "properties": {"id": {"type": "string"}, "n": {"type": "integer"},
                                               "tags": {"type": "array", "items": {"type": "string"}}},
              "required": ["id", "n"]}
    c = GrammarCompiler(byte_info([]))
    ordered, anyorder = c.compile_json_schema(schema), c.compile_json_schema(schema, member_order="any")
    for doc in ['{"n":1,"id":"x"}', '{"$schema":"s","id":"x","n":2}', '{"tags":[],"n":1,"other":{},"id":"y"}']:
        assert not ordered.matcher().accept_string(doc)
        m = anyorder.matcher()
        assert m.accept_string(doc) and m.accept_token(BYTE_EOS), doc
    for doc in ['{"n":1}', '{"n":1,"id":"x","n":2}', '{"id":"x","n":1,"zz":1,"zz":2}']:
        m = anyorder.matcher()
        assert not (m.accept_string(doc) and m.accept_token(BYTE_EOS)), doc


def test_rollback_and_fork_keep_the_watch():
    c = GrammarCompiler(byte_info([]))
    g = c.compile_json_schema({"type": "object", "additionalProperties": {"type": "integer"}}, member_order="any")
    m = g.matcher()
    for ch in '{"k":1,':
        assert m.accept_string(ch)
    f = m.fork()
    assert m.accept_string('"j":2,')
    assert not m.fork().accept_string('"j"') and f.accept_string('"j"')
    m.rollback(1)  # accept_string is one step of the history
    assert m.accept_string('"j"')
    m.rollback(1)
    assert not m.fork().accept_string('"k"') and m.accept_string('"j"')
    m.reset()
    assert m.accept_string('{"j":1,"k":2}')


def test_schema_order_is_the_default_and_other_objects_keep_it():
    """Objects the watch cannot read exactly keep the schema orders."""
    c = GrammarCompiler(byte_info([]))
    s = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    assert not c.compile_json_schema(s).matcher().accept_string('{"b":1,"a":2}')
    assert c.compile_json_schema(s, member_order="any").matcher().accept_string('{"b":1,"a":2}')
    for other in ({"patternProperties": {"^x+y$": {}}}, {"propertyNames": {"maxLength": 3}}):
        g = c.compile_json_schema({**s, **other}, member_order="any")
        assert not g.matcher().accept_string('{"b":1,"a":2}'), other
    g = c.compile_json_schema(s, member_order="any", whitespace="flexible")
    assert not g.matcher().accept_string('{"b":1,"a":2}')
    many = {"type": "object", "properties": {k: {"type": "integer"} for k in "abcdefg"}, "required": list("abcdefg")}
    assert not c.compile_json_schema(many, member_order="any").matcher().accept_string('{"b":1,"a":2')
    assert schema_to_gbnf(s) == schema_to_gbnf(s)  # GBNF has no member_order: the schema orders
    with pytest.raises(Exception, match="member_order"):
        c.compile_json_schema(s, member_order="random")


def test_member_counts_in_any_order():
    """minProperties / maxProperties beside required names and free keys: the grammar
    counts the members (a rule per required subset and count), the watch keeps them
    distinct, so the count is the parsed object's."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "ab": {"type": "integer"}},
              "required": ["ab"], "additionalProperties": {"type": "integer"}, "minProperties": 2,
              "maxProperties": 3}
    masked, finished = _walk(schema, 7, walks=60, steps=30)
    assert masked > 30 and finished > 3
    c = GrammarCompiler(byte_info([]))
    g = c.compile_json_schema(schema, member_order="any")
    for doc, ok in (('{"ab":1}', False), ('{"x":1,"ab":1}', True), ('{"x":1,"ab":1,"a":2}', True),
                    ('{"x":1,"ab":1,"a":2,"y":3}', False), ('{"x":1,"x":2,"ab":1}', False), ('{"x":1,"y":2}', False)):
        m = g.matcher()
        assert (m.accept_string(doc) and m.accept_token(BYTE_EOS)) == ok, doc
        assert ok == jsonschema.Draft202012Validator(schema).is_valid(json.loads(doc)) or '"x":1,"x"' in doc


@pytest.mark.parametrize("member_order", ["schema", "any"])
def test_min_properties_is_met_by_distinct_keys(member_order):
    """A free key written twice counts once in the parsed object (JSON parsers keep the
    last), so minProperties beyond the required names needs the watch in schema order
    too: `{"a":1,"a":2}` has one member."""
    c = GrammarCompiler(byte_info([]))
    free = {"type": "object", "minProperties": 2, "additionalProperties": {"type": "integer"}}
    declared = {"type": "object", "properties": {"x": {"type": "integer"}}, "minProperties": 2}
    patterns = {"type": "object", "patternProperties": {"^a": {"type": "integer"}}, "additionalProperties": False,
                "minProperties": 2}
    for schema, docs in ((free, ['{"a":1,"a":2}', '{"a":1,"b":2}']),
                         (declared, ['{"b":2,"b":3}', '{"x":1,"b":2}']),
                         (patterns, ['{"ab":2,"ab":3}', '{"ab":2,"a":3}'])):
        g = c.compile_json_schema(schema, member_order=member_order)
        for doc in docs:
            m = g.matcher()
            accepted = m.accept_string(doc) and m.accept_token(BYTE_EOS)
            assert accepted == (len(json.loads(doc)) == doc.count(":")), (schema, doc)


def test_min_properties_over_a_finite_key_set():
    """Distinct names only: more than the declared names compile to nothing; as many
    as them leave no key to repeat."""
    from furca.constrain import CompileError
    c = GrammarCompiler(byte_info([]))
    s = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
         "additionalProperties": False, "minProperties": 2}
    g = c.compile_json_schema(s, member_order="any")
    for doc, ok in (('{"b":1,"a":2}', True), ('{"a":1,"a":2}', False), ('{"a":1}', False)):
        m = g.matcher()
        assert (m.accept_string(doc) and m.accept_token(BYTE_EOS)) == ok, doc
    with pytest.raises(CompileError):
        c.compile_json_schema({**s, "minProperties": 3}, member_order="any")


def test_finite_key_regions_keep_the_schema_orders_exact():
    """A pattern region with finitely many keys (`^([0-9]{3})$`) cannot be free keys of the
    watch: the object keeps the schema orders with its exact regions (it was built with
    every pattern's schema merged, object and string: no pattern key at all), and so does
    an object that must hold a member named otherwise (`not`, swagger 2.0's responses)."""
    c = GrammarCompiler(byte_info([]))
    patterns = {"^([0-9]{3})$": {"type": "object"}, "^x-": {"type": "string"}}
    s = {"type": "object", "additionalProperties": False, "patternProperties": patterns}
    responses = {**s, "minProperties": 1,
                 "not": {"type": "object", "additionalProperties": False, "patternProperties": {"^x-": {}}}}
    for schema, docs in ((s, ['{"200":{},"x-a":""}', '{"x-a":"","404":{}}']),
                         (responses, ['{"200":{}}', '{"x-a":"","404":{}}'])):
        g = c.compile_json_schema(schema, member_order="any")
        for doc in docs:
            m = g.matcher()
            assert m.accept_string(doc) and m.accept_token(BYTE_EOS), doc
        for doc in ('{"200":""}', '{"x-a":{}}', '{"20":{}}'):
            m = g.matcher()
            assert not (m.accept_string(doc) and m.accept_token(BYTE_EOS)), doc
    m = c.compile_json_schema(responses, member_order="any").matcher()
    assert not (m.accept_string('{"x-a":""}') and m.accept_token(BYTE_EOS))  # no member named otherwise


def test_patterns_with_an_end_anchor_that_go_on_are_watched():
    """`^[0-9a-zA-Z_-]+$` takes keys that always go on (its automaton reaches a cycle from
    every live state): its keys are free keys of the watch, so minProperties counts
    distinct keys (o74560's `Terrains`, `{"_":..,"_":..}` met minProperties 2). One
    that stops (`^[a-z]+1$`) keeps the schema orders, unwatched."""
    c = GrammarCompiler(byte_info([]))
    s = {"type": "object", "additionalProperties": False, "minProperties": 2,
         "patternProperties": {"^[0-9a-zA-Z_-]+$": {"type": "integer"}}}
    for order in ("schema", "any"):
        g = c.compile_json_schema(s, member_order=order)
        for doc, ok in (('{"a":1,"a":2}', False), ('{"a":1,"b":2}', True), ('{"b":1,"a":2,"c":3}', True),
                        ('{"a":1}', False), ('{"a.":1,"b":2}', False)):
            m = g.matcher()
            assert (m.accept_string(doc) and m.accept_token(BYTE_EOS)) == ok, (order, doc)
    bounded = {"type": "object", "properties": {"p": {}, "q": {}}, "additionalProperties": False,
               "patternProperties": {"^[a-z]+1$": {"type": "integer"}}}
    g = c.compile_json_schema(bounded, member_order="any")
    assert g.matcher().accept_string('{"p":1,"q":2}') and not g.matcher().accept_string('{"q":1,"p":2}')


def test_a_key_that_ends_the_readings_outside_the_watch(llama):
    """Github_hard o38435 (tests/data/maskbench-extra) in any member order: after
    `"analysis_level":"group","anat_only":true,"` a reading outside every watched object
    is still alive, so the watch masked nothing there; the token `a` ends that reading
    and leaves a key body whose every completion is used. The mask must refuse `a` as
    accept_token does (it allowed it, then allowed `nat`, which accept_token refused: a
    fuzz walk's `refused`); and every token the mask allows there is accepted."""
    info, _compiler, tok = llama
    path = os.path.join(os.path.dirname(__file__), "..", "data", "maskbench-extra", "Github_hard---o38435.json")
    with open(path, encoding="utf-8") as f:
        schema = json.load(f)["schema"]
    g = GrammarCompiler(info).compile_json_schema(schema, member_order="any")
    m = g.matcher()
    for t in tok.encode('{"analysis_level":"group","anat_only":true,"', add_special_tokens=False).ids:
        assert m.accept_token(t)
    allowed = set(m.get_allowed_tokens().tolist())
    a = tok.token_to_id("a")
    assert a not in allowed and not m.fork().accept_token(a)
    for t in sorted(allowed):
        assert m.fork().accept_token(t), tok.decode([t])
    assert any(m.fork().accept_token(t) for t in allowed)


def test_a_grammar_limit_met_by_the_watch_refuses_instead_of_raising(monkeypatch):
    """The watched objects' reads and masks step the automaton themselves; a limit met
    there (Azure Pipelines' service-schema in any member order: more than 4,096 parallel
    parses after `{"steps":[{"`) escaped accept_token / accept_string / fill_bitmask as
    an AutomatonLimit. Here the limit is lowered to meet it on a small schema: the step
    is refused, the error names the limit, the matcher stays where it was and offers EOS
    only, as Matcher does for a limit met in its own step."""
    from furca.constrain import automaton

    info = byte_info(["ab", '{"', '":', '",'])
    compilers = [GrammarCompiler(info) for _ in range(2)]  # made first: a new tokenizer's lexeme warm-up steps too
    monkeypatch.setattr(automaton, "MAX_CONFIGS", 6)

    def obj(*keys):
        return {"type": "object", "properties": {k: {"type": "string"} for k in keys}, "required": [keys[0]]}

    schema = {"type": "array", "items": {"anyOf": [obj("a", "b", "c"), obj("a", "d", "e"), obj("a", "f", "g"),
                                                   obj("b", "a", "h")]}}
    text = '[{"a":"x","b":"y"}]'
    m = compilers[0].compile_json_schema(schema, member_order="any").matcher()
    assert not m.accept_string(text) and "grammar limit" in m.error and m.num_accepted == 0
    m = compilers[1].compile_json_schema(schema, member_order="any").matcher()
    for i, b in enumerate(text.encode()):
        bits = allowed_set(m, info)
        if not m.accept_token(b):
            assert "grammar limit" in m.error and m.num_accepted == i
            assert list(np.flatnonzero(allowed_set(m, info))) == [BYTE_EOS]
            return
        assert bits[b]
    raise AssertionError("the lowered limit was never met")
