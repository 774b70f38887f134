"""The kernel walks of states that lead back to themselves (walk_roots_core's loops_over),
this tree against another, each in its own process.

    .venv/bin/python bench/constrain_loop_walks.py [--a DIR_OF_AN_OLD_furca/constrain]

Per regex (Llama-3.1): compile, then the first mask and the masks after each token of a
short text, with every Core.walk_roots call timed twice: its first run (rows made as it
goes) and the same walk again on copies of its buffers, five times, the fastest (rows
made: the trie walk alone). Prints per regex the walks' (first, again) µs and how many
trie nodes they were allowed to visit. --a DIR: also the same with DIR (a
git archive's furca/constrain) in place of this tree's, in a second process, one run
after the other (the VM's speed drifts: compare runs made close together).

--bare: instead, a bare trie walk (a one-state DFA over a byte set: no rows, no counters,
no canonical forms), as a loop with a branch and branch-free, fastest of five: what a
visited node costs at the least (session 39: ~6 ns, as the state at each node is a load
that depends on its parent's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = [
    ("letters", r"[A-Za-z]+", "Hello"),
    ("letters{1,50}", r"[A-Za-z]{1,50}", "Hello"),
    ("ident{3,40}", r"[a-z0-9_]{3,40}", "john_smith42"),
    ("string{0,40}", r'"[^"\\]{0,40}"', '"The quick brown fox'),
    ("nonspace{1,300}", r"[!-~]{1,300}", "a+b=c;d/e?f"),
    ("uri chars", r"[^ <>\[\]\\^`{|}]+", "http"),
]


def child(constrain_dir):
    if constrain_dir:  # the other tree's furca.constrain under this tree's furca
        import furca

        furca.__path__.insert(0, os.path.dirname(os.path.abspath(constrain_dir)))
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import numpy as np
    from constrain.tokenizers_cache import tokenizer_json
    from tokenizers import Tokenizer

    from furca.constrain import GrammarCompiler, TokenizerInfo, core_rows

    path, eos = tokenizer_json("llama3_1")
    info = TokenizerInfo.from_tokenizer_json(path, eos_token=eos)
    tok = Tokenizer.from_file(str(path))
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    GrammarCompiler(info).compile_regex("[a-z]{1,3}").matcher().fill_bitmask(bm)  # the kernels loaded
    clock = time.perf_counter_ns
    orig = core_rows.Core.walk_roots
    log = []

    def timed(self, a, j, i, roots, cont, stack, trie, words, rec, keep):
        kept = stack.copy(), words.copy(), rec.copy()
        t0 = clock()
        res = orig(self, a, j, i, roots, cont, stack, trie, words, rec, keep)
        first = clock() - t0
        again = []
        for _ in range(5):
            s2, w2, r2 = (x.copy() for x in kept)
            t0 = clock()
            orig(self, a, j, i, roots, cont, s2, trie, w2, r2, keep)
            again.append(clock() - t0)
        log.append((first / 1e3, min(again) / 1e3, int(np.count_nonzero(keep))))
        return res

    core_rows.Core.walk_roots = timed
    out = {}
    for name, rx, text in CASES:
        log.clear()
        m = GrammarCompiler(info, cache_size=0).compile_regex(rx).matcher()
        m.fill_bitmask(bm)
        for t in tok.encode(text, add_special_tokens=False).ids:
            m.accept_token(t)
            m.fill_bitmask(bm)
        out[name] = list(log)
    print(json.dumps(out))


def bare():
    import numpy as np
    from numba import njit

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from constrain.tokenizers_cache import tokenizer_json

    from furca.constrain import TokenizerInfo

    path, eos = tokenizer_json("llama3_1")
    info = TokenizerInfo.from_tokenizer_json(path, eos_token=eos)
    t = info.trie

    @njit(nogil=True)
    def branchy(trans, depth, byte, end, ts, tid, words):
        stack = np.zeros(depth.max() + 1, np.int32)
        stack[0] = 1
        one, i, visited = np.uint32(1), 1, 0
        while i < byte.shape[0]:
            visited += 1
            s = trans[stack[depth[i] - 1], byte[i]]
            if s == 0:
                i = end[i]
                continue
            stack[depth[i]] = s
            for k in range(ts[i], ts[i + 1]):
                words[tid[k] >> 5] |= one << np.uint32(tid[k] & 31)
            i += 1
        return visited

    @njit(nogil=True)
    def branch_free(trans, depth, byte, end, ts, tid, words):
        stack = np.zeros(depth.max() + 1, np.int32)
        stack[0] = 1
        one, i, visited = np.uint32(1), 1, 0
        while i < byte.shape[0]:
            visited += 1
            d = depth[i]
            s = trans[stack[d - 1], byte[i]]
            stack[d] = s
            alive = s != 0
            for k in range(ts[i], ts[i + 1] if alive else ts[i]):
                words[tid[k] >> 5] |= one << np.uint32(tid[k] & 31)
            i = i + 1 if alive else end[i]
        return visited

    sets = [("letters", [b for b in range(128) if chr(b).isalpha()]),
            ("uri chars", [b for b in range(32, 127) if chr(b) not in " <>[]\\^`{|}"]),
            ("json string", [b for b in range(32, 256) if b not in (34, 92)])]
    args = (t.dfs_depth, t.dfs_byte, t.dfs_end, t.tok_start, t.tok_ids)
    print("bare walks: µs (nodes visited, ns a node)")
    for name, bs in sets:
        trans = np.zeros((2, 256), np.int32)
        trans[1, bs] = 1
        for f in (branchy, branch_free):
            words = np.zeros(info.num_words, np.uint32)
            best, n = 1e18, f(trans, *args, words)
            for _ in range(5):
                words[:] = 0
                t0 = time.perf_counter_ns()
                f(trans, *args, words)
                best = min(best, time.perf_counter_ns() - t0)
            print(f"  {name:12s} {f.__name__:12s} {best / 1e3:7.0f} ({n}, {best / n:.1f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", help="another tree's furca/constrain directory, run first")
    ap.add_argument("--bare", action="store_true", help="a bare trie walk's cost a node instead")
    ap.add_argument("--child", nargs="?", const="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.bare:
        return bare()
    if a.child is not None:
        return child(a.child)
    runs = [("A", a.a)] if a.a else []
    runs.append(("B" if a.a else "this tree", ""))
    res = {}
    for label, d in runs:
        p = subprocess.run([sys.executable, __file__, "--child", d], capture_output=True, text=True)
        if p.returncode:
            sys.exit(f"{label}: {p.stderr}")
        res[label] = json.loads(p.stdout.strip().splitlines()[-1])
    print("kernel walks per regex: (first, again) µs [trie nodes kept]")
    for name, *_ in CASES:
        for label in res:
            walks = ", ".join(f"({x[0]:.0f}, {x[1]:.0f}) [{x[2]}]" for x in res[label][name])
            print(f"  {name:16s} {label:9s} {walks}")


if __name__ == "__main__":
    main()
