"""H4 measurement: classify every expansion of the 100-sample run, replay push-only states
through Python (LazyAutomaton.expand) and the numba prototype (ckern.py), check exactness.

    .venv/bin/python bench/prototypes/compiled_rows/run2.py [--limit N] > /tmp/out.txt  (pickle: $OUT, default /tmp/compiled_rows.pkl)
"""
import argparse
import gc
import json
import os
import pickle
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "..", "shared", "bench", "grammar"))
clock = time.thread_time_ns

import ckern  # noqa: E402
import schemas  # noqa: E402
from constrain.tokenizers_cache import tokenizer_json  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from furca.constrain import GrammarCompiler, TokenizerInfo  # noqa: E402
from furca.constrain import automaton as am  # noqa: E402

REC = {"on": False, "depth": 0, "log": None}
_orig_expand = am.LazyAutomaton.expand


def expand_timed(self, s):
    if REC["depth"] or not REC["on"] or self.expanded[s]:
        return _orig_expand(self, s)
    REC["depth"] = 1
    n0 = len(self.configs)
    t0 = clock()
    try:
        return _orig_expand(self, s)
    finally:
        dt = clock() - t0
        REC["depth"] = 0
        REC["log"].append((self, s, dt, len(self.configs) - n0))


am.LazyAutomaton.expand = expand_timed
PARTS = {}


def timed(owner, name, label):
    f = getattr(owner, name)
    depth = [0]

    def g(*a, **k):
        if depth[0] or not REC["on"]:
            return f(*a, **k)
        depth[0] += 1
        t0 = clock()
        try:
            return f(*a, **k)
        finally:
            depth[0] -= 1
            x = PARTS.setdefault(label, [0, 0])
            x[0] += clock() - t0
            x[1] += 1
    setattr(owner, name, g)


def instrument():
    from furca.constrain import _walk, slices, trie_walks, masks
    timed(slices.SliceBounds, "slice_depth", "slice")
    timed(trie_walks, "resume", "resume")
    timed(am.LazyAutomaton, "_step_byte", "bytestep")
    timed(masks.TokenMasks, "_context", "context")
    walk = _walk.get_walk()
    walk_range, walk_roots = _walk.get_walk_range()

    def counted(f):
        def g(*a):
            t0 = clock()
            r = f(*a)
            if REC["on"]:
                x = PARTS.setdefault("numba", [0, 0])
                x[0] += clock() - t0
                x[1] += 1
            return r
        return g
    _walk._WALK[0] = (counted(walk), (counted(walk_range), counted(walk_roots))) + _walk._WALK[0][2:]


def rel_ok(a, t, memo):
    r = memo.get(t)
    if r is None:
        rel_out, returns = a.closures.relative(t)
        r = memo[t] = not returns and not any(u in a.nfa.need for u, _f in rel_out)
    return r


def classify(a, s, memo):
    cf = a.configs[s]
    push = True
    for n, _st in cf:
        if n in a.nfa.tick:
            push = False
            break
        for _lo, _hi, tgs in a.template(n):
            if not all(rel_ok(a, t, memo) for t in tgs):
                push = False
                break
        if not push:
            break
    kind = "single" if len(cf) == 1 else "multi"
    return kind + (" push" if push else " other")


def chain(stacks, st):
    out = []
    fr = stacks.frames
    while st:
        ret, par, k = fr[st]
        out.append((ret, k))
        st = par
    return tuple(out)


def from_chain(stacks, ch):
    st = 0
    for ret, k in reversed(ch):
        st = stacks.push(ret, st, k)
    return st


