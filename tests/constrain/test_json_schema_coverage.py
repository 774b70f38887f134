"""Member orders (properties order, or required-first), idn-email, allOf merges of
patternProperties with an open additionalProperties; each checked against
`jsonschema` on the same instances."""
from __future__ import annotations

import itertools

from .test_json_schema_finite import c, check
from furca.constrain.json_schema import schema_to_gbnf
from .gbnf_reference import Matcher, parse_gbnf


def test_required_first_order_is_accepted_besides_properties_order():
    schema = {"type": "object", "additionalProperties": False,
              "properties": {"b": {"type": "integer"}, "c": {"type": "integer"}, "a": {"type": "integer"},
                             "d": {"type": "integer"}},
              "required": ["a", "c"]}
    m = Matcher(parse_gbnf(schema_to_gbnf(schema))).fullmatch
    accepted = {order for k in range(5) for order in itertools.permutations("abcd", k)
                if m("{" + ",".join('"%s":1' % x for x in order) + "}")}
    # properties order (b c a d) and required-first order (a c, then b d), each with the
    # optional members left out or not; nothing else, and never a member twice
    want = set()
    for base in ("bcad", "acbd"):
        for k in range(5):
            for sub in itertools.combinations(base, k):
                if "a" in sub and "c" in sub:
                    want.add(sub)
    assert accepted == want
    check(schema, [{"a": 1, "c": 2}, {"b": 0, "c": 1, "a": 2}], [{"a": 1}, {"a": 1, "c": "x"}, {"a": 1, "c": 1, "e": 1}])


def test_required_order_from_dependencies_and_merged_branches():
    schema = {"type": "object", "properties": {"radius": {"type": "number"}, "side": {"type": "number"},
                                               "shape": {"enum": ["circle", "square"]}},
              "required": ["shape"],
              "oneOf": [{"properties": {"shape": {"const": "circle"}}, "required": ["radius"]},
                        {"properties": {"shape": {"const": "square"}}, "required": ["side"]}]}
    m = Matcher(parse_gbnf(schema_to_gbnf(schema))).fullmatch
    assert m('{"shape":"circle","radius":1}') and m('{"radius":1,"shape":"circle"}')
    assert m('{"shape":"square","side":1}') and m('{"side":1,"shape":"square"}')
    assert not m('{"shape":"circle","side":1}') and not m('{"shape":"circle"}') and not m('{"side":1}')
    deps = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}, "z": {"type": "integer"}},
            "required": ["z"], "dependentRequired": {"x": ["y"]}}
    check(deps, [{"z": 1, "x": 1, "y": 2}, {"x": 1, "y": 2, "z": 3}, {"z": 1}], [{"z": 1, "x": 1}, {"x": 1, "y": 1}])


def test_all_required_with_property_count():
    schema = {"type": "object", "properties": {"b": {}, "a": {}}, "required": ["a", "b"], "maxProperties": 3,
              "additionalProperties": {"type": "integer"}}
    check(schema, [{"a": 1, "b": 2}, {"b": 1, "a": 2, "x": 3}], [{"a": 1, "b": 2, "x": 3, "y": 4}, {"a": 1, "b": 2, "x": "s"}])


def test_idn_email():
    schema = {"type": "string", "format": "idn-email"}
    check(schema, ["a@example.com", "用户@example.com", "x.y@[127.0.0.1]"], ["example.com"])
    m = Matcher(parse_gbnf(schema_to_gbnf(schema))).fullmatch  # jsonschema only asks for an "@"
    assert not any(m(c(x)) for x in ("a@", "@b.c", "a b@example.com", "a@exa mple.com"))


def test_all_of_merges_pattern_properties_with_open_additional_properties():
    """`not required` rewrites to {properties: {x: false}, additionalProperties: true};
    merged with a closed object with patternProperties it constrains only x."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "patternProperties": {"^x-": {"type": "string"}}, "additionalProperties": False,
              "anyOf": [{"required": ["a"], "not": {"required": ["b"]}}, {"required": ["b"], "not": {"required": ["a"]}}]}
    check(schema, [{"a": 1}, {"b": 2, "x-1": "s"}], [{"a": 1, "b": 2}, {}, {"a": 1, "x-1": 2}, {"a": 1, "y": "s"}])
