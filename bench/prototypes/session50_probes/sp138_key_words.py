"""The key kernel's calls on one schema (default Snowplow sp_138), the slow ones in detail
(session 50).

    .venv/bin/python bench/prototypes/session50_probes/sp138_key_words.py [FILE]

One process, every valid instance token by token. Times each core_keys.KeyCalls.key_words
call (wall) with its roots, closers (and the tokens below them), other configurations and
new states; for the slow ones (over 150 µs) the rows it made (their states' configurations)
and the same call again with those rows made. Session 50 (bc57064) on sp_138: 531 calls,
p50 12 µs; 30 over 150 µs (~200 µs, 4.8 rows, 14.4 new states), 10-13 µs again: the time is
the rows, two of states of ~100 configurations (a nested object's first keys) each."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # bench/
import json, time, collections
import numpy as np
import _sample
from _wrap import wrap
_sample.paths()
import furca.constrain as fc
info, hf = _sample.llama3()
name = sys.argv[1] if len(sys.argv) > 1 else "Snowplow---sp_138_Normalized.json"
d = json.load(open(os.path.join("../shared/data/maskbench-dev", name)))
rec = []
AGAIN = []
ROWS = []
SHOW = []
def make(f):
    def w(self, a, words, roots, closers, rest, trie):
        made0 = int(self.cnt[2]); st0 = int(self.cnt[0])
        w0 = words.copy()
        t0 = time.perf_counter_ns()
        r = f(self, a, words, roots, closers, rest, trie)
        t1 = time.perf_counter_ns()
        first = (t1 - t0, int(self.cnt[5]), int(self.cnt[0]) - st0, int(self.cnt[2]) - made0)  # before any rerun
        if t1 - t0 > 150000 and len(AGAIN) in (3, 4):
            nmade = int(self.cnt[5])
            for ps in self.made[:nmade].tolist():
                cf = a.configs[ps]
                print("   row of state", ps, "configs", len(cf), "nodes", [n for n, _ in cf][:12], "depths", [a.stacks.depth[st] for _, st in cf][:12])
            print("   new states", [(sid, len(a.configs[sid])) for sid in range(made0, int(self.cnt[2]))])
        if t1 - t0 > 150000:
            w1 = w0.copy()
            t2 = time.perf_counter_ns()
            f(self, a, w1, roots, closers, rest, trie)
            t3 = time.perf_counter_ns()
            AGAIN.append((t1 - t0, t3 - t2, int(np.count_nonzero(w0)), int(sum(bin(x).count("1") for x in w1.tolist()))))
        ncl = sum(int(trie.tok_start[trie.dfs_end[x]] - trie.tok_start[x]) for x in closers)
        rec.append((t1 - t0, len(roots), len(closers), ncl, len(rest), first[3]))
        ROWS.append(first)
        if t1 - t0 > 150000 and len(rest) <= 2 and len(SHOW) < 6:
            fr = a.stacks.frames
            def chain(st):
                out = []
                while st:
                    out.append(fr[st][0] if not fr[st][2] else (fr[st][0], fr[st][2])); st = fr[st][1]
                return out
            SHOW.append([(int(k >> 32), chain(int(k & 0xFFFFFFFF))) for k in rest])
            print("slow", (t1-t0)//1000, "rest", SHOW[-1], "closers", list(closers), "roots", list(roots))
        return r
    return w
wrap("core_keys", "KeyCalls.key_words", make)
g = fc.GrammarCompiler(info).compile_json_schema(d["schema"])
bm = np.zeros((1, info.num_words), dtype=np.int32)
for ids in _sample.valid_ids(d, hf):
    m = g.matcher()
    for t in ids:
        m.fill_bitmask(bm)
        if not m.accept_token(t): break
r = np.array(rec)
print("calls", len(r), "mean us", r[:,0].mean()/1e3, "p50", np.median(r[:,0])/1e3)
print("roots mean", r[:,1].mean(), "closers mean", r[:,2].mean(), "closer tokens mean", r[:,3].mean(), "rest mean", r[:,4].mean(), "new states mean", r[:,5].mean())
for x in r[np.argsort(-r[:,0])][:10]:
    print("  us %.0f roots %d closers %d closer-tokens %d rest %d new states %d" % (x[0]/1e3, x[1], x[2], x[3], x[4], x[5]))
nfa = g.automaton.nfa
def rule_of(n):
    best = None
    for nm, (lo, hi) in nfa.spans.items():
        if lo <= n < hi and (best is None or hi - lo < best[2] - best[1]):
            best = (nm, lo, hi)
    return best
for n in (5460, 5417, 5431, 5364, 5328, 5412, 5486, 5443, 5775):
    print(n, "edges", [(chr(lo) if 32<=lo<127 else lo, chr(hi) if 32<=hi<127 else hi, t) for lo, hi, t in nfa.edges[n]][:6], "rule", rule_of(n))

R = np.array(ROWS)
sl = R[R[:,0] > 150000]
print("slow calls", len(sl), "rows made mean", sl[:,1].mean(), "new stacks mean", sl[:,2].mean(), "new states", sl[:,3].mean())
fa = R[(R[:,0] < 150000) & (R[:,3] > 0)]
print("fast calls with new states", len(fa), "us", fa[:,0].mean()/1e3, "rows", fa[:,1].mean(), "stacks", fa[:,2].mean(), "states", fa[:,3].mean())

for x in AGAIN[:12]:
    print("first %.0f again %.0f us, nonzero words in %d, tokens out %d" % (x[0]/1e3, x[1]/1e3, x[2], x[3]))
