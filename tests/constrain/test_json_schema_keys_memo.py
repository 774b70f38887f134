"""schema_key (the translator's memo key and the compile cache's) and RefIndex's base URIs."""
import json

import pytest

from furca.constrain.json_schema.schema_keys import schema_key
from furca.constrain.json_schema.refs import RefIndex

VALUES = [
    None, True, False, 0, 1, 1.0, -0.0, 0.0, 1.5, float("inf"), "", "1", "true", "null", [], {}, [1], ["1"],
    [True], [1.0], {"a": 1}, {"a": 1.0}, {"a": True}, {"a": "1"}, {"a": 1, "b": 2}, {"b": 2, "a": 1},
    {"a": [1, {"b": None}]}, {"a": [1, {"b": False}]}, [[]], [{}], {"": {}}, {"a": {"a": {}}},
]


def _text(x):
    return json.dumps(x, ensure_ascii=False, separators=(",", ":"))


def test_equal_keys_exactly_for_equal_json_texts():
    for x in VALUES:
        for y in VALUES:
            assert (schema_key(x) == schema_key(y)) == (_text(x) == _text(y)), (x, y)
            if _text(x) == _text(y):
                assert hash(schema_key(x)) == hash(schema_key(y))


def test_json_key_spelling_and_tuples_as_json_does():
    assert schema_key({1: "x"}) == schema_key({"1": "x"})
    assert schema_key({True: "x"}) == schema_key({"true": "x"})
    assert schema_key((1, 2)) == schema_key([1, 2])


def test_shared_subschemas_keyed_once():
    sub = {"type": "string"}
    known = {None: []}
    k = schema_key({"properties": {"a": sub, "b": sub}}, known)
    assert known[id(sub)] == schema_key(sub) and any(x is sub for x in known[None])
    assert schema_key(sub, known) is known[id(sub)]
    assert k == schema_key({"properties": {"a": {"type": "string"}, "b": {"type": "string"}}})


def test_errors_as_json_dumps():
    d = {"a": 1}
    d["self"] = d
    with pytest.raises(ValueError):
        schema_key(d)
    lst = []
    lst.append(lst)
    with pytest.raises(ValueError):
        schema_key(lst)
    with pytest.raises(TypeError):
        schema_key({"a": object()})


def test_ref_index_bases_only_where_they_change():
    root = {"$id": "http://x.test/root.json",
            "$defs": {"a": {"$anchor": "A", "type": "integer", "properties": {"id": {"type": "string"}}},
                      "b": {"$id": "b/", "items": [{"$id": "c.json", "type": "string"}, {"type": "null"}]}}}
    r = RefIndex(root)
    assert r.base == {"#": "http://x.test/root.json", "#/$defs/b": "http://x.test/b/",
                      "#/$defs/b/items/0": "http://x.test/b/c.json"}
    assert r.base_at("#/$defs/a/properties/id") == "http://x.test/root.json"
    assert r.base_at("#/$defs/b/items/1") == "http://x.test/b/"
    assert r.base_at("#/$defs/b/items/0/anyOf/2") == "http://x.test/b/c.json"
    assert r.resolve("#A", "#") == ("#/$defs/a", root["$defs"]["a"])
    assert r.resolve("c.json", "#/$defs/b/items/1")[0] == "#/$defs/b/items/0"
    assert r.resolve("http://x.test/b/", "#")[1] is root["$defs"]["b"]
