"""furca alone on a stratified sample of MaskBench (maskbench-dev), in this venv.

    .venv/bin/python bench/constrain_maskbench.py [--sample 50] [--data DIR] [--timeout-s 30]

Uses the shared harness's own sample, instance serialisation and token walk
(../shared/bench/grammar/{schemas,engines}.py), so the numbers line up with run.py;
for the side-by-side comparison with the other engines use run.py there.
Prints pass / compile_error / timeout / valid_rejected / invalid_accepted counts and
TTFM and per-token (fill + accept) percentiles.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(ROOT, "..", "shared", "bench", "grammar")


class Timeout(Exception):
    pass


def walk(engine, compiled, ids, eos_id, bitmask, clock):
    """engines.walk with a chosen clock (the same steps: fill, check the bit, accept)."""
    from engines import Walk, bit_is_set

    mask_ns, commit_ns = [], []
    m = engine.new_matcher(compiled)
    steps = list(ids) + [eos_id]
    for i, t in enumerate(steps):
        t0 = clock()
        engine.fill(m, bitmask)
        mask_ns.append(clock() - t0)
        if not bit_is_set(bitmask, t):
            commit_ns.append(0)
            return Walk(False, i, "eos_masked" if i == len(ids) else "masked", mask_ns, commit_ns)
        t0 = clock()
        ok = engine.accept(m, t)
        commit_ns.append(clock() - t0)
        if not ok:
            return Walk(False, i, "refused", mask_ns, commit_ns)
    if not engine.is_terminated(m):
        return Walk(False, len(ids), "not_terminated", mask_ns, commit_ns)
    return Walk(True, -1, "", mask_ns, commit_ns)


PHASES = ("metaschema", "translate", "lower", "prepare", "build_nfa")


def _time_phases(clock):
    """Wraps the compile's phase functions where the compile path looks them up, so that
    each call adds its time to the returned dict (phase -> ns, cleared per schema)."""
    import furca.constrain.compiler as compiler_mod
    import furca.constrain.json_schema as js
    from furca.constrain.json_schema.compiler import Compiler

    acc = {}

    def timed(phase, fn):
        def run(*args, **kw):
            t0 = clock()
            try:
                return fn(*args, **kw)
            finally:
                acc[phase] = acc.get(phase, 0) + clock() - t0
        return run

    js.check_metaschema = timed("metaschema", js.check_metaschema)
    js.lower = timed("lower", js.lower)
    Compiler.compile_root = timed("translate", Compiler.compile_root)
    compiler_mod.prepare = timed("prepare", compiler_mod.prepare)
    compiler_mod.build_nfa = timed("build_nfa", compiler_mod.build_nfa)
    return acc


def _print_phases(phases, n):
    """Percentiles of each phase over the compiled schemas and the n slowest TTFMs by phase."""
    cols = PHASES + ("first mask",)

    def row(ttfm, ph):
        return [ph.get(k, 0) for k in PHASES] + [ttfm - sum(ph.get(k, 0) for k in PHASES)]

    table = np.array([row(t, ph) for _, t, ph in phases]) / 1e6
    print("TTFM phases ms  p50 / p90 / p99 / sum: " + "  ".join(
        f"{c} {np.percentile(table[:, i], 50):.2f} / {np.percentile(table[:, i], 90):.2f} / "
        f"{np.percentile(table[:, i], 99):.1f} / {table[:, i].sum():.0f}" for i, c in enumerate(cols)))
    print("| schema | TTFM ms | " + " | ".join(cols) + " |")
    print("|:--|--:|" + "--:|" * len(cols))
    for name, t, ph in sorted(phases, key=lambda x: -x[1])[:n]:
        print(f"| {name.removesuffix('.json')} | {t / 1e6:.1f} | " + " | ".join(f"{v / 1e6:.1f}" for v in row(t, ph)) + " |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=50)
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "maskbench-dev"))
    ap.add_argument("--timeout-s", type=int, default=30)
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--eos", default="<|eot_id|>")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--member-order", default="schema", choices=("schema", "any"),
                    help="compile_json_schema's member_order (any: objects in any member order)")
    ap.add_argument("--files", default=None, help="file with schema names, one per line (instead of --sample)")
    ap.add_argument("--dump", default=None,
                    help="write one JSON line per schema (status, ttfm_ns, per-step ns of the valid instances) here; "
                         "bench/constrain_compare_dumps.py compares two dumps over the schemas both passed")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time with this thread's CPU time (time.thread_time_ns) instead of wall time: "
                         "steadier on a loaded machine")
    ap.add_argument("--phases", type=int, default=0, metavar="N",
                    help="time each compile's phases (metaschema, translate, lower, prepare, build_nfa; "
                         "'first mask' is the rest of the TTFM: the automaton, the start state's mask, the "
                         "releases of the translator and the IR) with the same clock; print their percentiles and the N slowest "
                         "TTFMs by phase")
    ap.add_argument("--profile", default=None,
                    help="cProfile the instance walks (masks and accepts, not the compile) into this .pstats "
                         "file and print the 30 functions with the most own time")
    a = ap.parse_args()
    sys.path.insert(0, HARNESS)
    sys.path.insert(0, ROOT)
    import engines
    import schemas

    from tokenizers import Tokenizer

    from furca.constrain import GrammarCompiler, TokenizerInfo

    if a.tokenizer is None:
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        from constrain.tokenizers_cache import tokenizer_json

        a.tokenizer, a.eos = tokenizer_json("llama3_1")
    tok = Tokenizer.from_file(str(a.tokenizer))
    info = TokenizerInfo.from_tokenizer_json(a.tokenizer, eos_token=a.eos)
    eng = engines.FurcaEngine(ROOT)
    eng.info, eng.compiler = info, GrammarCompiler(info)
    if a.member_order != "schema":
        plain_compile = eng.compile
        eng.compile = lambda kind, spec: eng.compiler.compile_json_schema(spec, member_order=a.member_order) \
            if kind == "json_schema" else plain_compile(kind, spec)
    eos = info.eos_token_id
    bm = engines.alloc_bitmask(info.vocab_size)
    engines.warm_up(eng, tok.encode(engines.WARM_UP_TEXT, add_special_tokens=False).ids, eos, info.vocab_size)
    gc.collect()  # as the harness's worker (and furca serve) do after set-up: full collections
    gc.freeze()   # then skip the set-up heap (numba, the tokenizer), ~40 ms each otherwise
    clock = time.thread_time_ns if a.cpu_time else time.perf_counter_ns
    phase_ns = _time_phases(clock) if a.phases else None
    names = schemas.stratified_sample(schemas.list_files(a.data), a.sample)
    if a.files:  # an explicit list (one schema file name per line), e.g. the schemas every engine passed
        with open(a.files, encoding="utf-8") as f:
            names = [ln.strip() for ln in f if ln.strip()]
    counts = {}
    ttfm, steps = [], []
    slow = []  # (ttfm ns, max step ns, name)
    phases = []  # (name, ttfm ns, {phase: ns}) with --phases
    heavy = {}  # name -> steps over 2 ms

    def alarm(*_):
        raise Timeout()

    signal.signal(signal.SIGALRM, alarm)
    dump = open(a.dump, "w") if a.dump else None
    mem = []  # CompiledGrammar.memory_size_bytes() after all of a schema's instances
    prof = None
    if a.profile:
        import cProfile

        prof = cProfile.Profile()
    for name in names:
        n_steps, n_ttfm = len(steps), len(ttfm)
        g = None
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            d = json.load(f)
        status, why = "pass", ""
        signal.alarm(a.timeout_s)
        try:
            eng.compiler = GrammarCompiler(info)  # cold: nothing cached between schemas
            if phase_ns is not None:
                phase_ns.clear()
            t0 = clock()
            try:
                g = eng.compile("json_schema", d["schema"])
                eng.fill(eng.new_matcher(g), bm)
                ttfm.append(clock() - t0)
                slow.append([ttfm[-1], 0, name])
                if phase_ns is not None:
                    phases.append((name, ttfm[-1], dict(phase_ns)))
            except Exception as e:  # noqa: BLE001
                status, why = "compile_error", f"{type(e).__name__}: {e}"[:200]
            else:
                for test in d["tests"]:
                    text = schemas.instance_text(test["data"], d["schema"])
                    ids = tok.encode(text, add_special_tokens=False).ids
                    if prof is not None:
                        prof.enable()
                    w = walk(eng, g, ids, eos, bm, clock) if a.cpu_time else engines.walk(eng, g, ids, eos, bm)
                    if prof is not None:
                        prof.disable()
                    if test["valid"]:
                        steps += [m + c for m, c in zip(w.mask_ns, w.commit_ns)]
                        slow[-1][1] = max([slow[-1][1]] + [m + c for m, c in zip(w.mask_ns, w.commit_ns)])
                        heavy[name] = heavy.get(name, 0) + sum(m + c > 2_000_000 for m, c in zip(w.mask_ns, w.commit_ns))
                    if test["valid"] and not w.accepted:
                        status = "valid_rejected"
                        why = f"{w.reason} at {w.fail_step}: {tok.decode(ids[:w.fail_step])[-60:]!r}"
                        break
                    if not test["valid"] and w.accepted:
                        status, why = "invalid_accepted", text[:100]
                        break
        except Timeout:
            status = "timeout"
        finally:
            signal.alarm(0)
            if prof is not None:
                prof.disable()
        counts[status] = counts.get(status, 0) + 1
        if g is not None and status != "compile_error":
            try:
                mem.append(g.memory_size_bytes())
            except Exception:  # noqa: BLE001
                pass
        if dump:
            dump.write(json.dumps({"file": name, "status": status, "ttfm_ns": ttfm[n_ttfm] if len(ttfm) > n_ttfm else None,
                                   "steps_ns": steps[n_steps:], "mem_bytes": mem[-1] if mem else None}) + "\n")
            dump.flush()
        if a.verbose or status != "pass":
            print(f"{status:16s} {name} {why}")
    print(json.dumps(counts))
    if prof is not None:
        import pstats

        prof.dump_stats(a.profile)
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    print("slowest TTFM:", ", ".join(f"{n} {t / 1e6:.0f} ms" for t, _, n in sorted(slow, reverse=True)[:5]))
    print("most steps over 2 ms:", ", ".join(f"{n} {k}" for n, k in sorted(heavy.items(), key=lambda x: -x[1])[:8]))
    print("slowest step:", ", ".join(f"{n} {m / 1e6:.1f} ms" for _, m, n in sorted(slow, key=lambda x: -x[1])[:5]))

    def p(xs, q):
        return np.percentile(np.asarray(xs) / 1e3, q) if xs else float("nan")

    if phases:
        _print_phases(phases, a.phases)
    print(f"TTFM ms   p50 {p(ttfm, 50) / 1e3:.2f}  p90 {p(ttfm, 90) / 1e3:.2f}  p99 {p(ttfm, 99) / 1e3:.2f}  "
          f"max {max(ttfm) / 1e6 if ttfm else float('nan'):.1f}")
    if mem:
        print(f"memory per compiled grammar (after its instances) MB  p50 {np.percentile(mem, 50) / 1e6:.2f}  "
              f"p90 {np.percentile(mem, 90) / 1e6:.2f}  max {max(mem) / 1e6:.1f}")
    print(f"token µs  p50 {p(steps, 50):.1f}  p90 {p(steps, 90):.1f}  p99 {p(steps, 99):.1f}  "
          f"max {max(steps) / 1e3 if steps else float('nan'):.0f}  (n={len(steps)})")


if __name__ == "__main__":
    main()
