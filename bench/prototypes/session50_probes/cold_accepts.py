"""Where a cold accept's time goes (session 50).

    .venv/bin/python bench/prototypes/session50_probes/cold_accepts.py [--sample 500]

One process, every instance token by token; cProfile runs only inside
matcher.Matcher._accept_cold (an accept not in the matcher's cache). Session 50 (bc57064):
53,338 cold accepts of 146,322 steps, 850 ms with the profiler on; by own time
_core_kernels.step_bytes 101 ms (20,399 calls), _accept_cold 91, automaton.step 86,
core_rows.Core._leave 85 (33,546 calls), automaton._bytes 82, Core.step_bytes 76 ms.
`constrain_tail.py --fork --what-if accept` bounds the accept at -17% of the forked steps
over 200 µs."""
import cProfile
import pstats
import time

from _probe import grammars, setup, steps

a, info, tok, bm = setup()
from _wrap import wrap  # noqa: E402
pr = cProfile.Profile()
off = [True]
tt = [0, 0]
def make(f):
    def w(self, t):
        if off[0]:
            return f(self, t)
        t0 = time.thread_time_ns()
        pr.enable()
        try:
            return f(self, t)
        finally:
            pr.disable()
            tt[0] += time.thread_time_ns() - t0; tt[1] += 1
    return w
wrap("matcher", "Matcher._accept_cold", make)
for name, d, g in grammars(a, info, bm):  # off while each compiles
    off[0] = False
    for _step in steps(g, d, info, tok, bm):
        pass
    off[0] = True
print("cold accepts", tt[1], "ms", tt[0] / 1e6)
pstats.Stats(pr).sort_stats("tottime").print_stats(25)
