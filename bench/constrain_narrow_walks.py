"""What a narrow state's new mask pays in the steps, and how alike its work is to what
the grammar already had: the probes behind session 49's "the count of new states is the
lever" (bench/results/constrain.md).

    .venv/bin/python bench/constrain_narrow_walks.py [--sample 500 | --files F] [--slow-us 100] [--reach]

In one process, per schema of the harness's stratified sample (Llama-3.1): a cold compile
and its first mask (not counted), then every valid instance token by token, as the shared
harness walks them. A "narrow new mask" is masks.TokenMasks._compute_mask called for a
narrow state (the walk of the state as it is: no context split, no key trie words).
Each is timed (thread CPU time), then computed twice more with the rows its walk made
(the walk alone), and the states it made are read. Prints, over the narrow new masks and
over those of at least --slow-us:
- the first / second / third time and the new states a mask;
- which of them made a state of literals (4 or more configurations, all but one on
  one-byte nodes: the declared names after `,"`), and how many of their new states are
  literal prefixes (all configurations but one on one-byte nodes);
- how many of the slow masks' new states have an earlier state of their grammar with the
  same NFA nodes and the same top k frames of each configuration's stack (and the same
  accepting flag), k = 0..4: the ceiling of an equivalence of states up to the tokens'
  reach, by depth.
--reach adds, after each schema's instances, each slow mask's reach: how many frames
below its state's shallowest stack its allowed tokens' byte steps popped; and how many
slow masks had an earlier narrow new mask's state alike to that depth (an upper bound of
a mask-level equivalence: rejected tokens are not stepped). It steps those tokens through
the automaton, so it changes no figure above but takes longer (~2 min).

Session 49 (873e9a7), this tool's run: 17,383 narrow new masks, 34.4 / 14.2 / 11.7 µs,
6.1 new states; the 464 over 100 µs 177 / 45 / 37 µs, 27.2 new states (~130 µs of the 177
making states and rows); 162 of them met a state of literals (226 µs, 38.2 new states,
14.8 literal prefixes); of their 12,854 new states 69 / 44 / 27 / 16 / 8% alike at k =
0..4; reach 0-2 frames for 383 of 463, 80 (17%) served by an earlier mask alike to it.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time

import numpy as np

import _sample  # this script's folder is on the path
from _wrap import wrap

clock = time.thread_time_ns
DEPTHS = (0, 1, 2, 3, 4)


def _one_byte(nfa, n) -> bool:
    """As key_masks.KeyTrieMasks._one_byte: node n's only edge reads one byte value."""
    es = nfa.edges[n]
    return len(es) == 1 and es[0][0] == es[0][1] and n not in nfa.tick


def _alike(a, s, k):
    """State s's NFA nodes with the top k frames of each stack (return node, count), and
    whether each stack ends there, and its accepting flag: the key two states share when
    they agree up to depth k."""
    frames = a.stacks.frames
    out = []
    for n, st in a.configs[s]:
        top, x = [], st
        for _ in range(k):
            if x <= 0:
                break
            ret, x, count = frames[x]
            top.append((ret, count))
        out.append((n, tuple(top), x <= 0))
    return tuple(sorted(out)), bool(a.accepting[s])


