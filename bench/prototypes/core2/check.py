"""Exactness and cost of the row kernel (furca/constrain/_core_kernels.row) against the
Python rows (rows.py), state by state, on the in-repo sample.

    NUMBA_CACHE_DIR=/tmp/nc-core2 .venv/bin/python bench/prototypes/core2/check.py [--limit N]

Per schema of tests/data/maskbench-sample (Llama-3.1), with the kernel off
(the default: every row is Python's): compile, walk every valid instance token
by token (fill_bitmask + accept_token) with LazyAutomaton.expand timed (outermost calls,
thread CPU: the cold Python rows). Then, in kernel tables of its own (ids of their own),
every state Python expanded (in id order) is converted (its stacks pushed frame by
frame), interned, and its row computed by the kernel (timed); each byte's successor is
compared with Python's as a set of (node, frame chain) plus the accept flag. Also: the
same rows again with every successor interned (one call each, and all in one call), and
a call that does nothing with the same arguments (the dispatch).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
clock = time.thread_time_ns


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--data", default=os.path.join(ROOT, "tests", "data", "maskbench-sample"))
    a = ap.parse_args()
    os.environ["FURCA_CORE"] = "0"
    import kern
    sys.path.insert(0, os.path.join(ROOT, "..", "shared", "bench", "grammar"))
    import schemas
    from constrain.tokenizers_cache import tokenizer_json
    from tokenizers import Tokenizer

    from furca.constrain import GrammarCompiler, TokenizerInfo, automaton
    from furca.errors import CompileError

    path, eos = tokenizer_json("llama3_1")
    tok = Tokenizer.from_file(str(path))
    info = TokenizerInfo.from_tokenizer_json(path, eos_token=eos)
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    GrammarCompiler(info).compile_json_schema({"type": "object"}).matcher().fill_bitmask(bm)

    exp = [0, 0]
    orig = automaton.LazyAutomaton.expand
    depth = [0]

    def timed_expand(self, s):
        if depth[0] or self.expanded[s]:
            return orig(self, s)
        depth[0] += 1
        t0 = clock()
        try:
            return orig(self, s)
        finally:
            depth[0] -= 1
            exp[0] += clock() - t0
            exp[1] += 1
    automaton.LazyAutomaton.expand = timed_expand

    warm = []
    names = sorted(n for n in os.listdir(a.data) if n.endswith(".json"))
    if a.limit:
        names = names[: a.limit]
    tot = dict(rows=0, bad=0, fallback=0, k_ns=0, pack_ns=0, conv_ns=0, py_ns=0, py_rows=0, schemas=0)
    for name in names:
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            d = json.load(f)
        try:
            g = GrammarCompiler(info).compile_json_schema(d["schema"])
        except CompileError:
            continue
        exp[0] = exp[1] = 0
        for test in d.get("tests") or []:
            if not test["valid"]:
                continue
            text = schemas.instance_text(test["data"], d["schema"])
            ids = tok.encode(text, add_special_tokens=False).ids
            m = g.matcher()
            for t in ids + [info.eos_token_id]:
                m.fill_bitmask(bm)
                if not m.accept_token(t):
                    break
        tot["py_ns"] += exp[0]
        tot["py_rows"] += exp[1]
        au = g.automaton
        nfa = au.nfa
        t0 = clock()
        P = kern.pack(nfa)
        tot["pack_ns"] += clock() - t0
        T = kern.Tables(n_states=1 << 16, n_stacks=1 << 17, pool=1 << 22)
        frames = au.stacks.frames
        kst = {0: 0}

        def kstack(st):
            hit = kst.get(st)
            if hit is None:
                ret, par, k = frames[st]
                hit = kst[st] = kern.push(ret, kstack(par), k, T.stk, T.sh, T.cnt)
            return hit

        def py_content(s):
            return frozenset((n, chain_py(st)) for n, st in au.configs[s]), bool(au.accepting[s])

        chain_memo = {}

        def chain_py(st):
            out = []
            while st:
                ret, par, k = frames[st]
                out.append((ret, k))
                st = par
            return tuple(out)

        def chain_k(st):
            out = []
            while st:
                out.append((int(T.stk[st, 0]), int(T.stk[st, 2])))
                st = int(T.stk[st, 1])
            return tuple(out)

        def k_content(ks):
            o, m_, acc = T.sinfo[ks]
            return frozenset((int(x >> 32), chain_k(int(x & 0xFFFFFFFF))) for x in T.pool[o:o + m_]), bool(acc)

        buf = np.zeros(1 << 14, np.int64)
        ws = np.zeros((1 << 14, 3), np.int64)
        rel = np.zeros((1024, 3), np.int64)
        seen = np.zeros((1 << 12, 4), np.int64)
        sts = np.zeros(4096, np.int32)  # a state of up to 4,096 configurations
        cuts = np.zeros(257, np.bool_)
        outrow = np.zeros(256, np.int32)
        has_need = bool(nfa.need)
        states = [s for s in range(1, au.num_states) if au.expanded[s]]
        if not warm:  # numba compiles (or loads) the kernels on the first call: not timed
            warm.append(1)
            keys = np.array(sorted((n << 32) | kstack(st) for n, st in au.configs[states[0]]), np.int64)
            ks = kern.intern(keys, len(keys), False, T.pool, T.sinfo, T.hh, T.cnt)
            kern.row(ks, P, T.stk, T.sh, T.cnt, T.pool, T.sinfo, T.hh, outrow, buf, ws, rel, seen, sts, cuts, has_need,
                     T.trans)
            kern.rows_many(np.array([ks], np.int32), np.zeros(1, np.int32), P, T.stk, T.sh, T.cnt, T.pool, T.sinfo,
                           T.hh, outrow, buf, ws, rel, seen, sts, cuts, has_need, T.trans)
            kern.noop(ks, P, T.stk, T.sh, T.cnt, T.pool, T.sinfo, T.hh, outrow, buf, ws, rel, seen, sts, cuts, has_need,
                      T.trans)
            T = kern.Tables(n_states=1 << 16, n_stacks=1 << 17, pool=1 << 22)
            kst.clear()
            kst[0] = 0
        tot["schemas"] += 1
        bad_here = 0
        for s in states:
            t0 = clock()
            keys = np.array(sorted((n << 32) | kstack(st) for n, st in au.configs[s]), np.int64)
            ks = kern.intern(keys, len(keys), bool(au.accepting[s]), T.pool, T.sinfo, T.hh, T.cnt)
            t1 = clock()
            r = kern.row(ks, P, T.stk, T.sh, T.cnt, T.pool, T.sinfo, T.hh, outrow, buf, ws, rel, seen, sts, cuts,
                         has_need, T.trans)
            t2 = clock()
            tot["conv_ns"] += t1 - t0
            tot["k_ns"] += t2 - t1
            tot["rows"] += 1
            if r < 0:
                tot["fallback"] += 1
                continue
            pairs = {}
            for b in range(256):
                pairs.setdefault((int(au.trans[s, b]), int(outrow[b])), b)
            for (pt, kt), b in pairs.items():
                want = py_content(pt) if pt else (frozenset(), False)
                got = k_content(kt) if kt else (frozenset(), False)
                if want != got:
                    bad_here += 1
                    if tot["bad"] + bad_here <= 3:
                        print(f"MISMATCH {name} state {s} byte {b}: python {sorted(want[0])[:4]} {want[1]} "
                              f"kernel {sorted(got[0])[:4]} {got[1]}")
                    break
        tot["bad"] += bad_here
        # warm: the same rows again (every successor interned) one call each, one call for all, and no-op calls
        kss = []
        for s_ in states:
            keys = np.array(sorted((n << 32) | kstack(st) for n, st in au.configs[s_]), np.int64)
            kss.append(kern.intern(keys, len(keys), bool(au.accepting[s_]), T.pool, T.sinfo, T.hh, T.cnt))
        kss = np.array(kss, np.int32)
        res = np.zeros(len(kss), np.int32)
        t0 = clock()
        for ks in kss.tolist():
            kern.row(ks, P, T.stk, T.sh, T.cnt, T.pool, T.sinfo, T.hh, outrow, buf, ws, rel, seen, sts, cuts, has_need,
                     T.trans)
        t1 = clock()
        kern.rows_many(kss, res, P, T.stk, T.sh, T.cnt, T.pool, T.sinfo, T.hh, outrow, buf, ws, rel, seen, sts, cuts,
                       has_need, T.trans)
        t2 = clock()
        for ks in kss.tolist():
            kern.noop(ks, P, T.stk, T.sh, T.cnt, T.pool, T.sinfo, T.hh, outrow, buf, ws, rel, seen, sts, cuts, has_need,
                      T.trans)
        t3 = clock()
        tot["warm_calls_ns"] = tot.get("warm_calls_ns", 0) + t1 - t0
        tot["warm_batch_ns"] = tot.get("warm_batch_ns", 0) + t2 - t1
        tot["noop_ns"] = tot.get("noop_ns", 0) + t3 - t2
    print(json.dumps(tot))
    print(f"{tot['schemas']} schemas; python expand (cold, in the walks): {tot['py_rows']} rows, "
          f"{tot['py_ns'] / max(tot['py_rows'], 1) / 1e3:.2f} µs a row; kernel rows (cold tables): {tot['rows']}, "
          f"{tot['k_ns'] / max(tot['rows'], 1) / 1e3:.2f} µs a row incl. dispatch; conversion in "
          f"{tot['conv_ns'] / max(tot['rows'], 1) / 1e3:.2f} µs; "
          f"pack {tot['pack_ns'] / max(tot['schemas'], 1) / 1e3:.0f} µs a grammar; "
          f"rows differing {tot['bad']}, fallbacks {tot['fallback']}")
    r = max(tot["rows"], 1)
    print(f"warm (successors interned): {tot['warm_calls_ns'] / r / 1e3:.2f} µs a row one call each, "
          f"{tot['warm_batch_ns'] / r / 1e3:.2f} in one call; a no-op call with the same arguments "
          f"{tot['noop_ns'] / r / 1e3:.2f} µs")


if __name__ == "__main__":
    main()
