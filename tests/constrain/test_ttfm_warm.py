"""One-time set-up a GrammarCompiler does at construction, so that a request (or a
worker forked from a warmed-up process) does not pay it on its clock: the JSON formats'
grammars (json_schema/formats.py) are built once per process, and a grammar compiled from
the prebuilt ones is the grammar compiled without them."""

from __future__ import annotations

from furca.constrain import GrammarCompiler
from furca.constrain.json_schema import formats, schema_to_gbnf, schema_to_ir

from .conftest import byte_info


def test_compiler_builds_every_format_once():
    formats._CACHE.clear()
    GrammarCompiler(byte_info())
    assert set(formats._CACHE) == set(formats._BUILDERS)
    built = dict(formats._CACHE)
    GrammarCompiler(byte_info())
    assert all(formats._CACHE[n] is built[n] for n in built)  # not rebuilt


def test_prebuilt_formats_give_the_same_grammar():
    schema = {"type": "object", "properties": {f: {"type": "string", "format": f} for f in formats._BUILDERS},
              "required": ["date-time"]}
    formats._CACHE.clear()
    lazy_gbnf, lazy_ir = schema_to_gbnf(schema), schema_to_ir(schema)
    formats._CACHE.clear()
    formats.build_formats()
    assert schema_to_gbnf(schema) == lazy_gbnf
    assert schema_to_ir(schema) == lazy_ir
