"""Formats and keywords beyond the finite ones: idn-email, allOf merges of
patternProperties with an open additionalProperties; each checked against
`jsonschema` on the same instances."""
from __future__ import annotations

from .test_json_schema_finite import c, check
from furca.constrain.json_schema import schema_to_gbnf
from .gbnf_reference import Matcher, parse_gbnf


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
