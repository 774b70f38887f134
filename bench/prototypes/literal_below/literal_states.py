"""With bench/prototypes/literal_below's patch applied: how many states the walks took down
their literals' bytes (Core.lit), and how many of them got a row later anyway.

    .venv/bin/python bench/prototypes/literal_below/literal_states.py [--sample 500]

Session 50 (the patch at LITERAL_MIN 4, LITERAL_VISITS 1): 3,488 states walked, 1,859 of them
given a row later; their configurations p50 8, p90 35, max 411."""
import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "session50_probes"))
import numpy as np  # noqa: E402

from _probe import grammars, instances, setup  # noqa: E402

a, info, tok, bm = setup()
C = collections.Counter()
ms = []
for name, d, g in grammars(a, info, bm):
    for ids in instances(d, info, tok):
        m = g.matcher()
        for i in ids:
            m.fill_bitmask(bm)
            if not m.accept_token(i): break
    au = g.automaton
    core = au.core
    if core is None: continue
    n = min(len(core.lit), len(au.configs))
    lit = core.lit[:n] > 0
    C["literal-walked states"] += int(lit.sum())
    C["... later given a row"] += int((lit & au.walkable[:n]).sum())
    for s in np.flatnonzero(lit):
        ms.append(int(core.sinfo[s, 1]))
print(dict(C))
ms = np.array(ms); print("configs p50/p90/max", np.median(ms), np.percentile(ms, 90), ms.max())
