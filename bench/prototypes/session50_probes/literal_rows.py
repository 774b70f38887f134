"""The rows of states of literals made in the slow steps (session 50, the bound behind
bench/prototypes/literal_below).

    .venv/bin/python bench/prototypes/session50_probes/literal_rows.py [--sample 500]

One process, every instance of the harness's sample token by token (thread CPU time). For
each step over 200 µs: the new states, the rows made in it, and those of states of literals
(4 or more configurations, all but one on one-byte nodes: the declared names after `,"`),
with their configurations. Session 50 (bc57064): 817 slow steps, 19,929 new states, 7,745
rows; 334 steps made 809 rows of states of literals (24,447 configurations; by tens of
configurations 0: 361, 10: 77, 20: 68, 30: 48, 40: 14, 50: 51, 60: 90, 70: 38, 80: 21,
90: 34, 100+: 7)."""
import collections

from _probe import grammars, setup, steps

a, info, tok, bm = setup()
C = collections.Counter()
hist = collections.Counter()
def one_byte(nfa, n):
    es = nfa.edges[n]
    return len(es) == 1 and es[0][0] == es[0][1] and n not in nfa.tick
for name, d, g in grammars(a, info, bm):
    au = g.automaton; nfa = au.nfa
    for ns, new, rows, _at in steps(g, d, info, tok, bm):
        if ns <= 200e3:
            continue
        C["slow steps"] += 1
        C["slow: new states"] += len(new)
        C["slow: rows"] += len(rows)
        anylit = False
        for s in rows:
            cf = au.configs[s]
            k = sum(one_byte(nfa, n) for n, _ in cf)
            if len(cf) >= 4 and k >= len(cf) - 1:
                C["slow: rows of literal states"] += 1
                C["slow: their configs"] += len(cf)
                hist[min(len(cf) // 10 * 10, 100)] += 1
                anylit = True
        C["slow steps with a literal row"] += anylit
for k, v in C.items():
    print(f"{k:40s} {v:8d}")
print("literal rows by configs (tens):", sorted(hist.items()))
