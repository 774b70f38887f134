"""The metaschema check (furca/constrain/json_schema/metaschema.py): its fast interpreter
says "valid" only where jsonschema does, and invalid schemas get jsonschema's message."""
from __future__ import annotations

import copy
import json
import os
import random

import jsonschema
import pytest
from jsonschema.exceptions import best_match

from furca.constrain.json_schema import schema_to_ir
from furca.constrain.json_schema.metaschema import _fast_valid, check_metaschema
from furca.errors import CompileError

from .test_json_schema_helpers import MASKBENCH

D4 = "http://json-schema.org/draft-04/schema#"
D6 = "http://json-schema.org/draft-06/schema#"
D7 = "http://json-schema.org/draft-07/schema#"
BAD_VALUES = [1.5, -1, 0, "x", None, True, [], {}, ["string", "string"], "nosuch", [1], {"a": 1}, [1, 1]]
KEYWORDS = ["type", "minLength", "maxItems", "required", "enum", "items", "properties", "minimum",
            "exclusiveMinimum", "multipleOf", "dependencies", "additionalProperties", "pattern", "allOf",
            "anyOf", "not", "definitions", "uniqueItems", "patternProperties", "propertyNames", "const"]


def _schemas():
    out = []
    for name in sorted(n for n in os.listdir(MASKBENCH) if n.endswith(".json")):
        with open(os.path.join(MASKBENCH, name), encoding="utf-8") as f:
            s = json.load(f)["schema"]
        if isinstance(s, dict):
            out.append(s)
    return out


def _validator_class(schema):
    declared = schema.get("$schema")
    if isinstance(declared, str):
        return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return jsonschema.Draft7Validator


def _mutate(schema, rng):
    """A copy of `schema` with one keyword of one subschema set to a random value."""
    s = copy.deepcopy(schema)
    nodes = []

    def walk(n):
        if isinstance(n, dict):
            nodes.append(n)
            for v in n.values():
                walk(v)
        elif isinstance(n, list):
            for v in n:
                walk(v)

    walk(s)
    node = rng.choice(nodes)
    node[rng.choice(list(node) + KEYWORDS)] = rng.choice(BAD_VALUES)
    return s


def test_fast_check_is_sound_on_mutated_schemas():
    """Whenever the fast check says valid, jsonschema agrees (random keyword corruption of
    the bundled MaskBench schemas, drafts 4, 6, 7 and none); and it does say valid for the
    unmutated ones jsonschema accepts under draft 4 / 6 / 7 (the point of having it)."""
    rng = random.Random(14)
    fast_true = invalid = 0
    for base in _schemas():
        cls_ = _validator_class(base)
        if cls_ in (jsonschema.Draft4Validator, jsonschema.Draft6Validator, jsonschema.Draft7Validator) \
                and jsonschema.validators.validator_for(cls_.META_SCHEMA)(cls_.META_SCHEMA).is_valid(base):
            assert _fast_valid(cls_, base), base
        for _ in range(6):
            s = _mutate(base, rng)
            try:
                cls_ = _validator_class(s)
            except Exception:  # noqa: BLE001 - an unusable $schema: nothing to compare
                continue
            valid = cls_(cls_.META_SCHEMA).is_valid(s)
            invalid += not valid
            if _fast_valid(cls_, s):
                fast_true += 1
                assert valid, s
    assert fast_true > 100 and invalid > 100  # both sides were exercised


@pytest.mark.parametrize("schema, valid", [
    ({"type": ["string", "string"]}, False),  # uniqueItems
    ({"required": ["a", "a"]}, False),
    ({"required": []}, True),  # draft 7: no minItems
    ({"$schema": D4, "required": []}, False),  # draft 4: minItems 1
    ({"minLength": -1}, False),
    ({"multipleOf": 0}, False),
    ({"$schema": D4, "multipleOf": 0}, False),
    ({"$schema": D4, "minimum": 1, "exclusiveMinimum": True}, True),
    ({"$schema": D4, "exclusiveMinimum": 5}, False),
    ({"$schema": D4, "exclusiveMaximum": True}, False),  # dependencies: needs maximum
    ({"$schema": D6, "exclusiveMinimum": 5}, True),
    ({"$schema": D4, "enum": [1, True, "1", None]}, True),  # distinct for jsonschema
    ({"$schema": D4, "enum": [1, 1.0]}, False),
    ({"enum": [1, 1]}, True),  # draft 7: no uniqueItems on enum
    ({"items": [{"type": "string"}, True]}, True),
    ({"items": []}, False),  # schemaArray: minItems 1
    ({"patternProperties": {"^a": {"type": "nosuch"}}}, False),
    ({"dependencies": {"a": ["b", 1]}}, False),
    ({"dependencies": {"a": {"type": "string"}}}, True),
    ({"properties": {"a": {"properties": {"b": {"type": 5}}}}}, False),
    ({"$defs": {"a": {"type": 5}}}, True),  # draft 7 does not look into $defs
    ({"definitions": {"a": {"type": 5}}}, False),
    ({"format": "no-such-format", "pattern": "("}, True),  # format: an annotation in the metaschema
])
def test_fast_check_matches_jsonschema(schema, valid):
    cls_ = _validator_class(schema)
    assert cls_(cls_.META_SCHEMA).is_valid(schema) is valid  # the case says what jsonschema says
    assert _fast_valid(cls_, schema) is valid  # never valid when invalid; these valid forms take the fast path


