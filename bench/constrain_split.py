"""Where the time of slow mask steps goes: each part of the cold path timed around its
outermost call, over the steps above a threshold.

    .venv/bin/python bench/constrain_split.py --files LIST [--over-us 200]

LIST: schema file names (one a line, e.g. the slowest ones `bench/constrain_ab.py`
prints). Per schema: a cold compile and first mask, then every valid instance token by
token (fill_bitmask + accept_token), thread CPU time. For the steps over --over-us it
sums the time of: the walk resumes (masks' trie_walks.resume: the expansions a walk
returns for), the slice search, the numba walk calls (with the row kernel, core_rows.py:
Core.walk_roots, which makes rows inside, and apart "walk kernel", its compiled calls
alone), the row kernel's parts (its rows for Python's expand, the compiled row calls,
entering and leaving its tables, their growth), accept_token and its byte steps through
row-less states, fill_bitmask, a new mask's computation, tiered masks, and Python's
transition rows by kind (multi-configuration by size, single-configuration on plain
nodes or not). Parts nest (a resume holds rows, fill_bitmask everything of a mask), so
the shares overlap; the wrappers make the run ~1.3x slow. Figures:
bench/results/constrain.md.

Then, per part, the steps as they would be if that part were free (its time taken out
of every step it ran in): their p99 and how many stay over --over-us. "rows" is every
kind together; "walks+resumes" the numba walks with the Python between their calls (the
resumes hold the rows); "+byte steps+slices" those and the byte steps and the slice
search (a floor: these two hold resumes of their own, subtracted twice). That is the
bound of a lever on the part: the most the per-token p99 can fall by making it cheaper
(leaning optimistic: each part's wrapper cost, ~0.5 µs a call, goes out with it).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
clock = time.thread_time_ns
parts: dict[str, list[int]] = {}


def timed(owner, name, label):
    """Wraps owner.name: its time (outermost calls only) goes to label(*args) or label."""
    f = getattr(owner, name)
    depth = [0]

    def g(*a, **k):
        if depth[0]:
            return f(*a, **k)
        depth[0] += 1
        t0 = clock()
        try:
            return f(*a, **k)
        finally:
            depth[0] -= 1
            x = parts.setdefault(label(*a) if callable(label) else label, [0, 0])
            x[0] += clock() - t0
            x[1] += 1
    setattr(owner, name, g)


def _plain_target(nfa, closures, targets):
    """The node u whose closure is (u, stack) on any stack (-1: empty), None otherwise (the
    criterion of the removed plain_rows.py)."""
    if len(targets) != 1:
        return None
    rel_out, returns = closures.relative(targets[0])
    if returns or len(rel_out) > 1:
        return None
    if not rel_out:
        return -1
    u, frames = rel_out[0]
    return None if frames or u in nfa.need else u


def single_kind(_rows, a, _s, n, _st):
    """'single plain': every byte class of n leads to one plain node (the criterion of the
    compiled plain rows, removed)."""
    nfa = a.nfa
    if n in nfa.tick or any(_plain_target(nfa, a.closures, tg) is None for _lo, _hi, tg in a.template(n)):
        return "single other"
    return "single plain"


def multi_kind(_rows, _a, _s, configs):
    k = len(configs)
    return f"multi {'2' if k == 2 else '3-4' if k <= 4 else '5-16' if k <= 16 else '17+'}"


def instrument():
    from furca.constrain import _core_kernels, _core_walk_kernels, _walk, automaton, core_rows, gcpause, masks, matcher, rows, slices, trie_walks

    timed(rows.Rows, "single", single_kind)
    timed(rows.Rows, "multi", multi_kind)
    timed(slices.SliceBounds, "slice_depth", "slice search")
    timed(trie_walks, "resume", "walk resumes")
    timed(automaton.LazyAutomaton, "_step_byte", "byte steps")
    timed(gcpause.GcPause, "exit", "young collection")
    walk_range, walk_roots = _walk.get_walk_range()

    def counted(f):
        def g(*a):
            t0 = clock()
            r = f(*a)
            x = parts.setdefault("numba walks", [0, 0])
            x[0] += clock() - t0
            x[1] += 1
            return r
        return g
    _walk._WALK[0] = (counted(walk_range), counted(walk_roots))
    # the row kernel (core_rows.py, on by default): its walks make the rows they meet
    timed(core_rows.Core, "walk_roots", "numba walks")
    timed(core_rows.Core, "row", "kernel rows")
    timed(_core_walk_kernels, "walk_roots_core", "walk kernel")  # the compiled calls alone
    timed(_core_kernels, "row", "row kernel")
    timed(core_rows.Core, "_enter", "kernel enter")
    timed(core_rows.Core, "_leave", "kernel leave")
    timed(core_rows.Core, "_headroom", "kernel grow")
    timed(core_rows.Core, "_grow", "kernel grow")
    timed(masks.TokenMasks, "_compute_mask_ctx", "mask compute")
    timed(masks.TokenMasks, "_tiered_mask", "tiered mask")
    timed(matcher.Matcher, "accept_token", "accept_token")
    timed(matcher.Matcher, "fill_bitmask", "fill_bitmask")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", required=True, help="schema file names, one per line")
    ap.add_argument("--over-us", type=float, default=200.0)
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "maskbench-dev"))
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(ROOT, "..", "shared", "bench", "grammar"))
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import schemas
    from constrain.tokenizers_cache import tokenizer_json
    from tokenizers import Tokenizer

    from furca.constrain import GrammarCompiler, TokenizerInfo
    from furca.errors import CompileError

    instrument()
    path, eos = tokenizer_json("llama3_1")
    tok = Tokenizer.from_file(str(path))
    info = TokenizerInfo.from_tokenizer_json(path, eos_token=eos)
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    GrammarCompiler(info).compile_json_schema({"type": "object"}).matcher().fill_bitmask(bm)
    gc.collect()
    gc.freeze()
    with open(a.files, encoding="utf-8") as f:
        names = [ln.strip() for ln in f if ln.strip()]
    over = a.over_us * 1e3
    total: dict[str, list[int]] = {}
    steps, slow_ns, slow_n = [], 0, 0
    step_parts = []  # per step: {part: ns} of the parts it ran
    for name in names:
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            d = json.load(f)
        try:
            g = GrammarCompiler(info).compile_json_schema(d["schema"])
        except CompileError:  # a list of the whole sample holds the 4 schemas furca does not compile
            continue
        g.matcher().fill_bitmask(bm)
        for test in d["tests"]:
            if not test["valid"]:
                continue
            ids = tok.encode(schemas.instance_text(test["data"], d["schema"]), add_special_tokens=False).ids
            m = g.matcher()
            for t in ids + [info.eos_token_id]:
                parts.clear()
                t0 = clock()
                m.fill_bitmask(bm)
                ok = m.accept_token(t)
                dt = clock() - t0
                steps.append(dt)
                step_parts.append({k: ns for k, (ns, _n) in parts.items()})
                if dt > over:
                    slow_ns += dt
                    slow_n += 1
                    for k, (ns, n) in parts.items():
                        x = total.setdefault(k, [0, 0])
                        x[0] += ns
                        x[1] += n
                if not ok:
                    break
    x = np.array(steps) / 1e3
    print(f"{len(x)} steps, µs p50 {np.percentile(x, 50):.1f} p90 {np.percentile(x, 90):.1f} "
          f"p99 {np.percentile(x, 99):.1f} max {x.max():.0f}; sum {x.sum() / 1e3:.0f} ms")
    print(f"{slow_n} steps over {a.over_us:g} µs, {slow_ns / 1e6:.0f} ms:")
    for k, (ns, n) in sorted(total.items(), key=lambda kv: -kv[1][0]):
        print(f"  {k:14s} {ns / 1e6:8.1f} ms {100 * ns / max(slow_ns, 1):5.1f}%  {n:7d} calls  {ns / max(n, 1) / 1e3:6.1f} µs each")
    print(f"if a part were free (its time out of every step): p99 µs, steps over {a.over_us:g} µs")
    labels = sorted({k for sp in step_parts for k in sp})
    groups = {k: (k,) for k in labels}
    groups["rows"] = tuple(k for k in labels if k.startswith(("single", "multi")))
    # the walk path, the kernel and the Python between its calls (resumes hold the rows)
    groups["walks+resumes"] = ("numba walks", "walk resumes")
    groups["+byte steps+slices"] = ("numba walks", "walk resumes", "byte steps", "slice search")
    bound = []
    for name, ks in groups.items():
        y = x - np.array([sum(sp.get(k, 0) for k in ks) for sp in step_parts]) / 1e3
        bound.append((np.percentile(y, 99), int((y > a.over_us).sum()), name))
    for p99, over, name in sorted(bound, reverse=True):
        print(f"  {name:20s} p99 {p99:7.1f}  over {over:6d}")


if __name__ == "__main__":
    main()
