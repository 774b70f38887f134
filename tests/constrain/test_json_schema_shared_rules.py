"""Subschemas that differ only in annotations share one rule (json_schema/compiler.py,
NO_LANGUAGE), and only annotations are dropped from the memo key."""
from furca.constrain.json_schema import schema_to_gbnf, schema_to_ir


def _rules(schema):
    return schema_to_ir(schema).rules


def test_annotations_do_not_split_rules():
    plain = {"type": "object", "properties": {
        "a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"}}}
    annotated = {"type": "object", "properties": {
        "a": {"type": "string", "description": "first"},
        "b": {"type": "string", "title": "B", "default": "x", "examples": ["y"]},
        "c": {"description": "third", "type": "string", "readOnly": True, "$comment": "z"}}}
    assert len(_rules(annotated)) == len(_rules(plain))
    assert schema_to_gbnf(annotated) == schema_to_gbnf(plain)


def test_only_top_level_annotations_of_a_subschema_are_dropped():
    # a property named "description" is not an annotation: the objects differ
    a = {"type": "object", "properties": {"description": {"type": "integer"}}, "required": ["description"]}
    b = {"type": "object", "properties": {"title": {"type": "integer"}}, "required": ["title"]}
    schema = {"type": "array", "prefixItems": [a, b], "items": False, "minItems": 2}
    text = schema_to_gbnf(schema)
    assert "description" in text and "title" in text
    # a const's members are data, not annotations
    c1 = {"const": {"description": 1}}
    c2 = {"const": {"description": 2}}
    text = schema_to_gbnf({"type": "array", "prefixItems": [c1, c2], "items": False, "minItems": 2})
    assert "1" in text and "2" in text


def test_language_changing_keywords_still_split_rules():
    schema = {"type": "object", "properties": {
        "a": {"type": "string", "description": "same"},
        "b": {"type": "string", "description": "same", "maxLength": 3}}}
    text = schema_to_gbnf(schema)
    one = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
    assert text != schema_to_gbnf(one)


def test_rules_with_equal_bodies_are_one_rule():
    # different memo keys (minItems 0 is no bound), the same rule body: one rule (Grammar.share)
    a = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}},
                                          "b": {"type": "array", "items": {"type": "integer"}, "minItems": 0}}}
    b = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}},
                                          "b": {"type": "array", "items": {"type": "integer"}}}}
    assert sorted(_rules(a)) == sorted(_rules(b))
    assert schema_to_gbnf(a) == schema_to_gbnf(b)


def test_share_keeps_the_first_rule():
    from furca.constrain.json_schema.grammar import Grammar, lit, seq

    g = Grammar()
    r1 = g.share("x", seq(lit("a"), lit("b")))
    r2 = g.share("y", seq(lit("ab")))
    r3 = g.share("z", lit("abc"))
    assert r1 == r2 and r1.name == "x" and r3.name == "z" and "y" not in g.rules