def test_doubt_goes_to_jsonschema():
    """A float where an integer is due: jsonschema (draft 7 counts 1.0 as an integer) decides."""
    assert not _fast_valid(jsonschema.Draft7Validator, {"minLength": 1.0})
    check_metaschema({"minLength": 1.0})  # valid: no error
    with pytest.raises(CompileError, match="invalid schema"):
        check_metaschema({"minLength": 1.5})


@pytest.mark.parametrize("schema", [
    {"minLength": -1},
    {"properties": {"a": {"type": "nosuch"}}},
    {"$schema": D4, "properties": {"a": {"required": []}}},
    {"$schema": D7, "items": {"type": ["string", "string"]}},
])
def test_invalid_schema_message_is_jsonschemas(schema):
    """The CompileError names the pointer and words jsonschema's best_match."""
    cls_ = _validator_class(schema)
    err = best_match(cls_(cls_.META_SCHEMA).iter_errors(schema))
    path = "#" + "".join("/" + str(p) for p in err.absolute_path)
    with pytest.raises(CompileError) as e:
        check_metaschema(schema)
    assert str(e.value) == "%s: invalid schema: %s" % (path, err.message[:300])
    with pytest.raises(CompileError, match="invalid schema"):
        schema_to_ir(schema)


def test_schema_valid_under_another_draft_only_is_accepted():
    """Without $schema, a schema draft 7 rejects but draft 4 accepts passes (the
    fast check's doubt goes to jsonschema's candidates in turn)."""
    draft4 = {"type": "number", "minimum": 0, "exclusiveMinimum": True}  # a draft-4 flag
    assert not jsonschema.Draft7Validator(jsonschema.Draft7Validator.META_SCHEMA).is_valid(draft4)
    check_metaschema(draft4)  # no error: draft 4 accepts it
    with pytest.raises(CompileError, match="invalid schema"):
        check_metaschema({"dependencies": {"a": ["b", 1]}})  # invalid under 7, 2020-12 and 4 alike


def test_compiled_metaschema_made_once_and_unknown_keywords_only_where_visited():
    """The fast check runs on a compiled copy of the metaschema, made at its first use; a
    keyword it cannot read sends only the schemas that reach its node to jsonschema."""
    from furca.constrain.json_schema import metaschema

    assert _fast_valid(jsonschema.Draft7Validator, {"type": "string"})
    compiled = metaschema._COMPILED[id(jsonschema.Draft7Validator.META_SCHEMA)]
    assert _fast_valid(jsonschema.Draft7Validator, {"properties": {"a": {"type": "integer"}}})
    assert metaschema._COMPILED[id(jsonschema.Draft7Validator.META_SCHEMA)] is compiled

    class Draft7Validator:  # a metaschema with a keyword the fast check does not know, in one place
        META_SCHEMA = {"type": "object", "properties": {
            "odd": {"$ref": "#/definitions/odd"}, "items": {"$ref": "#"}, "n": {"type": "integer", "minimum": 0}},
            "definitions": {"odd": {"noSuchKeyword": 1}}}

    assert _fast_valid(Draft7Validator, {"items": {"n": 3}})
    assert not _fast_valid(Draft7Validator, {"items": {"n": -1}})
    assert not _fast_valid(Draft7Validator, {"items": {"odd": 1}})  # reaches the unknown keyword: jsonschema decides
    assert Draft7Validator in metaschema._UNSUPPORTED
    metaschema._UNSUPPORTED.discard(Draft7Validator)


def test_first_check_compiles_every_draft_and_knows_their_uris():
    """The first check compiles the metaschemas of drafts 4, 6 and 7 together and enters
    their URIs (with and without '#') in _DECLARED, so that a worker forked after one
    warm-up compile neither compiles draft 4's nor parses the URI; answers and messages
    stay each draft's."""
    from furca.constrain.json_schema import metaschema

    check_metaschema({"type": "string"})
    for cls_ in (jsonschema.Draft4Validator, jsonschema.Draft6Validator, jsonschema.Draft7Validator):
        meta = cls_.META_SCHEMA
        assert metaschema._COMPILED[id(meta)][0] is meta
    for uri, cls_ in metaschema._DECLARED.items():
        assert jsonschema.validators.validator_for({"$schema": uri}) is cls_
    d4 = "http://json-schema.org/draft-04/schema#"
    assert metaschema._DECLARED[d4] is jsonschema.Draft4Validator
    assert metaschema._DECLARED[d4[:-1]] is jsonschema.Draft4Validator
    check_metaschema({"$schema": d4, "type": "object", "exclusiveMinimum": True, "minimum": 1})  # draft 4 only
    with pytest.raises(CompileError, match="invalid schema"):
        check_metaschema({"$schema": "http://json-schema.org/draft-07/schema#", "exclusiveMinimum": True})
    with pytest.raises(CompileError, match="invalid schema"):
        check_metaschema({"$schema": d4[:-1], "minLength": -1})
    check_metaschema({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "string"})
    assert "https://json-schema.org/draft/2020-12/schema" not in metaschema._DECLARED
