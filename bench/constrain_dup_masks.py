"""How many of a grammar's new masks equal a mask it already made: the bound on any lever
that would find a state's mask through an equivalence of states instead of a walk.

    .venv/bin/python bench/constrain_dup_masks.py [--sample 500 | --files LIST] [--top 10]

Per schema of the harness's stratified sample (Llama-3.1), in one process: a cold compile,
then every valid instance token by token, as the shared harness walks them. A fill is
"new" when its state's mask was not in the grammar's store before it (its canonical
state's, as TokenMasks keys the store); a new mask is a "duplicate" when the grammar had
already filled a mask with the same bits (from another state), and a "key state" when it
lies on a key trie node (key_masks.KeyTrieMasks.split). Prints the new masks, duplicates
and key states over the sample, in first instances and later ones, and the schemas with
the most duplicates. Without --slow-us the counts do not depend on the machine. --why
classes the duplicates: the others by their abstract states (wide or narrow), the key
states by kind (_key_kind), counts the wide new masks that repeat an earlier
(abstract state, continuation), and the narrow new masks that equal their abstract state's
(computing it: the walk then has more masks than the harness's); with --slow-us also the
slow steps' new masks by class: the key states' by kind, the others' by wide or narrow,
duplicate or not, and for a duplicate whether an earlier state with that mask had its
abstract state.

Session 47 (at 70b73f7): see bench/results/constrain.md.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import time

import numpy as np

import _sample  # this script's folder is on the path

clock = time.thread_time_ns


def _key_kind(keys, s, trie) -> str:
    """A key state's kind: whether a token closes a name at its trie node (closers), and
    whether its declared names' literals are all spelled by no token to their end (their
    masks then "any key"'s: bench/prototypes/key_literals_inside_any) or some token runs
    on into a member's value."""
    k, _st, rest = keys.split(s)
    nodes = (rest >> 32).tolist() if type(rest) is np.ndarray else [n for n, _ in rest]
    closers = "closers" if len(keys._closers(k, trie)) else "no closers"
    if not all(keys._one_byte(n) for n in nodes):
        return closers + ", other configurations"
    if any(keys._plain_run(n, trie)[1] >= 0 for n in nodes):
        return closers + ", a literal's token runs into its value"
    return closers + ", literals only"


def census(g, d, hf, slow_ns=None, why=False):
    """(new, tags) over g's walk of d's valid instances. new: Counter of (first instance?,
    key state?, duplicate?, slow?) over the new masks, slow being a step (fill + accept,
    thread CPU time) over slow_ns. tags: Counter of ("slow steps",) and, with why,
    ("why", the kind of a duplicate that is not a key state: wide or narrow, and whether an
    earlier state with that mask had the same abstract state, automaton.abstract),
    ("why key", a duplicate key state's _key_kind), ("slow key", a slow key state's kind),
    ("key group", whether a key state's group of (trie node, other configurations' nodes,
    narrow target) was met before and with its mask: a memo by that group's bound),
    ("slow other", a slow step's new mask that is not a key state's, by class),
    ("narrow", whether a narrow new mask equals its abstract state's), ("pair", whether a
    wide new mask repeats an earlier (abstract state, continuation, accepting))."""
    masks = g.masks
    keys = masks._keys
    canon = masks._canon
    eos = ~masks._info.eos_mask
    bm = np.zeros((1, masks._info.num_words), dtype=np.int32)
    seen: dict = {}  # mask hash -> the abstract states (or None) of the states that filled it
    pairs: set = set()  # (abstract state, continuation), accepting: of the wide new masks (why)
    groups: dict = {}  # a key state's (trie node, other configurations' nodes, narrow target) -> mask hashes (why)
    abs_seen: set = set()  # the abstract states of the states met (why)
    new_masks: collections.Counter = collections.Counter()
    tags: collections.Counter = collections.Counter()
    first = True
    for ids in _sample.valid_ids(d, hf):
        m = g.matcher()
        for t in ids:
            s = m._t[0]
            new = (canon(s) if canon is not None else s) not in masks._store
            t0 = clock()
            m.fill_bitmask(bm)
            ok = m.accept_token(t)
            slow = slow_ns is not None and clock() - t0 > slow_ns
            h = hashlib.blake2b(bm.tobytes(), digest_size=16).digest()
            dup = h in seen
            ab = None
            if why:
                hit = g.automaton.abstract(s)
                ab = hit[0] if hit is not None else None
            if slow:
                tags["slow steps",] += 1
            if new:
                key = keys is not None and keys.split(s) is not None
                new_masks[first, key, dup, slow] += 1
                if why:
                    _why(tags, g, s, ab, key, dup, slow, seen.get(h, ()), abs_seen, pairs, bm, eos, groups, h)
            seen.setdefault(h, set()).add(ab)
            if ab is not None:
                abs_seen.add(ab)
            if not ok:
                break
        first = False
    return new_masks, tags


