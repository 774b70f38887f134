"""A key state's new mask, split by the functions it runs: the path stage (3) of DESIGN's
plan would put in one kernel call.

    .venv/bin/python bench/constrain_key_steps.py [--sample 500 | --files F]

In one process, per schema of the harness's stratified sample (Llama-3.1): a cold compile,
then every valid instance token by token, as the shared harness walks them. A step is a
"key step" when its state's mask is new and the state lies on a key trie node
(key_masks.KeyTrieMasks.split). Prints the key steps' mean fill and accept, and for each
function of the mask's path (wrapped only inside key steps) its time a key step and its
calls a key step, outermost first: what the fill spends outside the kernels. Thread CPU
time; the wrappers add ~0.3 µs a call.

Session 48 (at 0916c6a): 6,433 key steps, fill 76.9 µs and accept 20.1; `_compute_mask_ctx`
65.0, the abstract part 41.2, the key words 29.7, their kernel call 18.1, the stored forms
8.7, the continuations 7.8, the context 5.6, "any key"'s lookup 5.3 (bench/results/constrain.md).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time

import numpy as np

import _sample  # this script's folder is on the path

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
    """Wraps TIMED: each adds its thread time and a call to spent[label] while on[0]."""
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _sample.add_args(ap)
    a = ap.parse_args(argv)
    _sample.paths()
    from engines import WARM_UP_SCHEMA

    from furca.constrain import GrammarCompiler
    from furca.errors import CompileError

    info, hf = _sample.llama3()
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    GrammarCompiler(info).compile_json_schema(WARM_UP_SCHEMA).matcher().fill_bitmask(bm)  # as the harness's parent
    on = [False]
    spent: dict = collections.defaultdict(lambda: [0, 0])
    _wrap_all(on, spent)
    names = _sample.names(a)
    n = fill_ns = accept_ns = 0
    for name in names:
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            d = json.load(f)
        try:
            g = GrammarCompiler(info, cache_size=0).compile_json_schema(d["schema"])
        except CompileError:
            continue
        g.matcher().fill_bitmask(bm)
        masks = g.masks
        keys = masks._keys
        for ids in _sample.valid_ids(d, hf):
            m = g.matcher()
            for t in ids:
                s = m._t[0]
                key = keys is not None and s not in masks._store and keys.split(s) is not None
                on[0] = key
                t0 = clock()
                m.fill_bitmask(bm)
                t1 = clock()
                ok = m.accept_token(t)
                t2 = clock()
                on[0] = False
                if key:
                    n += 1
                    fill_ns += t1 - t0
                    accept_ns += t2 - t1
                if not ok:
                    break
    if not n:
        print("no key steps")
        return
    print(f"{len(names)} schemas; key steps {n:,}: fill {fill_ns / n / 1e3:.1f} µs, accept {accept_ns / n / 1e3:.1f} µs "
          "a step (thread CPU time, the wrappers included)")
    print(f"{'function':36s} {'µs a key step':>14s} {'calls a step':>13s}")
    for label, (ns, calls) in sorted(spent.items(), key=lambda kv: -kv[1][0]):
        print(f"{label:36s} {ns / n / 1e3:14.1f} {calls / n:13.2f}")


if __name__ == "__main__":
    main()
