"""Micro-benchmark of furca.constrain with a real 128k tokenizer (Llama-3.1).

    .venv/bin/python bench/constrain_micro.py [--tokenizer PATH --eos TEXT] [--repeat 3] [--cpu-time]

Reports: TokenizerInfo build; per case, compile + first mask (cold: a fresh
GrammarCompiler, so nothing cached), then per-token fill_bitmask + accept_token over
the tokens of a sample output (cold walk: first request, states built lazily; warm
walk: a second request reusing the compiled grammar): p50 / p99 / max in µs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from furca.constrain import GrammarCompiler, TokenizerInfo  # noqa: E402

CASES = [
    ("regex int", "regex", r"-?\d{1,10}", "-1234567"),
    ("regex email", "regex", r"[a-z0-9._%+-]{1,40}@[a-z0-9.-]{1,30}\.[a-z]{2,6}", "john.smith42@example.co.uk"),
    ("regex quoted {0,64}", "regex", r'"[^"\\]{0,64}"', '"The quick brown fox jumps over the lazy dog, twice."'),
    ("regex date", "regex", r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", "2024-05-17T12:34:56Z"),
    ("choices", "choices", ["positive", "negative", "neutral", "mixed feelings"], "mixed feelings"),
    ("gbnf arith", "grammar", 'root ::= e\ne ::= t ("+" t)*\nt ::= [0-9]+ | "(" e ")"', "(12+(3+4))+567+(8)"),
    ("json mode", "json", {}, '{"name":"Alice Smith","age":31,"tags":["a","bb",{"k":[1,2,3]}],"ok":true,'
                              '"note":"hello world, this is a longer string value"}'),
    ("json object (flat, gbnf)", "grammar",
     'root ::= "{\\"id\\":" int ",\\"name\\":" str ",\\"score\\":" num "}"\n'
     'int ::= "-"? [0-9]{1,15}\nstr ::= "\\"" ([^"\\\\\\x00-\\x1f] | "\\\\" ["\\\\/bfnrt])* "\\""\n'
     'num ::= int ("." [0-9]+)?', '{"id":42,"name":"A string with some words in it","score":3.25}'),
]


def pct(xs, q):
    return float(np.percentile(np.asarray(xs) / 1e3, q)) if xs else float("nan")


def compile_case(c, kind, spec):
    return {"regex": c.compile_regex, "choices": c.compile_choices, "grammar": c.compile_grammar,
            "json": c.compile_json_schema}[kind](spec)


CLOCK = time.perf_counter_ns


def walk(g, ids, eos, num_words):
    bm = np.zeros((1, num_words), dtype=np.int32)
    m = g.matcher()
    times = []
    pc = CLOCK
    for t in list(ids) + [eos]:
        t0 = pc()
        m.fill_bitmask(bm)
        ok = m.accept_token(t)
        times.append(pc() - t0)
        if not ok:
            raise SystemExit(f"refused token {t}: {m.error}")
    assert m.is_terminated()
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--eos", default="<|eot_id|>")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cpu-time", action="store_true", help="time with thread CPU time (steadier on a loaded machine)")
    a = ap.parse_args()
    global CLOCK
    if a.cpu_time:
        CLOCK = time.thread_time_ns
    path = a.tokenizer
    if path is None:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
        from constrain.tokenizers_cache import tokenizer_json

        path, a.eos = tokenizer_json("llama3_1")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    t0 = CLOCK()
    info = TokenizerInfo.from_tokenizer_json(path, eos_token=a.eos)
    print(f"TokenizerInfo build: {(CLOCK() - t0) / 1e6:.0f} ms  (vocab {info.vocab_size}, "
          f"trie nodes {info.trie.num_nodes})")
    GrammarCompiler(info).compile_regex("warm|up")
    try:  # import the JSON-schema translator outside the timings
        import furca.constrain.json_schema  # noqa: F401
    except ImportError:
        pass
    print(f"{'case':28s} {'compile+1st mask ms':>20s} {'cold p50/p99/max µs':>24s} {'warm p50/p99/max µs':>24s} "
          f"{'tokens':>6s} {'states':>6s}")
    for name, kind, spec, text in CASES:
        ids = tok.encode(text, add_special_tokens=False).ids
        ttfm, cold, warm = [], [], []
        for _ in range(a.repeat):
            c = GrammarCompiler(info)
            t0 = CLOCK()
            g = compile_case(c, kind, spec)
            m = g.matcher()
            m.fill_bitmask(np.zeros((1, info.num_words), dtype=np.int32))
            ttfm.append(CLOCK() - t0)
            cold += walk(g, ids, info.eos_token_id, info.num_words)
            warm += walk(g, ids, info.eos_token_id, info.num_words)
        print(f"{name:28s} {np.median(ttfm) / 1e6:20.1f} "
              f"{pct(cold, 50):8.1f}/{pct(cold, 99):7.0f}/{max(cold) / 1e3:7.0f} "
              f"{pct(warm, 50):8.1f}/{pct(warm, 99):7.0f}/{max(warm) / 1e3:7.0f} {len(ids):6d} {g.num_states:6d}")


if __name__ == "__main__":
    main()
