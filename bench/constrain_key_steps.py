"""A key state's new mask, split by the functions it runs: the path stage (3) of DESIGN's
plan would have put in one kernel call.

    .venv/bin/python bench/constrain_key_steps.py [--sample 500 | --files F] [--fork] [--slow-us 200]

Per schema of the harness's stratified sample (Llama-3.1), in one process or (--fork) in a
child forked after the warm-up as the harness runs it: a cold compile, then every valid
instance token by token, as the shared harness walks them. A step is a "key step" when its
state's mask is new and the state lies on a key trie node (key_masks.KeyTrieMasks.split).
Prints the key steps' mean fill, accept and page faults, and for each function of the
mask's path (wrapped only inside key steps) its time a key step and its calls a key step,
outermost first: what the fill spends outside the kernels. The same again over the key
steps of at least --slow-us (fill + accept). Thread CPU time; the wrappers add ~0.3 µs a
call.

Session 48 (at 0916c6a, one process): 6,433 key steps, fill 76.9 µs and accept 20.1;
`_compute_mask_ctx` 65.0, the abstract part 41.2, the key words 29.7, their kernel call
18.1, the stored forms 8.7, the continuations 7.8, the context 5.6, "any key"'s lookup 5.3.
Session 49 (at 873e9a7): one process, fill 72.9 and accept 19.3, 133 key steps of 200 µs or
more (fill 237 µs: the key kernel 79, "any key" walks 76, continuations 50); forked, fill
93.3 and accept 23.1 with 2.5 faults a step, 427 of 200 µs or more (fill 233 µs, 14 faults:
the key kernel 61, "any key" 56, continuations 40, `words`' own Python ~26). The first half
of stage (3) built on these figures was level (bench/prototypes/key_context_kernel).
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import resource
import time

import numpy as np

import _sample  # this script's folder is on the path
from _forked import in_child

clock = time.thread_time_ns

# (module of furca.constrain, attribute path): the functions a key step's fill and accept run
TIMED = (
    ("masks", "TokenMasks._compute_mask_ctx"),
    ("masks", "TokenMasks._wide"),
    ("contexts", "ContextSplit.context"),
    ("contexts", "ContextSplit.abstract_part"),
    ("masks", "TokenMasks._compute_mask"),
    ("key_masks", "KeyTrieMasks.split"),
    ("key_masks", "KeyTrieMasks.words"),
    ("key_masks", "KeyTrieMasks._any_key"),
    ("core_keys", "KeyCalls.key_words"),
    ("stored_masks", "_stored"),
    ("trie_walks", "walk_continue"),
    ("automaton", "LazyAutomaton.abstract"),
    ("gcpause", "GcPause.exit"),
    ("matcher", "Matcher.accept_token"),
)
# the modules that import a timed module-level function by name (rebound to the wrapper)
IMPORTERS = {"_stored": ("masks", "contexts"), "walk_continue": ("masks", "contexts", "key_masks")}


def _wrap_all(on, spent):
    """Wraps TIMED: each adds its thread time and a call to spent[label] while on[0]
    (spent: one step's, cleared before each)."""
    import importlib

    from _wrap import wrap

    def make_timer(label):
        def make(f):
            def g(*a, **k):
                if not on[0]:
                    return f(*a, **k)
                t0 = clock()
                try:
                    return f(*a, **k)
                finally:
                    x = spent[label]
                    x[0] += clock() - t0
                    x[1] += 1

            return g

        return make

    for mod, attr in TIMED:
        wrap(mod, attr, make_timer(attr))
        for user in IMPORTERS.get(attr, ()):
            m = importlib.import_module("furca.constrain." + user)
            if hasattr(m, attr):
                setattr(m, attr, getattr(importlib.import_module("furca.constrain." + mod), attr))


def _schema(d, info, hf, bm, on, spent, slow_ns):
    """{"all": [steps, fill ns, accept ns, page faults, {label: [ns, calls]}], "slow": the
    same over the key steps of at least slow_ns} of one schema's key steps: a cold compile,
    then its valid instances token by token; None where it does not compile."""
    from furca.constrain import GrammarCompiler
    from furca.errors import CompileError

    try:
        g = GrammarCompiler(info, cache_size=0).compile_json_schema(d["schema"])
    except CompileError:
        return None
    g.matcher().fill_bitmask(bm)
    masks = g.masks
    keys = masks._keys
    out = {"all": _totals(), "slow": _totals()}
    for ids in _sample.valid_ids(d, hf):
        m = g.matcher()
        for t in ids:
            s = m._t[0]
            key = keys is not None and s not in masks._store and keys.split(s) is not None
            spent.clear()
            on[0] = key
            f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt if key else 0
            t0 = clock()
            m.fill_bitmask(bm)
            t1 = clock()
            ok = m.accept_token(t)
            t2 = clock()
            on[0] = False
            if key:
                faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0
                for cls in ("all", "slow") if t2 - t0 >= slow_ns else ("all",):
                    _add(out[cls], [1, t1 - t0, t2 - t1, faults, spent])
            if not ok:
                break
    for x in out.values():
        x[4] = dict(x[4])  # picklable (from a forked child)
    return out


def _totals():
    """[steps, fill ns, accept ns, page faults, {label: [ns, calls]}], all zero."""
    return [0, 0, 0, 0, collections.defaultdict(lambda: [0, 0])]


def _add(into, got):
    """Adds one total (or one step's figures) got to the total into."""
    for i in range(4):
        into[i] += got[i]
    for label, (ns, calls) in got[4].items():
        x = into[4][label]
        x[0] += ns
        x[1] += calls


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _sample.add_args(ap)
    ap.add_argument("--fork", action="store_true",
                    help="each schema in a child forked after the warm-up, as the harness runs it")
    ap.add_argument("--slow-us", type=float, default=200.0,
                    help="the key steps (fill + accept) of at least this many µs, also shown apart")
    a = ap.parse_args(argv)
    _sample.paths()
    from engines import WARM_UP_SCHEMA

    from furca.constrain import GrammarCompiler

    info, hf = _sample.llama3()
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    GrammarCompiler(info).compile_json_schema(WARM_UP_SCHEMA).matcher().fill_bitmask(bm)  # as the harness's parent
    on = [False]
    spent: dict = collections.defaultdict(lambda: [0, 0])  # one step's
    _wrap_all(on, spent)
    names = _sample.names(a)
    total = {"all": _totals(), "slow": _totals()}
    for name in names:
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            d = json.load(f)
        run = functools.partial(_schema, d, info, hf, bm, on, spent, a.slow_us * 1e3)
        got = in_child(run) if a.fork else run()
        if got is None:
            continue
        for cls in total:
            _add(total[cls], got[cls])
    if not total["all"][0]:
        print("no key steps")
        return
    where = "each schema in a child forked after the warm-up" if a.fork else "one process"
    print(f"{len(names)} schemas, {where} (thread CPU time, the wrappers included)")
    for cls, what in (("all", "key steps"), ("slow", f"key steps of {a.slow_us:g} µs or more")):
        n, fill_ns, accept_ns, faults, by = total[cls]
        if not n:
            continue
        print(f"{what} {n:,}: fill {fill_ns / n / 1e3:.1f} µs, accept {accept_ns / n / 1e3:.1f} µs, "
              f"{faults / n:.1f} page faults a step")
        print(f"  {'function':36s} {'µs a step':>10s} {'calls a step':>13s}")
        for label, (ns, calls) in sorted(by.items(), key=lambda kv: -kv[1][0]):
            print(f"  {label:36s} {ns / n / 1e3:10.1f} {calls / n:13.2f}")


if __name__ == "__main__":
    main()
