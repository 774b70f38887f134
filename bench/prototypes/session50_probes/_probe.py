"""What session 50's probes share: the harness's sample, each schema compiled with its first
mask filled (not counted), and each test instance's token ids with EOS."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # bench/

import numpy as np  # noqa: E402

import _sample  # noqa: E402


def setup(add=None):
    """(the parsed arguments, TokenizerInfo, the tokenizer, a one-row bitmask); add(parser)
    adds a probe's own arguments."""
    ap = argparse.ArgumentParser()
    _sample.add_args(ap, 500)
    if add is not None:
        add(ap)
    a = ap.parse_args()
    _sample.paths()
    info, tok = _sample.llama3()
    return a, info, tok, np.zeros((1, info.num_words), dtype=np.int32)


def grammars(a, info, bm):
    """(schema file, its JSON, its compiled grammar) for each schema of the sample furca
    compiles, the first mask filled."""
    from furca.constrain import GrammarCompiler
    from furca.errors import CompileError

    for name in _sample.names(a):
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            d = json.load(f)
        try:
            g = GrammarCompiler(info, cache_size=0).compile_json_schema(d["schema"])
            g.matcher().fill_bitmask(bm)
        except CompileError:
            continue
        yield name, d, g


def instances(d, info, tok):
    """Each test instance of d as token ids, EOS last, as the harness walks them."""
    import schemas

    for t in d["tests"]:
        yield tok.encode(schemas.instance_text(t["data"], d["schema"]), add_special_tokens=False).ids + [
            info.eos_token_id]


def steps(g, d, info, tok, bm, slow_ns=200e3):
    """Every step of d's instances on grammar g, as the harness walks them: (thread CPU ns of
    the fill and accept, the new states' ids, the states given a row in it where the step
    took over slow_ns, else [], the matcher's state before the step)."""
    au = g.automaton
    for ids in instances(d, info, tok):
        m = g.matcher()
        for i in ids:
            n0 = len(au.configs)
            ex0 = au.expanded[:n0].copy()
            at = m._t[0]
            t0 = time.thread_time_ns()
            m.fill_bitmask(bm)
            ok = m.accept_token(i)
            ns = time.thread_time_ns() - t0
            n1 = len(au.configs)
            rows = [x for x in range(n1) if au.expanded[x] and (x >= n0 or not ex0[x])] if ns > slow_ns else []
            yield ns, range(n0, n1), rows, at
            if not ok:
                break
