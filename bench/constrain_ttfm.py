"""Where the time to first mask goes: furca and llguidance, warm process and forked child.

    .bench-venv/bin/python bench/constrain_ttfm.py [--sample 500] [--engines furca,llguidance]
        [--phases [--tier 40,60]] [--given ir|nfa] [--touch code,all]

The shared harness (bench/grammar_compare.sh) forks one process per schema from a
parent that has loaded the engine, warmed it on one schema and frozen the GC; TTFM
there is compile + first mask in that fresh child. A server compiles in its own
long-lived process instead. This runs, per schema and engine, in A-B / B-A order:

- warm: compile + first mask in this process (every engine warm, each schema new to it),
  after all the forks (a write to a page shared with a child, even one that has exited,
  faults once: the first warm schemas absorb those);
- forked: the harness's way: a child forked from this process loads the schema,
  tokenizes its test instances and allocates its bitmask (all before the harness's
  clock, as run.py does: the first numpy call and the first large mallocs of a child
  cost ~80 faults, which the harness does not charge to TTFM), then compile + first
  mask, with the child's minor page faults (copy-on-write of the parent's pages and
  first touches of new ones);
- forked after one compile: the same child first compiles and masks another small
  schema (untimed), then the timed one: what a forked process pays once.

--touch code,all adds, as a diagnostic, the forked mode with the child's copy-on-write
faults of furca's code objects and functions (code) or of every page it shares (all)
paid before its clock: which of the parent's pages the first compile's faults copy
(session 39: furca's code objects and functions ~57% of them).

--given ir|nfa adds, as a diagnostic, the forked mode where furca's compile takes the
schema's IR (translate done) or NFA (translate, prepare and build_nfa done) made in the
parent before the forks: the TTFM of the rest, the bound of a front end that took no time
(session 48: the NFA given, the p50 3.34 against 5.07 ms forked; the child still writes
the pages of the parent's NFA it reads, ~110 faults in the pack).

--phases adds furca's TTFM by phase in each mode, mean ms and page faults a schema (each
phase a function of the compile wrapped: translate, prepare, build_nfa, the automaton,
the compiled grammar, the first mask with the row kernel's pack and Core made inside
it, the key tries' "any key" words made after it: KeyTrieMasks.prepare). Session 43, 100
children (`--sample 100 --engines furca --phases`; see bench/results/constrain.md): a
forked child's compile pays in every phase, 1.6-14x its warm time, and most of the difference is pages: the new objects and arrays of each phase
land on the parent's partly used pools and free heap chunks, a copy-on-write fault for
each page they touch (core_rows.pack: 51 such pages a child, `constrain_cow_pages.py
--window compile --around core_rows.pack`).

Prints per engine and mode the TTFM p50 / p90 / p99 and the faults' p50 and mean; the
compiled schemas are the harness's stratified sample (its `schemas` module), Llama-3.1.
Wall clock (perf_counter), as the harness times. --tier LO,HI takes the phase table over
the schemas whose TTFM in each mode lies between those percentiles (40,60: what the p50
is made of; the mean over all is the large schemas' more than the median's).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(ROOT, "..", "shared", "bench", "grammar")
OTHER = {"type": "object", "properties": {"zq": {"type": "string", "maxLength": 7},
                                          "zr": {"type": "array", "items": {"type": "integer", "minimum": 3}},
                                          "zs": {"enum": ["a", 1]}}, "required": ["zq"]}
MODES = ("warm", "forked", "forked after one compile")
PHASES: dict = {}  # --phases: label -> [ns, faults] of furca's compile phases since the last clear
PHASE_FNS = (  # (label, module of furca.constrain, attribute path): the functions --phases times
    ("translate", "compiler", "schema_to_ir"),
    ("prepare", "compiler", "prepare"),
    ("build_nfa", "compiler", "build_nfa"),
    ("automaton", "compiler", "LazyAutomaton"),
    ("compiled grammar", "compiler", "CompiledGrammar"),
    ("first mask", "masks", "TokenMasks.mask"),
    ("  pack (in it)", "core_rows", "pack"),
    ("  Core (in it)", "core_rows", "Core"),
    ("key tries' words", "masks", "TokenMasks.prepare_keys"),
)


def _time_phases():
    """Wraps PHASE_FNS to add their wall time and page faults to PHASES (a nested call of
    the same function counts once)."""
    from _wrap import wrap

    for label, mod, attr in PHASE_FNS:

        def make(f, _label=label):
            def g(*args, **kw):
                acc = PHASES.setdefault(_label, [0, 0, False])
                if acc[2]:  # nested in itself
                    return f(*args, **kw)
                acc[2] = True
                f0, t0 = _faults(), time.perf_counter_ns()
                try:
                    return f(*args, **kw)
                finally:
                    acc[0] += time.perf_counter_ns() - t0
                    acc[1] += _faults() - f0
                    acc[2] = False

            return g

        wrap(mod, attr, make)


_NEXT: list = [None]  # --given: the front end the next furca compile takes (set just before its clock)


def _give(kind):
    """--given ir|nfa: furca's compile takes its front end from _NEXT where set (the
    schema's IR, or its NFA, made in this process before the forks) instead of making it:
    the TTFM if translate (ir), or translate, prepare and build_nfa (nfa), cost nothing,
    the bound of a front end compiled elsewhere. A diagnostic: the IR or NFA is the
    parent's, so the child still writes the pages of what it reads."""
    from furca.constrain import compiler

    to_ir, prep, build, rel = compiler.schema_to_ir, compiler.prepare, compiler.build_nfa, compiler.release

    class Given:
        __slots__ = ("nfa",)

    def schema_to_ir(schema, **kw):
        x = _NEXT[0]
        if x is None:
            return to_ir(schema, **kw)
        _NEXT[0] = None
        if kind == "ir":
            return x
        g = Given()
        g.nfa = x
        return g

    compiler.schema_to_ir = schema_to_ir
    compiler.prepare = lambda g: g if type(g) is Given else prep(g)
    compiler.build_nfa = lambda g: g.nfa if type(g) is Given else build(g)
    compiler.release = lambda x: None if type(x) is Given else rel(x)


