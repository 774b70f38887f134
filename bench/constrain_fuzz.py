"""Soundness by generation: random token walks under furca's masks, every finished text
checked by an independent validator (json.loads and the `jsonschema` package).

    .venv/bin/python bench/constrain_fuzz.py [--data DIR] [--files LIST | --limit N]
                                             [--walks 2] [--max-steps 400] [--seed 0]
                                             [--member-order schema|any]

The harness (../shared/bench/grammar) checks that furca accepts each schema's valid
instances and refuses its invalid ones, one fixed text each. This checks the other
direction over every schema of a MaskBench folder (maskbench-dev: 5,682 files, against
the harness's 500): whatever a model samples under the masks must be a valid
instance. Per schema: compile (schemas furca refuses are counted, not walked), then
--walks walks from the start state. Each step takes the allowed tokens
(`get_allowed_tokens`), picks EOS when it is allowed, otherwise a token at random,
uniformly or, with a probability that grows with the step, among the allowed tokens
holding a closing byte (`"` `}` `]` `,`) so that walks end; `accept_token` must take
it. A walk that reaches --max-steps is "unfinished" (not a failure).

Failures, each printed with the schema and the text:
  refused       accept_token refused a token the mask allowed
  dead_end      no token allowed, the matcher not terminated
  limit         accept_token refused an allowed token at a grammar limit (the automaton's size)
  probe_refused, probe_dead_end, probe_accepted (--probes K): at a step of the walk, a fork
                of the matcher refused an allowed token the walk did not take, was left with
                no token allowed after it, or accepted a disallowed neighbour (in byte order)
                of an allowed token: the mask and accept_token disagree off the walk's path
  bad_utf8      the bytes of a finished walk are not UTF-8
  invalid_json  json.loads refuses the text (NaN / Infinity refused too)
  duplicate_declared  an object names a member twice, a name some `properties` declares
  (duplicate_free, a name no `properties` declares twice, is counted, not a failure:
  no grammar of free keys forbids it)
  not_valid     jsonschema (the schema's $schema draft, formats checked) rejects it
jsonschema checks the formats whose packages are installed (`pip install
"jsonschema[format-nongpl]"` adds date-time, time, uri, hostname, duration, ...: the
bench venv of ../shared/bench/grammar has furca; run there with them).
Schemas jsonschema itself cannot use (an unresolvable $ref, a schema it rejects) are
counted as `validator_error`, their walks still checked for the first five kinds.
Figures: bench/results/constrain.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Timeout(Exception):
    pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "maskbench-dev"))
    ap.add_argument("--files", default=None, help="schema file names, one per line (default: every file)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N files (sorted)")
    ap.add_argument("--walks", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--probes", type=int, default=0,
                    help="per step, also try this many allowed tokens on forks of the matcher (each accepted, "
                         "the first leaving no dead end) and the disallowed byte-order neighbours of as many "
                         "(each refused): generation.walk")
    ap.add_argument("--timeout-s", type=int, default=60, help="per schema (compile + walks)")
    ap.add_argument("--whitespace", default="compact", choices=("compact", "flexible"),
                    help="compile_json_schema's whitespace (flexible: up to 4 blanks between tokens)")
    ap.add_argument("--member-order", default="schema", choices=("schema", "any"),
                    help="compile_json_schema's member_order (any: objects in any member order, keys watched)")
    ap.add_argument("--out", default=None, help="write every failure as a JSON line here")
    a = ap.parse_args()
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from constrain.generation import byte_neighbours, check_text, closer_tokens, declared_names, make_validator, walk
    from constrain.tokenizers_cache import tokenizer_json

    from furca.constrain import CompileError, GrammarCompiler, TokenizerInfo

    path, eos_text = tokenizer_json("llama3_1")
    info = TokenizerInfo.from_tokenizer_json(path, eos_token=eos_text)
    compiler = GrammarCompiler(info)
    eos = info.eos_token_id
    closer = closer_tokens(info)
    near = byte_neighbours(info) if a.probes else None
    if a.files:
        with open(a.files) as f:
            names = [x.strip() for x in f if x.strip()]
    else:
        names = sorted(n for n in os.listdir(a.data) if n.endswith(".json"))
    if a.limit:
        names = names[:a.limit]

    def on_alarm(*_):
        raise Timeout()

    signal.signal(signal.SIGALRM, on_alarm)
    counts: dict[str, int] = {}
    failures = []
    out = open(a.out, "w") if a.out else None
    t_start = time.monotonic()
    for i, name in enumerate(names):
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            schema = json.load(f)["schema"]
        rng = np.random.default_rng([a.seed, i])
        declared = declared_names(schema)
        try:
            validator = make_validator(schema)
        except Exception:
            validator = None
            counts["validator_error"] = counts.get("validator_error", 0) + 1
        signal.alarm(a.timeout_s)
        try:
            try:
                g = compiler.compile_json_schema(schema, whitespace=a.whitespace, member_order=a.member_order)
            except CompileError:
                counts["compile_error"] = counts.get("compile_error", 0) + 1
                continue
            counts["compiled"] = counts.get("compiled", 0) + 1
            for _ in range(a.walks):
                kind, data = walk(g, info, eos, closer, rng, a.max_steps, a.probes, near)
                if kind == "finished":
                    bad = check_text(data, validator, declared)
                    if bad is None:
                        counts["valid"] = counts.get("valid", 0) + 1
                        continue
                    kind, detail = bad
                else:
                    detail = ""
                counts[kind] = counts.get(kind, 0) + 1
                if kind == "duplicate_free" and a.member_order == "any":
                    # the watched objects forbid it; an object kept in schema order (patternProperties,
                    # propertyNames, min/maxProperties, many required names) does not: shown to be read
                    print(f"NOTE duplicate_free {name}: {detail}\n    {data.decode('utf-8', 'replace')[:300]}",
                          flush=True)
                if kind not in ("unfinished", "duplicate_free"):
                    rec = {"schema": name, "kind": kind, "detail": detail,
                           "text": data.decode("utf-8", "replace")[:2000]}
                    failures.append(rec)
                    print(f"FAIL {kind} {name}: {detail}\n    {rec['text'][:300]}", flush=True)
                    if out:
                        out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                        out.flush()
        except Timeout:
            counts["timeout"] = counts.get("timeout", 0) + 1
        finally:
            signal.alarm(0)
        if (i + 1) % 250 == 0:
            print(f"[{i + 1}/{len(names)}] {time.monotonic() - t_start:.0f} s {counts}", flush=True)
    print(f"{len(names)} schemas in {time.monotonic() - t_start:.0f} s: {counts}")
    print(f"failures: {len(failures)}")


if __name__ == "__main__":
    main()
