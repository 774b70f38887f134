"""Finite schemas (const/enum bound: every keyword checked on the literals), `not` in
allOf, format + prefix pattern, finite patternProperties, oneOf with literal patterns.

Each case: the valid instances are accepted, the invalid ones rejected, and
`jsonschema` agrees with the labels (so the tests check the grammar against the
validator, not against hand-written expectations alone)."""
from __future__ import annotations

import json

import jsonschema
import pytest

from furca.constrain.json_schema import schema_to_gbnf
from furca.constrain.json_schema.prefix import derive, pattern_words, prefixed
from furca.constrain.json_schema.formats import format_grammar
from furca.errors import CompileError
from .gbnf_reference import Matcher, parse_gbnf


def c(x):
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False)


def check(schema, valid, invalid):
    cls_ = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    v = cls_(schema, format_checker=cls_.FORMAT_CHECKER)
    m = Matcher(parse_gbnf(schema_to_gbnf(schema))).fullmatch
    for x in valid:
        assert v.is_valid(x), x
        assert m(c(x)), "should accept %s" % c(x)
    for x in invalid:
        assert not v.is_valid(x), x
        assert not m(c(x)), "should reject %s" % c(x)


# ----------------------------------------------------------------- const/enum bound
def test_integral_floats_follow_the_draft():
    """1.0 is an integer from draft 6 on, not in draft 4: an enum under `integer` (the
    ordinary enum path, and the finite path when more keywords bound it) spells 731.0
    only where the draft calls it an integer. Found by bench/constrain_fuzz.py
    (Github_easy o21860, a draft-04 schema)."""
    d4, d7 = "http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-07/schema#"
    for extra in ({}, {"minimum": 2}):
        check({"$schema": d4, "type": "integer", "enum": [3, 731], **extra}, [731, 3], [731.0, 3.0, 5])
        check({"$schema": d7, "type": "integer", "enum": [3, 731], **extra}, [731, 731.0, 3.0], [5])
    check({"$schema": d4, "enum": [3, 731]}, [731, 731.0], [5])  # no type: 731.0 equals 731
    check({"$schema": d4, "type": "integer", "enum": [3, 731], "minimum": 4}, [731], [3, 731.0])


def test_literals_checked_without_a_validator(monkeypatch):
    """A literal bound whose other keywords jsonschema reads are only type, pattern and
    the lengths (any other it ignores: Azure Pipelines' ignoreCase, doNotSuggest) is
    checked without building a validator (finite._quick), with jsonschema's verdicts:
    the draft's integer, `re.search`, lengths in code points."""
    from furca.constrain.json_schema import finite

    built = []
    real = finite._validator
    monkeypatch.setattr(finite, "_validator", lambda c, s: built.append(s) or real(c, s))
    d4, d7 = "http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-07/schema#"
    check({"enum": ["PowerShell@1", "PowerShell@2"], "pattern": "^PowerShell@1$", "ignoreCase": "value",
           "doNotSuggest": False}, ["PowerShell@1"], ["PowerShell@2", "powershell@1"])
    check({"enum": ["ab", "abc", "日本語", 7], "minLength": 3, "maxLength": 3}, ["abc", "日本語", 7], ["ab"])
    check({"enum": ["a1", "b2", 3, None], "type": ["string", "null"], "pattern": "[0-9]"}, ["a1", "b2", None], [3])
    check({"const": "x-y", "pattern": "y$", "nullable": True}, ["x-y"], ["y"])
    check({"$schema": d4, "type": "integer", "enum": [3, 731], "maxLength": 2}, [731, 3], [731.0])
    check({"$schema": d7, "type": "integer", "enum": [3, 731], "maxLength": 2}, [731, 731.0], [5])
    assert built == []
    check({"enum": ["a@b.co", "bb"], "minLength": 2, "format": "email"}, ["a@b.co"], ["bb"])  # format: a validator
    assert len(built) == 1


def test_enum_with_not_of_any_schema():
    check({"allOf": [{"enum": [{"foo": 1}, {"bar": True}, {"foo": 1, "bar": 2}, {}]},
                     {"not": {"additionalProperties": {"type": "boolean"}}}]},
          [{"foo": 1}, {"foo": 1, "bar": 2}], [{"bar": True}, {}, {"foo": 2}, 1, "foo"])


