"""The new states of the slow steps that lie under a call frame, and whether their abstract
states existed before them (session 50: the ceiling of a walk that would take such a state
through its abstract state, as a mask does at a walk's root).

    .venv/bin/python bench/prototypes/session50_probes/call_states.py [--sample 500]

One process, every instance token by token (thread CPU time); after each schema, each new
state of a step over 200 µs is classed by automaton._base: no base frame, already abstract
(its base is the context frame), or under a call frame, and then whether its abstract state
(interned here, after the walk) is older than it, was made later by the steps, or new.
The rows made in the slow steps are classed the same way: how many are of states under a
call frame, and how many distinct abstract states without a row those come to.
Session 50 (bc57064), first run: 890 slow steps, 21,227 new states; 7,201 already abstract,
305 without a base frame, 13,721 under a call frame: 2,989 with an older abstract state, 507
with one the steps made later, 10,225 with one never made, which are 4,917 distinct abstract
states. Second run, with the rows (823 slow steps): 20,138 new states, 12,892 under a call
frame (4,653 distinct new abstract states); 7,904 rows, 4,349 of states under a call frame,
whose abstract states without a row are 2,473. At ~3.6 µs a row and ~1.3 µs a state (session
49's fit), taking them through their abstract states would save ~21 µs of a slow step,
before the continuation walks it adds. Third run, with the states the matcher sat on (their
rows needed anyway, as literal_below's were): 850 slow steps, 8,077 rows, 4,441 of states
under a call frame, of which the matcher sat on 387 (9%); their abstract states without a
row 2,514. The same split at a walk's root for narrow states
(masks.py's context for every state) measured worse: steps over 200 µs 1.134, sum 1.142
(constrain_ab, one process)."""
import collections

from _probe import grammars, setup, steps

a, info, tok, bm = setup()
from furca.constrain.stacks import CUT_RET  # noqa: E402
C = collections.Counter()
for name, d, g in grammars(a, info, bm):
    au = g.automaton
    slow_new = []
    slow_rows = []  # the states given a row in the slow steps
    visited = set()  # the states the matcher sat on
    for ns, new, rows, at in steps(g, d, info, tok, bm):
        visited.add(at)
        C["new states"] += len(new)
        if ns > 200e3:
            C["slow steps"] += 1
            slow_new.append(new)
            slow_rows.extend(rows)
    # classify states made in slow steps
    fr = au.stacks.frames
    n_before = len(au.configs)
    seen_ab = set()
    for rng in slow_new:
        for s in rng:
            C["slow: new states"] += 1
            base = au._base(au.configs[s])
            if not base:
                C["slow: no base frame"] += 1
                continue
            if fr[base][0] == CUT_RET:
                C["slow: abstract already (cut)"] += 1
                continue
            C["slow: under a call frame"] += 1
            ab = au.intern(au.stacks.rebased(au.configs[s], base, au.cut), False)
            if ab < s:
                C["slow: under a call, its abstract state existed before"] += 1
            elif ab >= n_before:
                C["slow: under a call, abstract state never made"] += 1
                if ab not in seen_ab:
                    seen_ab.add(ab)
                    C["slow: under a call, distinct new abstract states"] += 1
            else:
                C["slow: under a call, abstract made after it (by the steps)"] += 1
    rows_ab = set()
    for x in slow_rows:
        C["slow: rows"] += 1
        base = au._base(au.configs[x])
        if base and fr[base][0] != CUT_RET:
            C["slow: rows of states under a call frame"] += 1
            C["slow: ... of them states the matcher sat on (row needed anyway)"] += x in visited
            ab = au.intern(au.stacks.rebased(au.configs[x], base, au.cut), False)
            if not au.expanded[ab] and ab not in rows_ab:
                rows_ab.add(ab)
                C["slow: ... their distinct abstract states without a row"] += 1
for k, v in C.items():
    print(f"{k:55s} {v:8d}")
