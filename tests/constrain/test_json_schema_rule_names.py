"""A property named like a rule the translator defines under a fixed name (`ws`,
`key-esc`, `key-rest`, `key-other`: json_schema/grammar.py FIXED_NAMES) keeps its own
rule. Before the names were reserved, such a property's rule was redefined by the fixed
one: `{"key-rest":abc"}` was accepted and `{"key-rest":"abcd"}` rejected."""
import json

import pytest

from furca.constrain.json_schema import schema_to_gbnf
from furca.constrain.json_schema.grammar import FIXED_NAMES

from .conftest import BYTE_EOS
from .gbnf_reference import Matcher, parse_gbnf


def _schema(name):
    # an extra-member object (additionalProperties allowed) beside the property, so the
    # key tries' rules are defined too
    return {"type": "object", "required": [name],
            "properties": {name: {"type": "string", "minLength": 3},
                           "b": {"type": "object", "properties": {"x": {"type": "integer"}}}}}


def _accepts(g, text):
    m = g.matcher()
    for b in text.encode():
        if not m.accept_token(b):
            return False
    return m.accept_token(BYTE_EOS)


@pytest.mark.parametrize("name", [n for n in FIXED_NAMES if n != "root"] + ["root", "json-value"])
@pytest.mark.parametrize("whitespace", ["compact", "flexible"])
def test_a_property_named_like_a_fixed_rule_keeps_its_schema(byte_compiler, name, whitespace):
    schema = _schema(name)
    good = [{name: "abcd"}, {name: "abc", "b": {"x": 1, "y": [2]}}, {name: "abc", "z": None}]
    bad_texts = ['{"%s":abc"}' % name, '{"%s":"ab"}' % name, '{"%s":"abc","b":{"x":"1"}}' % name]
    text = schema_to_gbnf(schema, whitespace=whitespace)
    ref = Matcher(parse_gbnf(text)).fullmatch
    g = byte_compiler.compile_json_schema(schema, whitespace=whitespace)
    for v in good:
        s = json.dumps(v, separators=(",", ":"))
        assert ref(s), s
        assert _accepts(g, s), s
    for s in bad_texts:
        assert not ref(s), s
        assert not _accepts(g, s), s


def test_fixed_rules_keep_their_names():
    text = schema_to_gbnf(_schema("key-rest"))
    names = [line.split(" ::= ")[0] for line in text.splitlines()]
    assert "key-rest" in names and "key-rest-2" in names  # the generic rule and the property's