def replay(nfa, info, rec, rnd, res):
    """rec: list of configs in chain form. Returns (py_ns, k_ns, k1_ns, n, new_py, new_k, mism, sync_ns)."""
    out = {}
    order = ["k", "py"] if rnd % 2 == 0 else ["py", "k"]
    B = am.LazyAutomaton(nfa, info)
    sids = []
    nodes = set()
    for cf in rec:
        sids.append(B.intern([(n, from_chain(B.stacks, ch)) for n, ch in cf], False))
        nodes.update(n for n, _c in cf)
    sids = list(dict.fromkeys(s for s in sids if not B.expanded[s]))
    for n in nodes:  # warm per-node caches (the kernel's tables are built from them)
        for _lo, _hi, tgs in B.template(n):
            for t in tgs:
                B.closures.relative(t)
    T = ckern.Tables(B, nodes, state_room=max(4096, 64 * len(sids)), stack_room=max(4096, 64 * len(sids)))
    T1 = ckern.Tables(B, nodes, state_room=max(4096, 64 * len(sids)), stack_room=max(4096, 64 * len(sids)))
    arr = np.array(sids, np.int32)
    rr = np.zeros(len(arr), np.int32)
    nst0 = len(B.configs)
    for who in order:
        if who == "k":
            single = np.array([len(B.configs[x]) == 1 for x in sids], dtype=bool)
            t0 = clock()
            ckern.expand_many(arr[single], rr[:int(single.sum())], *T.args())
            out["ks"] = clock() - t0
            rm = np.zeros(int((~single).sum()), np.int32)
            t0 = clock()
            ckern.expand_many(arr[~single], rm, *T.args())
            out["km"] = clock() - t0
            out["k"] = out["ks"] + out["km"]
            rr = np.concatenate([rr[:int(single.sum())], rm])
            out["ns"] = int(single.sum())
            fbset = set(np.concatenate([arr[single], arr[~single]])[rr != 0].tolist())
            args = T1.args()
            t0 = clock()
            for s in sids:  # one call per state (dispatch included)
                ckern.expand(s, *args)
            out["k1"] = clock() - t0
        else:
            single = [len(B.configs[x]) == 1 for x in sids]
            t0 = clock()
            for s, one in zip(sids, single):
                if one:
                    B.expand(s)
            out["pys"] = clock() - t0
            t0 = clock()
            for s, one in zip(sids, single):
                if not one:
                    B.expand(s)
            out["pym"] = clock() - t0
            out["py"] = out["pys"] + out["pym"]
    newk = int(T.ctr[2]) - nst0
    t0 = clock()
    T.materialize(nst0, int(T.ctr[2]))
    sync = clock() - t0
    fb = int((rr != 0).sum())
    # exactness: successors in chain form, byte by byte
    mism = 0
    if rnd == 0:
        memo_k, memo_p = {}, {}
        for i, s in enumerate(sids):
            if s in fbset:
                continue
            for b in range(256):
                tk, tp = int(T.trans[s, b]), int(B.trans[s, b])
                ck = memo_k.get(tk)
                if ck is None:
                    ck = memo_k[tk] = frozenset((n, T.chain(st)) for n, st in T.configs(tk))
                cp = memo_p.get(tp)
                if cp is None:
                    cp = memo_p[tp] = frozenset((n, chain(B.stacks, st)) for n, st in B.configs[tp])
                if ck != cp or bool(T.s_acc[tk]) != bool(B.accepting[tp]):
                    mism += 1
    res.append(dict(pys=out["pys"], pym=out["pym"], ks=out["ks"], km=out["km"], nsingle=out["ns"], py=out["py"], k=out["k"], k1=out["k1"], n=len(sids), fb=fb, newpy=len(B.configs) - nst0,
                    newk=newk, mism=mism, sync=sync))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    data = os.path.join(ROOT, "tests", "data", "maskbench-sample")
    names = sorted(n for n in os.listdir(data) if n.endswith(".json"))
    if a.limit:
        names = names[: a.limit]
    path, eos = tokenizer_json("llama3_1")
    tok = Tokenizer.from_file(str(path))
    info = TokenizerInfo.from_tokenizer_json(path, eos_token=eos)
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    GrammarCompiler(info).compile_json_schema({"type": "object"}).matcher().fill_bitmask(bm)
    instrument()
    gc.collect()
    gc.freeze()
    steps = []  # (schema, step_ns, {kind: [ns, count]})
    reps = {}
    for name in names:
        with open(os.path.join(data, name), encoding="utf-8") as f:
            d = json.load(f)
        try:
            g = GrammarCompiler(info).compile_json_schema(d["schema"])
        except Exception as e:  # compile error
            print("skip", name, type(e).__name__, flush=True)
            continue
        g.matcher().fill_bitmask(bm)
        REC["on"] = True
        allexp = []
        for test in d["tests"]:
            if not test["valid"]:
                continue
            ids = tok.encode(schemas.instance_text(test["data"], d["schema"]), add_special_tokens=False).ids
            m = g.matcher()
            for t in ids + [info.eos_token_id]:
                REC["log"] = []
                PARTS.clear()
                t0 = clock()
                m.fill_bitmask(bm)
                ok = m.accept_token(t)
                dt = clock() - t0
                steps.append((name, dt, REC["log"], {k: tuple(v) for k, v in PARTS.items()}))
                allexp.extend(REC["log"])
                if not ok:
                    break
        REC["on"] = False
        # classify (after the run: relative() calls outside the timed regions)
        memo = {}
        recs = []
        aut = None
        for i, (aa, s, ns, new) in enumerate(allexp):
            aut = aa
            kind = classify(aa, s, memo)
            allexp[i] = (kind, s, ns, new)
            if kind.endswith("push"):
                recs.append(tuple((n, chain(aa.stacks, st)) for n, st in aa.configs[s]))
        for k in range(len(steps)):
            if steps[k][0] == name and steps[k][2] and type(steps[k][2][0][0]) is not str:
                steps[k] = (name, steps[k][1], [(classify(x[0], x[1], memo), x[1], x[2], x[3]) for x in steps[k][2]], steps[k][3])
        res = []
        if recs:
            for r in range(a.rounds):
                replay(aut.nfa, info, recs, r, res)
        reps[name] = res
        if res and res[0]["n"]:
            py = min(x["py"] for x in res)
            k = min(x["k"] for x in res)
            k1 = min(x["k1"] for x in res)
            x = res[0]
            print(f"{name}: {x['n']} push states (fb {x['fb']}), py {py / 1e3:.0f} us ({py / x['n'] / 1e3:.1f}/st), "
                  f"kernel {k / 1e3:.0f} us ({k / x['n'] / 1e3:.2f}/st), 1-call {k1 / x['n'] / 1e3:.2f}/st, "
                  f"new py {x['newpy']} k {x['newk']} sync {x['sync'] / max(1, x['newk']) / 1e3:.2f} us/new, "
                  f"mism {x['mism']}", flush=True)
    with open(os.environ.get("OUT", "/tmp/compiled_rows.pkl"), "wb") as f:
        pickle.dump((steps, reps), f)


if __name__ == "__main__":
    main()
