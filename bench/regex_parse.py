"""Compile time of regex constraints and of pattern-heavy JSON schemas (CPU, one thread).

    .venv/bin/python bench/regex_parse.py [--data DIR] [--repeat 5] [--schemas 150]

Patterns: every `pattern` value and `patternProperties` key of the MaskBench schemas
in DIR (../shared/data/maskbench-dev), read once. Reports the best of --repeat runs, in
thread CPU time (steadier than wall time on a shared machine), total and per item:

- python dialect: `constrain.regex.parse_regex` (parse + byte IR) over those patterns
  that are valid in it, and `GrammarCompiler.compile_regex` + first mask (byte
  tokenizer, a cold compiler per round) over the constrain_micro regex cases;
- ecma dialect: `json_schema.regex.pattern_grammar` (parse + JSON-string IR) over all
  valid patterns, then with minLength 2 / maxLength 7 (those that admit the bound);
- `compile_json_schema` + first mask (byte tokenizer, cold compiler) of the first
  --schemas MaskBench schemas that hold a pattern.

Run the same command under PYTHONPATH=<another checkout> to compare two versions.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import time

import numpy as np

import furca
from furca.constrain import GrammarCompiler, TokenizerInfo
from furca.constrain.json_schema.grammar import Grammar
from furca.constrain.json_schema.regex import pattern_grammar
from furca.constrain.regex import parse_regex
from furca.errors import CompileError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

REGEX_CASES = [r"-?\d{1,10}", r"[a-z0-9._%+-]{1,40}@[a-z0-9.-]{1,30}\.[a-z]{2,6}", r'"[^"\\]{0,64}"',
               r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", r"(?i)(true|false|null|-?(0|[1-9]\d*)(\.\d+)?)"]


def collect(x, pats):
    if isinstance(x, dict):
        for k, v in x.items():
            if k == "pattern" and isinstance(v, str):
                pats.append(v)
            if k == "patternProperties" and isinstance(v, dict):
                pats.extend(v)
            collect(v, pats)
    elif isinstance(x, list):
        for v in x:
            collect(v, pats)


def load(data):
    patterns, schemas = [], []
    for f in sorted(glob.glob(os.path.join(data, "*.json"))):
        schema = json.load(open(f))["schema"]
        found = []
        collect(schema, found)
        if found:
            patterns += found
            schemas.append(schema)
    return patterns, schemas


def valid(fn, items):
    out = []
    for p in items:
        try:
            fn(p)
            out.append(p)
        except CompileError:
            pass
    return out


def best(fn, items, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.thread_time()
        for p in items:
            fn(p)
        times.append(time.thread_time() - t0)
    return min(times) * 1e3


def byte_info():
    return TokenizerInfo([bytes([i]) for i in range(256)] + [None], [256], vocab_size=264)


def cold_compile(kind, info):
    def run(spec):
        c = GrammarCompiler(info)
        g = c.compile_regex(spec) if kind == "regex" else c.compile_json_schema(spec)
        g.matcher().fill_bitmask(np.zeros((1, info.num_words), dtype=np.int32))
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "maskbench-dev"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--schemas", type=int, default=150)
    a = ap.parse_args()
    patterns, schemas = load(a.data)
    patterns = sorted(set(patterns))
    info = byte_info()
    py = valid(parse_regex, patterns)
    ecma = valid(lambda p: pattern_grammar(p, "#/pattern"), patterns)
    bounded = valid(lambda p: pattern_grammar(p, "#/pattern", 2, 7, Grammar()), ecma)
    schemas = valid(cold_compile("json", info), schemas[: a.schemas])
    print(f"furca from {os.path.dirname(furca.__file__)}; {len(patterns)} distinct patterns, "
          f"{len(py)} valid python, {len(ecma)} valid ecma; {len(schemas)} schemas")
    rows = [
        (f"parse_regex, {len(py)} patterns", best(parse_regex, py, a.repeat)),
        (f"compile_regex + 1st mask, {len(REGEX_CASES)} cases", best(cold_compile("regex", info), REGEX_CASES, a.repeat)),
        (f"pattern_grammar, {len(ecma)} patterns", best(lambda p: pattern_grammar(p, "#/pattern"), ecma, a.repeat)),
        (f"pattern_grammar 2..7 chars, {len(bounded)} patterns",
         best(lambda p: pattern_grammar(p, "#/pattern", 2, 7, Grammar()), bounded, a.repeat)),
        (f"compile_json_schema + 1st mask, {len(schemas)} schemas", best(cold_compile("json", info), schemas, a.repeat)),
    ]
    for (name, ms), n in zip(rows, (len(py), len(REGEX_CASES), len(ecma), len(bounded), len(schemas))):
        print(f"{name:52s} {ms:9.1f} ms {ms * 1e3 / n:9.1f} µs each")


if __name__ == "__main__":
    main()
