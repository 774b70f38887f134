import os
import pickle, sys
import numpy as np
steps, reps = pickle.load(open(os.environ.get("OUT", "/tmp/compiled_rows.pkl"), "rb"))
kinds = ["single push", "single other", "multi push", "multi other"]
def table(sel, title):
    tot = sum(s[1] for s in sel)
    print(f"{title}: {len(sel)} steps, {tot / 1e6:.0f} ms")
    for k in kinds:
        ns = sum(x[2] for s in sel for x in s[2] if x[0] == k); c = sum(1 for s in sel for x in s[2] if x[0] == k)
        new = sum(x[3] for s in sel for x in s[2] if x[0] == k)
        print(f"  {k:13s} {c:7d} exp {ns / 1e6:8.1f} ms {100 * ns / tot:5.1f}%  {ns / max(c, 1) / 1e3:6.1f} us each, {new / max(c, 1):.2f} new each")
    for p in ["resume", "numba", "slice", "bytestep", "context"]:
        ns = sum(s[3].get(p, (0, 0))[0] for s in sel); c = sum(s[3].get(p, (0, 0))[1] for s in sel)
        print(f"  part {p:9s} {c:7d} calls {ns / 1e6:8.1f} ms {100 * ns / tot:5.1f}%  {ns / max(c, 1) / 1e3:6.1f} us each")
table(steps, "all steps")
table([s for s in steps if s[1] > 200e3], "steps > 200 us")
table([s for s in steps if s[1] > 1000e3], "steps > 1 ms")
agg = dict(pys=0, pym=0, ks=0, km=0, ns=0, nm=0, new=0, sync=0, mism=0, fb=0, k1=0)
per = {}
for name, res in reps.items():
    if not res or not res[0]["n"]: continue
    x = res[0]
    b = {k: min(r[k] for r in res) for k in ("pys", "pym", "ks", "km", "k1")}
    for k in b: agg[k] += b[k]
    agg["ns"] += x["nsingle"]; agg["nm"] += x["n"] - x["nsingle"]; agg["new"] += x["newk"]; agg["sync"] += x["sync"]
    agg["mism"] += x["mism"]; agg["fb"] += x["fb"]
    per[name] = ((b["ks"] + b["km"]) / x["n"], x["sync"] / max(1, x["newk"]))
a = agg
print(f"replay: {a['ns']} single + {a['nm']} multi push-only states, {len(per)} schemas. single: python {a['pys']/a['ns']/1e3:.2f} us, kernel {a['ks']/a['ns']/1e3:.2f} us ({a['pys']/a['ks']:.1f}x); "
      f"multi: python {a['pym']/a['nm']/1e3:.2f} us, kernel {a['km']/a['nm']/1e3:.2f} us ({a['pym']/a['km']:.1f}x); one call per state {a['k1']/(a['ns']+a['nm'])/1e3:.2f} us; "
      f"{a['new']} new states, tuple sync {a['sync']/max(a['new'],1)/1e3:.2f} us/new; fallbacks {a['fb']}; mismatching rows {a['mism']}")
base = np.array([s[1] for s in steps])
def project(cover, cost, ret_ns=0):
    out = []
    for name, dt, l, parts in steps:
        d = dt
        for kind, _s, ns, nw in l:
            if kind in cover:
                d -= ns - min(cost(name, nw), ns) + ret_ns
        out.append(max(d, 0))
    return np.array(out)
kc = lambda name, nw: per.get(name, (3000, 2400))[0] + per.get(name, (3000, 2400))[1] * nw
def show(lbl, arr):
    print(f"  {lbl:62s} p50 {np.percentile(arr,50)/1e3:6.1f} p90 {np.percentile(arr,90)/1e3:7.1f} p99 {np.percentile(arr,99)/1e3:7.1f} sum {arr.sum()/1e9:.2f} s >200us {(arr>200e3).sum()}")
print("per-token step, us (instrumented, thread CPU):")
show("measured", base)
show("single push in kernel (kernel + eager tuple sync)", project({"single push"}, kc))
show("single+multi push in kernel", project({"single push", "multi push"}, kc))
show("single+multi push, + no walk return (-5 us each)", project({"single push", "multi push"}, kc, 5000))
show("all kinds at kernel cost, no walk return", project(set(kinds), kc, 5000))
show("all expansions free (floor of rows alone)", project(set(kinds), lambda *a: 0))
# what remains in steps > 200us after the floor
def proj2(drop_byte, drop_slice, drop_numba=0.0):
    out = []
    for name, dt, l, parts in steps:
        e = sum(x[2] for x in l)
        d = dt - e
        if drop_byte: d -= parts.get("bytestep", (0, 0))[0]
        if drop_slice: d -= max(0, parts.get("slice", (0, 0))[0] - e)
        d -= drop_numba * parts.get("numba", (0, 0))[0]
        out.append(max(d, 0))
    return np.array(out)
show("rows free + byte steps free", proj2(1, 0))
show("rows + byte steps + slice search free (lower bound)", proj2(1, 1))
show("... + numba walks 2x faster", proj2(1, 1, 0.5))
r = proj2(1, 1)
sel = [s for s, v in zip(steps, r) if v > 200e3]
print("steps still > 200us after rows/bytesteps/slice free:", len(sel), "numba share of their remaining time:",
      round(sum(s[3].get('numba', (0, 0))[0] for s in sel) / sum(v for v in r if v > 200e3), 2),
      "numba calls each", round(np.mean([s[3].get('numba', (0, 0))[1] for s in sel]), 1))
