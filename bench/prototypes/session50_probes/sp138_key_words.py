"""The key kernel's calls on one schema (default Snowplow sp_138), the slow ones in detail
(session 50).

    .venv/bin/python bench/prototypes/session50_probes/sp138_key_words.py [FILE]

One process, every instance token by token, as the harness walks them (`_probe.steps`). Times each core_keys.KeyCalls.key_words
call (wall) with its roots, closers (and the tokens below them), other configurations and
new states; for the slow ones (over 150 µs) the rows it made (their states' configurations)
and the same call again with those rows made. Session 50 (c02f175) on sp_138: 530 calls
after the first (which loads the kernel), p50 11 µs; ~30 over 150 µs (181-184 µs, 4.9 rows,
14.9 new states), 12-48 µs again: the time is the rows, among them states of ~100 configurations
(a nested object's first keys)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # bench/
import json  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import _sample  # noqa: E402
from _probe import steps  # noqa: E402
from _wrap import wrap  # noqa: E402

SLOW_NS = 150_000
_sample.paths()
import furca.constrain as fc  # noqa: E402

info, hf = _sample.llama3()
name = sys.argv[1] if len(sys.argv) > 1 else "Snowplow---sp_138_Normalized.json"
with open(os.path.join(_sample.ROOT, "..", "shared", "data", "maskbench-dev", name), encoding="utf-8") as f:
    d = json.load(f)
calls = []  # (ns, roots, closers, tokens below the closers, other configurations, rows, new stacks, new states)
again = []  # the slow calls: (ns, ns of the same call with its rows made)
shown = [0]


def make(f):
    def w(self, a, words, roots, closers, rest, trie):
        states0, stacks0 = int(self.cnt[2]), int(self.cnt[0])
        words0 = words.copy()
        t0 = time.perf_counter_ns()
        r = f(self, a, words, roots, closers, rest, trie)
        ns = time.perf_counter_ns() - t0
        rows = int(self.cnt[5])  # read before the rerun below resets it
        below = sum(int(trie.tok_start[trie.dfs_end[x]] - trie.tok_start[x]) for x in closers)
        calls.append((ns, len(roots), len(closers), below, len(rest), rows, int(self.cnt[0]) - stacks0,
                      int(self.cnt[2]) - states0))
        if ns > SLOW_NS:
            if shown[0] < 2 and ns < 1e7:  # the rows of the first slow calls (not the kernel's load)
                shown[0] += 1
                for ps in self.made[:rows].tolist():
                    cf = a.configs[ps]
                    print(f"  slow call's row: state {ps}, {len(cf)} configurations, nodes {[n for n, _ in cf][:12]}")
            t1 = time.perf_counter_ns()
            f(self, a, words0.copy(), roots, closers, rest, trie)
            again.append((ns, time.perf_counter_ns() - t1))
        return r
    return w


wrap("core_keys", "KeyCalls.key_words", make)
g = fc.GrammarCompiler(info).compile_json_schema(d["schema"])
bm = np.zeros((1, info.num_words), dtype=np.int32)
for _step in steps(g, d, info, hf, bm):
    pass
c = np.array(calls[1:], dtype=float)  # the first call loads the kernel (~20 ms)
print(f"calls {len(c)} after the first, p50 {np.median(c[:, 0]) / 1e3:.1f} µs")
for label, sel in (("slow", c[:, 0] > SLOW_NS), ("faster, with new states", (c[:, 0] <= SLOW_NS) & (c[:, 7] > 0))):
    x = c[sel]
    if len(x):
        print(f"{label}: {len(x)} calls, {x[:, 0].mean() / 1e3:.0f} µs, roots {x[:, 1].mean():.1f}, closers "
              f"{x[:, 2].mean():.1f} ({x[:, 3].mean():.0f} tokens below), other configurations {x[:, 4].mean():.1f}, "
              f"rows {x[:, 5].mean():.2f}, new stacks {x[:, 6].mean():.2f}, new states {x[:, 7].mean():.2f}")
for ns, ns2 in [x for x in again if x[0] < 1e7][:10]:  # not the kernel's load
    print(f"  slow call {ns / 1e3:.0f} µs, again with its rows made {ns2 / 1e3:.0f} µs")
