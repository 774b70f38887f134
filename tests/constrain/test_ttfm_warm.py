"""One-time set-up a GrammarCompiler does at construction, so that a request (or a
worker forked from a warmed-up process) does not pay it on its clock: the JSON formats'
grammars (json_schema/formats.py) are built once per process, and a grammar compiled from
the prebuilt ones is the grammar compiled without them."""

from __future__ import annotations

from furca.constrain import GrammarCompiler
from furca.constrain.json_schema import formats, schema_to_gbnf, schema_to_ir

from .conftest import byte_info, needs_compiled_walks


def test_compiler_builds_every_format_once():
    formats._CACHE.clear()
    GrammarCompiler(byte_info())
    assert set(formats._CACHE) == set(formats._BUILDERS)
    built = dict(formats._CACHE)
    GrammarCompiler(byte_info())
    assert all(formats._CACHE[n] is built[n] for n in built)  # not rebuilt


def test_the_corpus_is_compiled_once_per_process_and_not_cached(monkeypatch):
    # the warm-up corpus (compiler._WARM_CORPUS) runs the compile's code paths of the common
    # keywords once per process, at the first compiler; no compiler keeps its grammars
    from furca.constrain import compiler as compiler_mod

    calls = []
    real = compiler_mod.GrammarCompiler._compile
    monkeypatch.setattr(compiler_mod, "_CORPUS_DONE", [])
    monkeypatch.setattr(compiler_mod.GrammarCompiler, "_compile",
                        lambda self, g, key: calls.append(key) or real(self, g, key))
    first = GrammarCompiler(byte_info())
    corpus = [k for k in calls if k[:2] == ("lexemes", "corpus")]
    assert len(corpus) == len(compiler_mod._WARM_CORPUS) >= 5 and not first._cache
    calls.clear()
    second = GrammarCompiler(byte_info())  # another tokenizer: its lexemes, not the corpus again
    assert calls and not [k for k in calls if k[:2] == ("lexemes", "corpus")] and not second._cache
    # the corpus covers what it says: references, combinators, arrays, patterns, formats
    text = repr(compiler_mod._WARM_CORPUS)
    for keyword in ("$ref", "oneOf", "anyOf", "allOf", "not", "enum", "const", "pattern", "format", "items",
                    "prefixItems", "additionalProperties", "patternProperties", "minLength", "maximum"):
        assert repr(keyword) in text, keyword


def test_prebuilt_formats_give_the_same_grammar():
    schema = {"type": "object", "properties": {f: {"type": "string", "format": f} for f in formats._BUILDERS},
              "required": ["date-time"]}
    formats._CACHE.clear()
    lazy_gbnf, lazy_ir = schema_to_gbnf(schema), schema_to_ir(schema)
    formats._CACHE.clear()
    formats.build_formats()
    assert schema_to_gbnf(schema) == lazy_gbnf
    assert schema_to_ir(schema) == lazy_ir


@needs_compiled_walks  # without numba the masks are numpy's walks (walk_numpy): library code by design
def test_a_warm_process_compiles_and_decodes_without_the_import_system(llama):
    """Every import the compile and the masks need is made once per process: a second round
    of compiles and first-instance decodes (every 10th schema of the in-repo MaskBench
    sample, and two of bounded strings) calls no function of importlib (a function-level
    `from . import x` does, _handle_fromlist, at every call), and its decode steps call no
    Python function of any library (numpy's Python-level wrappers, a WeakKeyDictionary's
    get: C calls do the same). In a process forked from a warmed one, as the shared harness
    runs each schema, the pages of every Python function a step runs are copied at its
    first call, inside that step."""
    import gc
    import os
    import sys

    import numpy as np

    import furca
    from furca.errors import CompileError

    from .test_json_schema_helpers import instance_text, maskbench_cases

    info, _compiler, tok = llama
    cases = []
    for _name, schema, tests in list(maskbench_cases())[::10]:
        valid = [t for t in tests if t["valid"]]
        if valid:
            cases.append((schema, tok.encode(instance_text(valid[0]["data"], schema), add_special_tokens=False).ids))
    bounded = [({"type": "object", "properties": {"id": {"type": "string", "maxLength": 12},
                                                  "tag": {"type": "string", "minLength": 2, "maxLength": 5}},
                 "required": ["id", "tag"]}, {"id": "a1b2 c3", "tag": "xyz"}),
               ({"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 3}, ["left", "right"])]
    for schema, value in bounded:
        cases.append((schema, tok.encode(instance_text(value, schema), add_special_tokens=False).ids))
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    ours = os.path.dirname(furca.__file__)
    imports, foreign, counters, steps = [], [], 0, 0

    def seen(frame, event, _arg):
        if event == "call" and "importlib" in frame.f_code.co_filename:
            imports.append(frame.f_code.co_name)

    def seen_in_steps(frame, event, _arg):
        seen(frame, event, _arg)
        name = frame.f_code.co_filename
        if event == "call" and not name.startswith(ours) and not name.startswith("<string>"):
            foreign.append((name.rsplit("/", 1)[-1], frame.f_code.co_name))

    def run(compiler, schema, ids, profile):
        nonlocal steps
        sys.setprofile(seen if profile else None)
        try:
            g = compiler.compile_json_schema(schema)
            m = g.matcher()
            m.fill_bitmask(bm)
            sys.setprofile(seen_in_steps if profile else None)
            for t in ids + [info.eos_token_id]:
                m.fill_bitmask(bm)
                steps += profile
                if not m.accept_token(t):
                    break
        except CompileError:
            return 0
        finally:
            sys.setprofile(None)
        return int(g.masks.bounded is not None)

    for schema, ids in cases:  # the first round: each part's one-time imports
        run(GrammarCompiler(info, cache_size=0), schema, ids, False)
    callbacks = gc.callbacks[:]  # other tests' tools may watch the collections (hypothesis does)
    gc.callbacks.clear()
    try:
        for schema, ids in cases:
            compiler = GrammarCompiler(info, cache_size=0)  # its construction warms the walks (an import)
            counters += run(compiler, schema, ids, True)
    finally:
        gc.callbacks[:] = callbacks
    assert counters >= 2 and steps > 500, (counters, steps)
    assert not imports, sorted(set(imports))
    assert not foreign, sorted(set(foreign))


def test_literals_are_written_as_json_dumps_writes_them():
    """json_schema.scalars.literal (a str through the encoder's C function, the rest
    through the encoder) against json.dumps(value, ensure_ascii=False,
    separators=(",", ":"), allow_nan=False): escapes, lone surrogates, a str subclass,
    numbers, containers; NaN refused as json.dumps refuses it. merge.canon (one encoder
    kept) against json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",",
    ":"))."""
    import json

    import pytest

    from furca.constrain.json_schema.merge import canon
    from furca.constrain.json_schema.scalars import literal

    class Name(str):
        pass

    values = ["", "a", 'q"b\\\n\t\x00\x7f', "é日本\u2028\ud800", Name("sub\"class"), 0, -1, 1.5, 1e300, True, False,
              None, [1, "a", None], {"k": "v", "n": [1.0]}]
    for v in values:
        assert literal(v) == json.dumps(v, ensure_ascii=False, separators=(",", ":"), allow_nan=False), v
        assert canon(v) == json.dumps(v, sort_keys=True, ensure_ascii=False, separators=(",", ":")), v
    with pytest.raises(ValueError):
        literal(float("nan"))
    assert canon({"b": float("nan"), "a": 1}) == '{"a":1,"b":NaN}'
