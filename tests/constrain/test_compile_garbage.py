"""A JSON-schema compile leaves no reference cycle behind: the translator, its nodes and
the IR are freed by reference counting when the compile returns, not by the cyclic GC's
next pass (which would traverse them all inside the request's first mask)."""
from __future__ import annotations

import gc

from furca.constrain.json_schema import schema_to_gbnf, schema_to_ir
from furca.constrain.json_schema.compiler import Compiler
from furca.constrain.json_schema.grammar import Alt, Seq

# required-first and properties order differ (orders.py builds both), optional members,
# extra members (the key trie), a recursive $ref, strings, numbers, arrays
SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"$ref": "#/$defs/node"},
                   "d": {"type": "array", "items": {"type": "number"}}},
    "required": ["c", "a"],
    "$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
}


def _alive():
    return sum(1 for o in gc.get_objects() if type(o) in (Compiler, Seq, Alt))


def test_translating_leaves_no_cycles():
    schema_to_ir(SCHEMA)  # fills the process-wide caches (keys._ESCAPES: the key tries' escape rules), kept on purpose
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        before = _alive()
        for emit in (schema_to_ir, schema_to_gbnf):
            out = emit(SCHEMA)
            assert out
            assert _alive() == before, emit.__name__  # nothing of the translator left for the GC
    finally:
        if was:
            gc.enable()