def test_const_with_property_names_and_not():
    schema = {"const": {"a1": {"b2": 1}},
              "propertyNames": {"pattern": "^[a-z][0-9]$"},
              "not": {"propertyNames": {"not": {"pattern": "1"}}},
              "maxProperties": 1}
    check(schema, [{"a1": {"b2": 1}}], [{"a1": {"b2": 2}}, {"ab": 1}, {}])
    bad = dict(schema, const={"aa": 1})  # the const fails propertyNames: nothing validates
    with pytest.raises(CompileError, match="accepts no JSON value"):
        schema_to_gbnf(bad)


def test_enum_bound_through_ref_with_unique_items_and_contains():
    schema = {"$defs": {"e": {"enum": [[1, 2], [1, 1], [2], [3, 3]]}},
              "allOf": [{"$ref": "#/$defs/e"}, {"uniqueItems": True, "contains": {"const": 1}}]}
    check(schema, [[1, 2]], [[1, 1], [2], [3, 3], [1]])


def test_enum_with_if_then_else_and_dependent_required():
    schema = {"enum": [{"a": 1}, {"a": 1, "b": 2}, {"a": "x"}, {"a": "x", "b": 0}],
              "if": {"properties": {"a": {"type": "string"}}},
              "then": {"dependentRequired": {"a": ["b"]}},
              "else": {"not": {"required": ["b"]}}}
    check(schema, [{"a": 1}, {"a": "x", "b": 0}], [{"a": 1, "b": 2}, {"a": "x"}])


def test_draft4_enum_uses_draft4_rules():
    schema = {"$schema": "http://json-schema.org/draft-04/schema#",
              "enum": [1, 2, 3], "maximum": 2, "exclusiveMaximum": True, "not": {"enum": [0]}}
    check(schema, [1], [2, 3, 0])


def test_integral_literals_keep_both_spellings():
    m = Matcher(parse_gbnf(schema_to_gbnf({"enum": [1, 2.5, "a"], "not": {"type": "string"}}))).fullmatch
    assert m("1") and m("1.0") and m("2.5") and not m('"a"')


# ----------------------------------------------------------------- not in allOf
def test_two_nots_merge_as_not_of_any_of():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "additionalProperties": False,
              "allOf": [{"anyOf": [{"not": {"required": ["a"]}}, {"required": ["b"]}]},
                        {"anyOf": [{"not": {"required": ["b"]}}, {"required": ["a"]}]}]}
    check(schema, [{}, {"a": 1, "b": 2}], [{"a": 1}, {"b": 2}])


# ----------------------------------------------------------------- format + pattern
@pytest.mark.parametrize("pattern,valid,invalid", [
    ("^https?://", ["http://x.org/a", "https://x.org"], ["ftp://x.org", "http:/x", "https//x"]),
    ("^(wss?|wss?\\+unix)://", ["ws://h:80/p", "wss+unix://h", "wss://h?q=1"], ["http://h", "ws:/h", "wsx://h"]),
    ("^mailto:", ["mailto:a@b.c"], ["http://a", "mailto"]),
])
def test_uri_with_prefix_pattern(pattern, valid, invalid):
    check({"type": "string", "format": "uri", "pattern": pattern}, valid, invalid)


def test_uri_with_prefix_pattern_in_all_of():
    check({"type": "string", "allOf": [{"format": "uri"}, {"pattern": "^https?://"}]},
          ["http://x.org", "https://x.io/a?b#c"], ["ftp://x.org", "http:x"])


def test_format_with_other_patterns_is_their_product():
    """Patterns that are no finite prefix: the product of the automata (scalars.py)."""
    ends_x = {"type": "string", "format": "uri", "pattern": "x$"}
    check(ends_x, ["http://a/x", "a:x"], ["http://a/y"])
    check({"type": "string", "format": "uri", "pattern": "^a+://"}, ["aa://h", "a://h/p"], ["b://h"])
    assert not Matcher(parse_gbnf(schema_to_gbnf(ends_x))).fullmatch('"x"')  # no scheme: no URI
    with pytest.raises(CompileError, match="accepts no JSON value"):  # no URI is "a" or "b"
        schema_to_gbnf({"type": "string", "format": "uri", "pattern": "^(a|b)$"})


