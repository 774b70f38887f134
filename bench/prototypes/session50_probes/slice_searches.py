"""The slice searches of the steps by slice and result (session 50).

    .venv/bin/python bench/prototypes/session50_probes/slice_searches.py [--sample 500] [--fork]

Every instance token by token, each schema in a forked child with --fork. Times each new
slices.SliceBounds.slice_depth (its outermost call, thread CPU) and notes its slice, result
(0, a depth, or max), whether the state lies in the closed layout of lasting rules, and the
step's time. Session 50 (bc57064, --fork): 564 searches, 113 ms, in 445 steps over 200 µs;
`json_string_char` 192 at max (143 µs), 40 at a depth (529 µs), 44 at 0 (148 µs); `alnum`
70 at a depth (433 µs); none in the lasting layout. `constrain_tail.py --what-if "slice
search"` bounds them at -1% of the steps over 200 µs."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # bench/
import json, time, collections
import numpy as np, argparse
import _sample
from _wrap import wrap
from _forked import in_child
clock = time.thread_time_ns
ap = argparse.ArgumentParser(); _sample.add_args(ap, 500); ap.add_argument("--fork", action="store_true"); a = ap.parse_args()
_sample.paths()
import schemas
from engines import WARM_UP_SCHEMA
from furca.constrain import GrammarCompiler
from furca.constrain.nfa import closed_layout_size
from furca.errors import CompileError
info, tok = _sample.llama3()
bm = np.zeros((1, info.num_words), dtype=np.int32)
GrammarCompiler(info).compile_json_schema(WARM_UP_SCHEMA).matcher().fill_bitmask(bm)
rec = []
off = [True]
depth = [0]
step_ns = [0]
def make(f):
    def w(self, s, sl):
        if off[0] or depth[0] or s in self._depth.get(sl.name, {}):
            return f(self, s, sl)
        depth[0] += 1
        au = self._a
        n0 = len(au.configs)
        t0 = clock()
        try:
            r = f(self, s, sl)
        finally:
            depth[0] -= 1
        t1 = clock()
        lay = closed_layout_size(au.nfa)
        cf = au.configs[s]
        inside = bool(lay) and all(n < lay for n, _ in cf)
        rec.append([sl.name, min(r, 99), t1 - t0, inside, len(cf), len(au.configs) - n0, 0])
        return r
    return w
wrap("slices", "SliceBounds.slice_depth", make)
def one(d):
    out = []
    rec.clear()
    off[0] = True
    try:
        g = GrammarCompiler(info, cache_size=0).compile_json_schema(d["schema"]); g.matcher().fill_bitmask(bm)
    except CompileError:
        return out
    off[0] = False
    for t in d["tests"]:
        ids = tok.encode(schemas.instance_text(t["data"], d["schema"]), add_special_tokens=False).ids
        m = g.matcher()
        for i in ids + [info.eos_token_id]:
            k0 = len(rec)
            t0 = clock()
            m.fill_bitmask(bm)
            ok = m.accept_token(i)
            t1 = clock()
            for r in rec[k0:]:
                r[6] = t1 - t0
            if not ok:
                break
    return list(rec)
allrec = []
for name in _sample.names(a):
    d = json.load(open(os.path.join(a.data, name)))
    r = in_child(lambda: one(d)) if a.fork else one(d)
    allrec += r or []
by = collections.defaultdict(lambda: [0, 0, 0, 0])
for name, r, ns, inside, ncf, new, step in allrec:
    k = (name, "max" if r >= 30 else "mid" if r else "zero", inside)
    x = by[k]; x[0] += 1; x[1] += ns; x[2] += step > 200e3; x[3] += new
print("searches", len(allrec), "ms", sum(r[2] for r in allrec) / 1e6, "in steps over 200 µs:", sum(r[6] > 200e3 for r in allrec))
for k, (n, ns, slow, new) in sorted(by.items(), key=lambda kv: -kv[1][1])[:25]:
    print(f"{k[0]:22s} {k[1]:5s} inside-layout={k[2]!s:5s} n={n:5d} mean {ns/n/1e3:7.1f} µs, total {ns/1e6:7.1f} ms, in slow steps {slow:5d}, new states {new/n:5.1f}")
