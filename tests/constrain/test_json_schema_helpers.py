"""Shared helpers for the JSON-schema grammar tests: instance serialisation (the
benchmark's rule), the suites' loaders and a runner that counts outcomes.

Serialisation follows ../shared/bench/grammar/schemas.py (copied, not imported:
tests must run where ../shared does not exist): compact JSON, UTF-8 kept, object
keys in the schema's own `properties` order, other keys after them.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from furca.errors import CompileError
from furca.constrain.json_schema import schema_to_gbnf
from .gbnf_reference import Matcher, parse_gbnf

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
SUITE = os.path.join(DATA, "json-schema-test-suite", "tests")
MASKBENCH = os.path.join(DATA, "maskbench-sample")
DRAFT7_URI = "http://json-schema.org/draft-07/schema#"


# ---------------------------------------------------------------- serialisation (benchmark's rule)
def _resolve(node, root, depth=0):
    while isinstance(node, dict) and "$ref" in node and depth < 32:
        ref = node["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#"):
            return None
        target = root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                return None
        if len(node) > 1:
            return None
        node, depth = target, depth + 1
    return node if isinstance(node, dict) else None


_COMBINERS = ("allOf", "anyOf", "oneOf", "if", "then", "else", "dependentSchemas", "dependencies")


def order_like_schema(value, schema, root=None):
    root = schema if root is None else root
    node = _resolve(schema, root)
    if isinstance(value, list):
        if node is None:
            return value
        items, prefix = node.get("items"), node.get("prefixItems")
        if isinstance(items, list):
            prefix, items = items, node.get("additionalItems")
        out = []
        for i, v in enumerate(value):
            sub = prefix[i] if isinstance(prefix, list) and i < len(prefix) else items
            out.append(order_like_schema(v, sub, root) if isinstance(sub, dict) else v)
        return out
    if not isinstance(value, dict):
        return value
    if node is None or not isinstance(node.get("properties"), dict) or any(k in node for k in _COMBINERS):
        return value
    props = node["properties"]
    extra = node.get("additionalProperties")
    keys = [k for k in props if k in value] + [k for k in value if k not in props]
    out = {}
    for k in keys:
        sub = props.get(k, extra)
        out[k] = order_like_schema(value[k], sub, root) if isinstance(sub, dict) else value[k]
    return out


def instance_text(data, schema):
    return json.dumps(order_like_schema(data, schema), separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------- runner
@dataclass
class Counts:
    passing: int = 0
    compile_error: int = 0
    valid_rejected: int = 0
    invalid_accepted: int = 0
    failures: list = field(default_factory=list)  # (name, kind, detail)
    errors: dict = field(default_factory=dict)    # compile error message -> count

    def as_dict(self):
        return {"passing": self.passing, "compile_error": self.compile_error,
                "valid_rejected": self.valid_rejected, "invalid_accepted": self.invalid_accepted}


def check_case(name, schema, tests, counts, accept=None, semantics="strict", **kw):
    """Compile `schema` strictly (a CompileError counts as compile_error), then check
    every test: valid ones must be accepted, invalid ones rejected.

    semantics="strict": the strict grammar is checked (MaskBench, as the benchmark
    runs furca). semantics="json-schema": valid instances are checked against the
    unsupported="warn" grammar when that compiles without a warning (it then differs
    from the strict one only in allowing undeclared members, i.e. it is JSON Schema's
    meaning); invalid instances are checked against both grammars.
    `accept(schema, options, text) -> bool` (options: the keywords of the grammar,
    `kw` and `unsupported`) defaults to the reference matcher over schema_to_gbnf's
    text; `engine_accept` and `real_tokenizer_accept` compile with
    GrammarCompiler.compile_json_schema, as a request does."""
    try:
        strict_text = schema_to_gbnf(schema, unsupported="raise", **kw)
    except CompileError as e:
        counts.compile_error += 1
        key = _error_kind(str(e))
        counts.errors[key] = counts.errors.get(key, 0) + 1
        return "compile_error"
    grammars = [(strict_text, dict(kw, unsupported="raise"))]
    if semantics == "json-schema":
        warned = []
        try:
            lenient = schema_to_gbnf(schema, unsupported="warn", warn=warned.append, **kw)
            if not warned:
                grammars.insert(0, (lenient, dict(kw, unsupported="warn")))
        except CompileError:
            pass
    if accept is None:
        matchers = [Matcher(parse_gbnf(t)) for t, _ in grammars]
        accepts = [m.fullmatch for m in matchers]
    else:
        accepts = [lambda s, o=o: accept(schema, o, s) for _, o in grammars]
    bad_valid, bad_invalid = [], []
    for t in tests:
        s = instance_text(t["data"], schema)
        if t["valid"]:
            if not accepts[0](s):
                bad_valid.append((t.get("description", ""), s))
        elif any(a(s) for a in accepts):
            bad_invalid.append((t.get("description", ""), s))
    if bad_invalid:
        counts.invalid_accepted += 1
        counts.failures.append((name, "invalid_accepted", bad_invalid[:3]))
        return "invalid_accepted"
    if bad_valid:
        counts.valid_rejected += 1
        counts.failures.append((name, "valid_rejected", bad_valid[:3]))
        return "valid_rejected"
    counts.passing += 1
    return "passing"


def engine_accept():
    """accept(schema, options, text) through the real engine (furca.constrain's public
    GrammarCompiler.compile_json_schema) with a byte-level tokenizer: every UTF-8 byte
    is fed as a token, then EOS must be accepted and the matcher terminated."""
    from furca.constrain import GrammarCompiler, TokenizerInfo

    eos = 256
    info = TokenizerInfo([bytes([i]) for i in range(256)] + [None], [eos], vocab_size=257)
    compiler = GrammarCompiler(info)

    def accept(schema, options, text):
        m = compiler.compile_json_schema(schema, **options).matcher()
        for b in text.encode("utf-8"):
            if not m.accept_token(b):
                return False
        return m.accept_token(eos) and m.is_terminated()
    return accept


def real_tokenizer_accept(info, compiler, tokenizer):
    """accept(schema, options, text) with a real tokenizer: the text is encoded as the
    tokenizer would (no special tokens); at every step the token's bit must be set in
    the full-vocabulary mask and accept_token must take it; then EOS must be in the
    mask, accepted, and the matcher terminated."""
    import numpy as np

    bitmask = np.zeros((1, info.num_words), dtype=np.int32)
    eos = info.eos_token_ids[0]

    def allowed(m, t):
        m.fill_bitmask(bitmask, 0)
        return (int(bitmask[0, t >> 5]) >> (t & 31)) & 1 == 1

    def accept(schema, options, text):
        m = compiler.compile_json_schema(schema, **options).matcher()
        for t in tokenizer.encode(text, add_special_tokens=False).ids:
            if not allowed(m, t) or not m.accept_token(t):
                return False
        return allowed(m, eos) and m.accept_token(eos) and m.is_terminated()
    return accept


def _error_kind(msg):
    for k in ("keyword '", "format '", "oneOf", "$ref", "allOf", "patternProperties", "invalid schema", "pattern"):
        if k in msg:
            i = msg.find(k)
            return msg[i:i + 40].split(" (")[0].split(";")[0]
    return msg[:60]


def suite_cases(draft):
    """(name, schema, tests) for every case of a draft, optional tests included."""
    root = os.path.join(SUITE, draft)
    for dirpath, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            if not f.endswith(".json"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), root)
            with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                cases = json.load(fh)
            for case in cases:
                schema = case["schema"]
                if draft == "draft7" and isinstance(schema, dict) and "$schema" not in schema:
                    schema = dict(schema, **{"$schema": DRAFT7_URI})
                yield "%s/%s: %s" % (draft, rel, case["description"]), schema, case["tests"]


def maskbench_cases():
    for f in sorted(os.listdir(MASKBENCH)):
        if f.endswith(".json"):
            with open(os.path.join(MASKBENCH, f), encoding="utf-8") as fh:
                d = json.load(fh)
            yield f, d["schema"], d["tests"]