def _why(tags, g, s, ab, key, dup, slow, same_mask, abs_seen, pairs, bm, eos, groups, h) -> None:
    """census's --why tags of the new mask of state s (its bits in bm, their hash h;
    same_mask: the abstract states of the earlier states with that mask; groups: the key
    states' groups met, with their masks' hashes)."""
    masks = g.masks
    wide = masks._wide(s)
    if wide:  # key states too
        ctx = masks.split.context(s)
        if ctx is not None:
            pair = (ctx, bool(g.automaton.accepting[s]))
            tags["pair", pair in pairs] += 1
            pairs.add(pair)
    if key:
        kind = _key_kind(masks._keys, s, masks._info.trie)
        k, _st, rest = masks._keys.split(s)
        nodes = (rest >> 32).tolist() if type(rest) is np.ndarray else [n for n, _ in rest]
        group = (k, tuple(sorted(nodes)), masks._keys._marks[k][0])
        met = groups.setdefault(group, set())
        tags["key group", "a new group" if not met else "a group met, the same mask" if h in met
             else "a group met, another mask"] += 1
        met.add(h)
        if dup:
            tags["why key", kind] += 1
        if slow:
            tags["slow key", kind + (", duplicate" if dup else "")] += 1
        return
    if slow:
        tags["slow other", ("wide" if wide else "narrow") + (", duplicate" if dup else "")
             + (", same abstract" if dup and ab is not None and ab in same_mask else "")] += 1
    if dup:
        tags["why", ("wide, " if wide else "narrow, ")
             + ("same abstract" if ab is not None and ab in same_mask else
                "no abstract state" if ab is None else "another abstract state")] += 1
    if not wide and ab is not None:  # narrow: is its mask its abstract state's (no token leaves the rule)?
        ab_mask = masks.mask(ab) & eos
        free = bool(np.array_equal(bm[0, : ab_mask.shape[0]] & eos, ab_mask))
        tags["narrow", ("context-free" if free else "context-dependent")
             + (", abstract state met before" if ab in abs_seen else "")] += 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _sample.add_args(ap)
    ap.add_argument("--top", type=int, default=10, help="the schemas with the most duplicates shown")
    ap.add_argument("--why", action="store_true", help="class the duplicates that are not key states by "
                    "their abstract states (interns them: the walk makes more states than the harness's)")
    ap.add_argument("--slow-us", type=float, help="also count the new masks whose step took over this "
                    "(thread CPU time: this one process's, not the harness's forked children's)")
    a = ap.parse_args(argv)
    _sample.paths()
    import furca.constrain as fc

    info, hf = _sample.llama3()
    compiler = fc.GrammarCompiler(info)
    names = _sample.names(a)
    total: collections.Counter = collections.Counter()
    tags: collections.Counter = collections.Counter()
    per = []
    for name in names:
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            d = json.load(f)
        try:
            g = compiler.compile_json_schema(d["schema"])
        except Exception:  # noqa: BLE001 - a schema furca refuses has no masks to count
            continue
        got, got_tags = census(g, d, hf, a.slow_us * 1e3 if a.slow_us else None, a.why)
        total.update(got)
        tags.update(got_tags)
        per.append((sum(v for k, v in got.items() if k[2]), sum(got.values()), name))

    def count(first=None, key=None, dup=None, slow=None):
        return sum(v for (f, k, du, sl), v in total.items()
                   if all(want is None or got == want for want, got in ((first, f), (key, k), (dup, du), (slow, sl))))

    def tagged(tag):
        return ", ".join(f"{k[1]} {v:,}" for k, v in sorted(tags.items(), key=str) if k[0] == tag)

    print(f"{len(per)} schemas; new masks {count():,}, of them equal to an earlier mask of the grammar "
          f"{count(dup=True):,} ({100 * count(dup=True) / max(1, count()):.0f}%)")
    for label, first in (("first instances", True), ("later instances", False)):
        print(f"  {label}: new {count(first):,}, duplicates {count(first, dup=True):,}; key states new "
              f"{count(first, True):,}, duplicates {count(first, True, True):,}; other states new "
              f"{count(first, False):,}, duplicates {count(first, False, True):,}")
    if a.slow_us:
        print(f"steps over {a.slow_us:g} µs: {tags['slow steps',]:,}; of them making a new mask: {count(slow=True):,}, duplicates "
              f"{count(dup=True, slow=True):,}; first instances {count(True, slow=True):,} / "
              f"{count(True, dup=True, slow=True):,}; key states {count(key=True, slow=True):,} / "
              f"{count(key=True, dup=True, slow=True):,}")
    if a.why:
        print("duplicates that are not key states, by the abstract states of the states with that mask: "
              + tagged("why"))
        print("key-state duplicates by kind: " + tagged("why key"))
        print("key states' new masks by (trie node, other configurations' NFA nodes, narrow target): "
              + tagged("key group"))
        if a.slow_us:
            print(f"key states' new masks in steps over {a.slow_us:g} µs by kind: " + tagged("slow key"))
            print(f"other states' new masks in steps over {a.slow_us:g} µs: " + tagged("slow other"))
        print("narrow new masks (computing their abstract states' masks too, which the walk then has): "
              + tagged("narrow"))
        print(f"wide new masks with one context: {tags['pair', False] + tags['pair', True]:,}, of them with the "
              f"(abstract state, continuation, accepting) of an earlier one {tags['pair', True]:,}")
    print(f"the {a.top} schemas with the most duplicates (duplicates / new masks):")
    for dup, new, name in sorted(per, reverse=True)[: a.top]:
        print(f"  {name:50s} {dup:5d} / {new:5d}")


if __name__ == "__main__":
    main()