def _reach(a, m, s, packed) -> int:
    """How many frames below state s's shallowest stack the byte steps of the tokens that
    s's mask (packed) allows popped (m: a matcher of the grammar, for the tokens' bytes)."""
    depth = a.stacks.depth
    d0 = min((depth[st] for _n, st in a.configs[s]), default=0)
    low = d0
    words = packed.view(np.uint8)
    for t in np.nonzero(np.unpackbits(words, bitorder="little"))[0].tolist():
        x = s
        for b in m._token_data(t) or b"":
            x = a.step(x, bytes([b]))
            if x == 0:
                break
            low = min(low, min((depth[st] for _n, st in a.configs[x]), default=0))
    return d0 - low


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _sample.add_args(ap)
    ap.add_argument("--slow-us", type=float, default=100.0, help="the narrow new masks of at least this, apart")
    ap.add_argument("--reach", action="store_true", help="each slow mask's reach and the mask-level bound")
    a = ap.parse_args(argv)
    _sample.paths()
    from furca.constrain import GrammarCompiler
    from furca.errors import CompileError

    info, hf = _sample.llama3()
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    slow_ns = a.slow_us * 1e3
    off = [True]  # the compile and first mask are not counted
    made: list = []  # one schema's narrow new masks: (state, ns, again ns, third ns, first new state, new states, packed)

    def make(compute):
        def timed(self, s, record=False, narrow=False):
            if record or not narrow or off[0]:
                return compute(self, s, record, narrow)
            au = self._a
            n0 = len(au.configs)
            t0 = clock()
            got = compute(self, s, record, narrow)
            t1 = clock()
            compute(self, s, record, narrow)
            t2 = clock()
            compute(self, s, record, narrow)
            t3 = clock()
            made.append((s, t1 - t0, t2 - t1, t3 - t2, n0, len(au.configs) - n0, got[0]))
            return got

        return timed

    wrap("masks", "TokenMasks._compute_mask", make)
    times = {"all": [], "slow": []}
    lit = collections.Counter()
    alike = collections.Counter()
    reach = collections.Counter()
    served = collections.Counter()
    for name in _sample.names(a):
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            d = json.load(f)
        off[0] = True
        try:
            g = GrammarCompiler(info, cache_size=0).compile_json_schema(d["schema"])
            g.matcher().fill_bitmask(bm)
        except CompileError:
            continue
        au = g.automaton
        made.clear()
        off[0] = False
        for ids in _sample.valid_ids(d, hf):
            m = g.matcher()
            for t in ids:
                m.fill_bitmask(bm)
                if not m.accept_token(t):
                    break
        off[0] = True
        earlier = {k: set() for k in DEPTHS}  # the keys of the states before each mask's
        seen_to = 0
        roots = []
        for s, ns, again, third, n0, new, packed in made:
            for i in range(seen_to, n0):
                for k in DEPTHS:
                    earlier[k].add(_alike(au, i, k))
            seen_to = max(seen_to, n0)
            slow = ns >= slow_ns
            for cls in ("all", "slow") if slow else ("all",):
                times[cls].append((ns, again, third, new))
            roots.append((s, packed, slow))
            if not slow:
                continue
            sizes = [len(au.configs[i]) for i in range(n0, n0 + new)]
            ones = [sum(1 for n, _st in au.configs[i] if _one_byte(au.nfa, n)) for i in range(n0, n0 + new)]
            has_lit = any(m_ >= 4 and o >= m_ - 1 for m_, o in zip(sizes, ones))
            lit["masks"] += 1
            if has_lit:
                lit["with a state of literals"] += 1
                lit["their ns"] += ns
                lit["their new states"] += new
                lit["their literal prefixes"] += sum(1 for m_, o in zip(sizes, ones) if m_ and o >= max(1, m_ - 1))
            for i in range(n0, n0 + new):
                alike["new states"] += 1
                for k in DEPTHS:
                    if _alike(au, i, k) in earlier[k]:
                        alike[k] += 1
        if a.reach and roots:
            m = g.matcher()
            before = []  # the states of the narrow new masks before each, slow or not
            for s, packed, slow in roots:
                if slow:
                    r = _reach(au, m, s, packed)
                    reach[r] += 1
                    key = _alike(au, s, r)
                    if any(_alike(au, x, r) == key for x in before):
                        served[r] += 1
                before.append(s)
    for cls, what in (("all", "narrow new masks"), ("slow", f"narrow new masks of {a.slow_us:g} µs or more")):
        x = np.array(times[cls], float).reshape(-1, 4)
        if len(x):
            print(f"{what}: {len(x):,}; first / again / third {x[:, 0].mean() / 1e3:.1f} / {x[:, 1].mean() / 1e3:.1f} / "
                  f"{x[:, 2].mean() / 1e3:.1f} µs, new states {x[:, 3].mean():.1f}")
    n = lit["with a state of literals"]
    if n:
        print(f"  with a state of literals: {n} of {lit['masks']}, {lit['their ns'] / n / 1e3:.0f} µs, "
              f"{lit['their new states'] / n:.1f} new states, {lit['their literal prefixes'] / n:.1f} literal prefixes")
    if alike["new states"]:
        print(f"  their new states: {alike['new states']:,}; with an earlier state alike to depth k: "
              + ", ".join(f"k={k} {alike[k]:,} ({100 * alike[k] / alike['new states']:.0f}%)" for k in DEPTHS))
    if a.reach:
        print(f"  reach (frames popped below the state's stacks by its allowed tokens): {sorted(reach.items())}")
        print(f"  an earlier narrow mask's state alike to that depth: {sorted(served.items())}, "
              f"{sum(served.values())} of {sum(reach.values())}")


if __name__ == "__main__":
    main()