def _front_end(kind, schema):
    """The IR (kind "ir") or the NFA of a schema, as furca's compile makes them; None where
    it refuses the schema (its compile then runs as it is)."""
    from furca.constrain import compiler
    from furca.errors import CompileError

    try:
        g = compiler.schema_to_ir(schema)
        return g if kind == "ir" else compiler.build_nfa(compiler.prepare(g))
    except CompileError:
        return None


def _faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _ttfm(engine, schema, bm):
    """(ms, ok) of compile + first mask."""
    t0 = time.perf_counter_ns()
    try:
        engine.fill(engine.new_matcher(engine.compile("json_schema", schema)), bm)
        ok = True
    except Exception:  # noqa: BLE001 - a compile error is timed as the engine spends it
        ok = False
    return (time.perf_counter_ns() - t0) / 1e6, ok


def _forked(engine, path, before, first=None, touch=None, given=None):
    """(ms, ok, faults) measured in a forked child that loads the schema itself and, as
    the harness's child does before its clock (run.py, run_schema), tokenizes the
    schema's test instances and allocates its bitmask: before(data) -> bitmask. touch
    (--touch): the child first writes the pages it shares with the parent of that kind
    (constrain_tail.touch_parent), a diagnostic of which copies the TTFM pays. given
    (--given): the front end furca's timed compile takes (_give)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(rfd)
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            schema = data["schema"]
            bm = before(data)
            if touch is not None:
                from constrain_tail import touch_parent

                touch_parent(touch)
            if first is not None:
                _ttfm(engine, first, bm)
            PHASES.clear()
            _NEXT[0] = given
            f0 = _faults()
            ms, ok = _ttfm(engine, schema, bm)
            os.write(wfd, json.dumps([ms, ok, _faults() - f0, dict(PHASES)]).encode())
        finally:
            os._exit(0)
    os.close(wfd)
    out = b""
    while True:
        b = os.read(rfd, 4096)
        if not b:
            break
        out += b
    os.close(rfd)
    os.waitpid(pid, 0)
    return json.loads(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=500)
    ap.add_argument("--engines", default="furca,llguidance")
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "maskbench-dev"))
    ap.add_argument("--parent-warm", type=int, default=0,
                    help="the parent also compiles + masks this many schemas from outside the sample before forking")
    ap.add_argument("--touch", default="",
                    help="KIND[,KIND]: also forked with the child's copy-on-write pages of each kind paid "
                         "before its clock (code: furca's functions and code objects; heap, anon, all: "
                         "constrain_tail.py --touch-parent); a diagnostic, not the harness's way")
    ap.add_argument("--phases", action="store_true", help="furca's TTFM by phase of its compile, each mode")
    ap.add_argument("--given", choices=("ir", "nfa"),
                    help="furca's compiles take the schema's IR (ir) or NFA (nfa) made before the forks: the "
                         "TTFM if its front end took no time (_give; a diagnostic)")
    ap.add_argument("--tier", default="0,100",
                    help="LO,HI: with --phases, only the schemas whose TTFM in that mode lies between those "
                         "percentiles of furca's (40,60: what the p50 is made of)")
    a = ap.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, HARNESS)
    sys.dont_write_bytecode = True
    import schemas
    import toks
    from engines import WARM_UP_SCHEMA, alloc_bitmask, make_engine

    from tokenizers import Tokenizer

    tok = toks.load("llama3")
    hf = Tokenizer.from_file(tok.path)

    def before(data):  # what the harness's child does before its clock
        for t in data.get("tests") or []:
            hf.encode(schemas.instance_text(t["data"], data["schema"]), add_special_tokens=False)
        return alloc_bitmask(tok.vocab_size)

    engines = []
    for name in a.engines.split(","):
        e = make_engine(name, furca_path=ROOT)
        e.setup(tok)
        bm = alloc_bitmask(tok.vocab_size)
        _ttfm(e, WARM_UP_SCHEMA, bm)  # the harness's warm-up
        engines.append((name, e, bm))
    names = schemas.stratified_sample(schemas.list_files(a.data), a.sample)
    given = {}
    if a.given:
        for n in names:
            with open(os.path.join(a.data, n), encoding="utf-8") as f:
                given[n] = _front_end(a.given, json.load(f)["schema"])
        _give(a.given)
    if a.phases:
        _time_phases()
    if a.parent_warm:
        inside = set(names)
        extra = [n for n in schemas.list_files(a.data) if n not in inside][:: 37][: a.parent_warm]
        for n in extra:
            with open(os.path.join(a.data, n), encoding="utf-8") as f:
                sch = json.load(f)["schema"]
            for _name, e, bm in engines:
                _ttfm(e, json.loads(json.dumps(sch)), bm)
    touches = [t for t in a.touch.split(",") if t]
    modes = MODES + tuple(f"forked, {t} pages paid first" for t in touches)
    given_modes = (f"forked, its {a.given} given",) if a.given else ()
    res = {(name, m): [] for name, _e, _b in engines for m in modes + (given_modes if name == "furca" else ())}
    gc.collect()
    gc.freeze()  # as the harness's parent does before forking
    for i, n in enumerate(names):
        path = os.path.join(a.data, n)
        order = engines if i % 2 == 0 else engines[::-1]
        for name, e, bm in order:
            res[(name, "forked")].append(_forked(e, path, before))
            res[(name, "forked after one compile")].append(_forked(e, path, before, first=OTHER))
            if a.given and name == "furca":
                res[(name, f"forked, its {a.given} given")].append(_forked(e, path, before, given=given[n]))
            for t in touches:
                res[(name, f"forked, {t} pages paid first")].append(_forked(e, path, before, touch=t))
    for i, n in enumerate(names):  # after all the forks: the warm compiles must not warm the children
        with open(os.path.join(a.data, n), encoding="utf-8") as f:
            schema = json.load(f)["schema"]
        for name, e, bm in (engines if i % 2 == 0 else engines[::-1]):
            PHASES.clear()
            f0 = _faults()
            ms, ok = _ttfm(e, schema if len(engines) == 1 else json.loads(json.dumps(schema)), bm)
            res[(name, "warm")].append([ms, ok, _faults() - f0, dict(PHASES)])
    print(f"{len(names)} schemas; TTFM of those that compiled (as the harness counts it)")
    print("| engine | mode | TTFM p50 | p90 | p99 ms | faults p50 | mean |")
    print("|:--|:--|--:|--:|--:|--:|--:|")
    for name, _e, _b in engines:
        for m in modes + (given_modes if name == "furca" else ()):
            rows = [r for r in res[(name, m)] if r[1]]
            ms = np.array([r[0] for r in rows])
            fl = np.array([r[2] for r in rows])
            p = np.percentile(ms, [50, 90, 99])
            faults = f"{np.median(fl):.0f} | {fl.mean():.0f}"
            print(f"| {name} | {m} | {p[0]:.2f} | {p[1]:.1f} | {p[2]:.1f} | {faults} |")
    if a.phases:
        phase_modes = [m for m in MODES + given_modes if ("furca", m) in res]
        lo_p, hi_p = (float(x) for x in a.tier.split(","))
        tiered = {}
        for m in phase_modes:
            rows = [r for r in res[("furca", m)] if r[1]]
            lo, hi = np.percentile([r[0] for r in rows], [lo_p, hi_p])
            tiered[m] = [r for r in rows if lo <= r[0] <= hi]
        tier = "" if a.tier == "0,100" else f", the schemas between the p{lo_p:g} and p{hi_p:g} of each mode's TTFM"
        print(f"\nfurca's TTFM by phase: mean ms / page faults a schema (those that compiled{tier})")
        print("| phase | " + " | ".join(phase_modes) + " |")
        print("|:--|" + "--:|" * len(phase_modes))
        for label, _m, _p in PHASE_FNS + (("TTFM", "", ""),):
            cells = []
            for m in phase_modes:
                rows = tiered[m]
                if label == "TTFM":
                    ns, fl = sum(r[0] * 1e6 for r in rows), sum(r[2] for r in rows)
                else:
                    ns = sum(r[3].get(label, (0, 0))[0] for r in rows)
                    fl = sum(r[3].get(label, (0, 0))[1] for r in rows)
                cells.append(f"{ns / len(rows) / 1e6:.3f} / {fl / len(rows):.0f}")
            print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