def test_derivative_and_words():
    uri = format_grammar("uri")
    assert prefixed(uri, "^https?://", "#") is not None
    assert prefixed(uri, "^http", "#") != prefixed(uri, "^https", "#")
    assert pattern_words("^(ab|c)d?$", "#") == {"ab", "abd", "c", "cd"}
    assert pattern_words("^a+$", "#") is None and pattern_words("ab", "#") is None
    assert derive(format_grammar("uuid"), ord("-")) == derive(format_grammar("uuid"), ord("g"))  # both empty


# ----------------------------------------------------------------- finite patternProperties
def test_finite_pattern_properties_become_declared_names():
    schema = {"type": "object", "properties": {"mbox": {"type": "string"}, "account": False},
              "patternProperties": {"^(mbox_sha1sum|account|openid)$": {"type": "null"}, "^x": {"type": "integer"}},
              "required": ["mbox"], "additionalProperties": False}
    check(schema, [{"mbox": "a"}, {"mbox": "a", "openid": None}, {"mbox": "a", "mbox_sha1sum": None, "x1": 2}],
          [{"mbox": "a", "account": None}, {"mbox": "a", "openid": 1}, {"mbox": "a", "y": 1}, {"mbox": "a", "x": "s"}])


def test_one_of_by_exclusive_pattern_properties():
    one = {"type": "object", "properties": {"mbox": {"type": "string", "pattern": "^mailto:"}},
           "patternProperties": {"^(openid|account)$": {"type": "null"}}, "required": ["mbox"]}
    two = {"type": "object", "properties": {"openid": {"type": "string"}},
           "patternProperties": {"^(mbox|account)$": {"type": "null"}}, "required": ["openid"]}
    check({"oneOf": [one, two]}, [{"mbox": "mailto:a"}, {"openid": "x"}],
          [{"mbox": "mailto:a", "openid": "x"}, {"mbox": "http:a"}])


def test_one_of_by_literal_patterns_is_exclusive():
    branch = lambda name: {"type": "object", "additionalProperties": False, "required": ["type"],  # noqa: E731
                           "properties": {"type": {"type": "string", "pattern": "^%s$" % name},
                                          "n": {"type": "integer"}}}
    check({"oneOf": [branch("Perlin"), branch("Billow")]},
          [{"type": "Perlin", "n": 1}, {"type": "Billow"}], [{"type": "Perl"}, {"type": "Perlin", "m": 1}])


def test_one_of_by_a_name_the_other_branch_excludes():
    """A branch whose tag is `not` an enum of the names the other branches give by
    const (angular's targets: a custom builder, or one of the known ones): the tag's
    values are disjoint, so each branch requires it. Before, no proof was found, the
    object type left both branches and the oneOf accepted nothing."""
    known = {"type": "object", "properties": {"b": {"const": "x"}, "n": {"type": "integer"}}}
    other = {"type": "object", "properties": {"b": {"const": "y"}}}
    custom = {"type": "object", "properties": {"b": {"type": "string", "not": {"enum": ["x", "y"]}}},
              "required": ["b"]}
    check({"oneOf": [custom, known, other]}, [{"b": "x", "n": 1}, {"b": "y"}, {"b": "z"}],
          [{"b": 1}, {}, {"b": "x", "n": "s"}])


def test_if_then_else_on_an_enum_property_keeps_the_exclusion():
    """The rewrite of `if` leaves furca's internal not-strings keyword beside the enum;
    the finite path must apply it (jsonschema would ignore it)."""
    schema = {"type": "object", "required": ["type"],
              "properties": {"type": {"type": "string", "enum": ["application", "package"]}},
              "if": {"properties": {"type": {"enum": ["package"]}}},
              "then": {"required": ["name"]}}
    check(schema, [{"type": "package", "name": "x"}, {"type": "application"}], [{"type": "package"}])
