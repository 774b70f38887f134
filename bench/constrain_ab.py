"""Two versions of furca.constrain in one process, alternating per schema: an A/B that a
loaded, shared machine does not swamp.

    mkdir -p /tmp/a && git archive REV furca/constrain | tar -x -C /tmp/a
    .venv/bin/python bench/constrain_ab.py --a /tmp/a/furca/constrain [--b furca/constrain] [--sample 500 | --files F]

Separate runs of bench/constrain_maskbench.py on this 2-core machine, shared with other
jobs, drift by 30% and more between runs (even the warm p50), so a 5% change cannot be
seen in them. Here both versions (each a copy of the furca/constrain directory, loaded
as its own package; the package is a leaf that imports only furca.errors from furca)
walk the same schemas in the same minutes: per schema, a cold compile, the first mask,
then every valid instance token by token (fill_bitmask + accept_token, thread CPU time;
--every-instance: the invalid ones' steps too, up to where they stop, as the harness times),
in A-B order for even schemas and B-A for odd ones. --fork: each (schema, version) in a
child forked from this process after both versions' compilers are made and the GC frozen,
as the shared harness runs them (a fresh process per schema: what the harness's TTFM and
first instances pay, mostly copy-on-write faults, is in the figures; one process hides it).

--fork favours the version whose GrammarCompiler the parent made last (B, unless --b-first):
the same code on both sides (A/A, 2026-12-06, Intel Xeon, the 500 sample, every instance)
gave a TTFM B/A of 0.961 and 0.965 paired and 60-64 fewer faults before the first mask
with B's compiler made last, 1.032 and 48 more with A's made last (--b-first); the
per-token p99 and the first instances' moved -4.5 to +2.8% between those runs, either way.
So a forked A/B runs in both orders (--both-orders: the second in a fresh process with
--b-first), and the change is the geometric mean of the two B/A ratios, where the bias
cancels (bench/results/constrain.md, session 36). Prints per version the pass counts
(every valid instance accepted and terminated, every invalid one stopped; invalid
accepted must stay 0), TTFM and per-token percentiles, and the sum of the steps.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.util
import json
import os
import pickle
import resource
import sys
import time

import numpy as np

import _sample  # this script's folder is on the path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# numba's disk cache for the copies loaded here goes to a folder of its own: an entry that
# a kernel of B (the tree's furca/constrain, loaded as _constrain_b) writes beside its
# source would be found by the next plain `import furca` and fail there on unpickling
# (ModuleNotFoundError: _constrain_b). Unless NUMBA_CACHE_DIR is set, the folder is named
# by the two versions' kernel sources (cache_dir, set in load_versions before numba is
# imported): session 50 saw a reused folder serve a kernel older than its edited source.
_USER_CACHE = "NUMBA_CACHE_DIR" in os.environ
HARNESS = os.path.join(ROOT, "..", "shared", "bench", "grammar")


def cache_dir(*dirs) -> str:
    """A numba cache folder for these furca/constrain directories: named by a hash of their
    kernel modules' sources (`_*.py`), so an edited kernel never meets an older entry."""
    import hashlib

    h = hashlib.sha1()
    for d in dirs:
        for name in sorted(os.listdir(d)):
            if name.startswith("_") and name.endswith(".py"):
                with open(os.path.join(d, name), "rb") as f:
                    h.update(name.encode() + f.read())
    return os.path.join(os.environ.get("TMPDIR", "/tmp"), "furca-ab-numba-" + h.hexdigest()[:12])


def load_package(path: str, name: str):
    """The furca/constrain directory at path, imported as the package `name`."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(path, "__init__.py"),
                                                  submodule_search_locations=[path])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def add_ab_args(ap, sample):
    """The options every A/B script takes: the two versions, the schemas, the data."""
    ap.add_argument("--a", required=True, help="a furca/constrain directory (e.g. git archive of a revision)")
    ap.add_argument("--b", default=os.path.join(ROOT, "furca", "constrain"))
    _sample.add_args(ap, sample)
    ap.add_argument("--b-first", action="store_true",
                    help="load B's package and make its compiler before A's: with --fork the version whose "
                         "compiler is made last runs faster (module docstring); run both orders")


def load_versions(a):
    """The set-up shared by the A/B scripts, for parsed add_ab_args options a: the
    harness's `schemas` module, the Llama-3.1 tokenizer, [(label, directory, package,
    TokenizerInfo)] for A and B (numba kernels compiled before any timing), and the schema
    names (--files, else the harness's stratified --sample). Ends with the set-up heap
    frozen (gc.freeze, as constrain_maskbench.py: later collections skip it)."""
    if not _USER_CACHE:
        assert "numba" not in sys.modules, "numba imported before its cache folder was chosen"
        os.environ["NUMBA_CACHE_DIR"] = cache_dir(a.a, a.b)
    sys.path.insert(0, HARNESS)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import schemas
    from constrain.tokenizers_cache import tokenizer_json
    from tokenizers import Tokenizer

    path, eos = tokenizer_json("llama3_1")
    tok = Tokenizer.from_file(str(path))
    versions = []
    order = (("A", a.a), ("B", a.b))
    for label, where in order[::-1] if a.b_first else order:
        pkg = load_package(os.path.abspath(where), f"_constrain_{label.lower()}")
        info = pkg.TokenizerInfo.from_tokenizer_json(path, eos_token=eos)
        pkg.GrammarCompiler(info).compile_json_schema({"type": "object"}).matcher().fill_bitmask(
            np.zeros((1, info.num_words), dtype=np.int32))
        versions.append((label, where, pkg, info))
    versions.sort(key=lambda v: v[0])  # A, B whatever the order they were loaded in
    names = _sample.names(a)
    gc.collect()
    gc.freeze()
    return schemas, tok, versions, names


def run_schema(pkg, info, d, tok, text_of, clock, out, name="", every=False, compiler=None):
    """One schema with one version: appends TTFM and step times to out (out["later"]: per
    step, whether it is past the schema's first instance), and records in out["per"][name]
    (sum of its steps in ns, automaton states at its end, its slowest step in ns);
    returns its status. compiler: the version's GrammarCompiler (default: a new one)."""
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    f0 = _faults()
    t0 = clock()
    try:
        g = (compiler or pkg.GrammarCompiler(info)).compile_json_schema(d["schema"])
        g.matcher().fill_bitmask(bm)
    except Exception:  # noqa: BLE001  (a CompileError or a timeout: counted, not timed)
        return "compile_error"
    out["ttfm"].append(clock() - t0)
    out.setdefault("ttfm_faults", []).append(_faults() - f0)
    out.setdefault("ttfm_by", {})[name] = out["ttfm"][-1]
    status = "pass"
    first = len(out["steps"])
    for n_test, test in enumerate(d["tests"]):
        ids = tok.encode(text_of(test["data"], d["schema"]), add_special_tokens=False).ids + [info.eos_token_id]
        m, ok = g.matcher(), True
        for t in ids:
            t0 = clock()
            m.fill_bitmask(bm)
            allowed = (int(bm[0, t >> 5]) >> (t & 31)) & 1
            ok = bool(allowed) and m.accept_token(t)
            if test["valid"] or every:  # every: the invalid instances' steps too, as the harness times
                out["steps"].append(clock() - t0)
                out.setdefault("later", []).append(n_test > 0)
            if not ok:
                break
        ok = ok and m.is_terminated()
        if test["valid"] and not ok and status == "pass":
            status = "valid_rejected"
        if not test["valid"] and ok:
            status = "invalid_accepted"
    out["per"][name] = (sum(out["steps"][first:]), g.automaton.num_states, max(out["steps"][first:], default=0))
    return status


def main():
    ap = argparse.ArgumentParser()
    add_ab_args(ap, sample=500)
    ap.add_argument("--slowest", type=int, default=15, help="schemas listed with their automaton states")
    ap.add_argument("--every-instance", action="store_true",
                    help="time the steps of the invalid instances too (as the shared harness does), not only the valid ones")
    ap.add_argument("--fork", action="store_true",
                    help="each (schema, version) in a child forked from this process, as the shared harness runs them")
    ap.add_argument("--both-orders", action="store_true",
                    help="then the same run again in a fresh process with --b-first, and the two runs' B/A "
                         "ratios combined (geometric mean: the order's bias cancels)")
    ap.add_argument("--summary", default=None, help="write the run's figures (summarize) to this JSON file")
    a = ap.parse_args()
    if a.both_orders:
        return both_orders(a)
    schemas, tok, loaded, names = load_versions(a)
    versions = [(*v, {"ttfm": [], "steps": [], "counts": {}, "per": {}, "faults": []}) for v in loaded]
    made = loaded[::-1] if a.b_first else loaded  # the compilers too in the order the packages were loaded
    compilers = {label: pkg.GrammarCompiler(info) for label, _w, pkg, info in made} if a.fork else {}
    if a.fork:
        gc.collect()
        gc.freeze()
    for k, name in enumerate(names):
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            d = json.load(f)
        for label, _where, pkg, info, out in (versions if k % 2 == 0 else versions[::-1]):
            run = functools.partial(run_schema, pkg, info, d, tok, schemas.instance_text, time.thread_time_ns,
                                    name=name, every=a.every_instance, compiler=compilers.get(label))
            status = run_forked(run, out) if a.fork else run(out)
            out["counts"][status] = out["counts"].get(status, 0) + 1
    for label, where, _pkg, _info, out in versions:
        x, y = np.array(out["steps"]) / 1e3, np.array(out["ttfm"]) / 1e6
        print(f"{label} {where}: {json.dumps(out['counts'])}")
        print(f"  TTFM ms p50 {np.percentile(y, 50):.2f} p99 {np.percentile(y, 99):.1f} | token µs p50 "
              f"{np.percentile(x, 50):.1f} p90 {np.percentile(x, 90):.1f} p99 {np.percentile(x, 99):.1f} "
              f"max {x.max():.0f} sum {x.sum() / 1e3:.0f} ms, {(x > 200).sum()} over 200 µs, "
              f"{(x > 500).sum()} over 500 (n={len(x)})")
        later = np.array(out["later"], dtype=bool)
        if later.any() and (~later).any():  # where the tail lies: a schema's first instance makes its states
            print(f"  first instances p99 {np.percentile(x[~later], 99):.1f} µs (n={int((~later).sum())}), "
                  f"later ones p99 {np.percentile(x[later], 99):.1f} µs (n={int(later.sum())})")
        if out["faults"]:
            f, c = np.array(out["faults"]), np.array(out["ttfm_faults"])
            print(f"  forked: minor page faults per schema p50 {np.percentile(f, 50):.0f} mean {f.mean():.0f} "
                  f"(compile, first mask and every step), {c.mean():.0f} of them before the first mask (mean)")
        worst = max(out["per"], key=lambda k: out["per"][k][2], default=None)
        if worst is not None:
            print(f"  slowest step: {worst} {out['per'][worst][2] / 1e3:.0f} µs")
    a_by, b_by = (out.get("ttfm_by", {}) for *_rest, out in versions)
    both = [k for k in a_by if k in b_by and a_by[k] > 0]
    if both:  # paired per schema: steadier than the two p50s when the machine drifts
        r = np.array([b_by[k] / a_by[k] for k in both])
        print(f"TTFM B/A per schema (paired, n={len(both)}): median {np.median(r):.3f}, "
              f"B faster on {100 * (r < 1).mean():.0f}% of the schemas")
    print_slowest([out["per"] for *_rest, out in versions], a.slowest)
    if a.summary:
        with open(a.summary, "w", encoding="utf-8") as f:
            json.dump(summarize([out for *_rest, out in versions]), f)


def summarize(outs) -> dict:
    """The figures the orders are combined on, per version (A, B): TTFM p50, per-token p50
    / p90 / p99, the first instances' p99, the sum of the steps (ms), the steps over 200
    µs (the target's p99: at most 1% of them may be), the faults before
    the first mask and in all (forked), and the paired TTFM B/A median."""
    res = {}
    for label, out in zip("AB", outs):
        x, y = np.array(out["steps"]) / 1e3, np.array(out["ttfm"]) / 1e6
        later = np.array(out.get("later", []), dtype=bool)
        r = {"ttfm_p50": np.percentile(y, 50), "token_p50": np.percentile(x, 50),
             "token_p90": np.percentile(x, 90), "token_p99": np.percentile(x, 99), "sum_ms": x.sum() / 1e3,
             "over_200": max(1, int((x > 200).sum()))}
        if later.any() and (~later).any():
            r["first_p99"] = np.percentile(x[~later], 99)
        if out["faults"]:
            r["faults"] = float(np.mean(out["faults"]))
            r["faults_before_mask"] = float(np.mean(out["ttfm_faults"]))
        res[label] = {k: float(v) for k, v in r.items()}
    a_by, b_by = (out.get("ttfm_by", {}) for out in outs)
    both = [k for k in a_by if k in b_by and a_by[k] > 0]
    if both:
        res["ttfm_paired"] = float(np.median([b_by[k] / a_by[k] for k in both]))
    return res


def both_orders(a):
    """The run in both orders, each in a fresh process (the second with --b-first: A's
    compiler made last), and per figure the geometric mean of the two B/A ratios (faults:
    the mean of the two B - A). With --fork the version whose compiler the parent made
    last is ~3.5% faster to its first mask (module docstring): this cancels it."""
    import subprocess
    import tempfile

    argv = [x for x in sys.argv[1:] if x not in ("--both-orders", "--b-first")]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, extra in enumerate(([], ["--b-first"])):
            path = os.path.join(tmp, f"{k}.json")
            print(f"==== order {k + 1} of 2: {'B' if extra else 'A'}'s compiler made first", flush=True)
            subprocess.run([sys.executable, os.path.abspath(__file__), *argv, *extra, "--summary", path], check=True)
            with open(path, encoding="utf-8") as f:
                runs.append(json.load(f))
    print("==== both orders: B/A, geometric mean of the two runs (each run's B/A in brackets)")
    for key in ("ttfm_p50", "token_p50", "token_p90", "token_p99", "first_p99", "sum_ms", "over_200"):
        if all(key in r["A"] and key in r["B"] for r in runs):
            each = [r["B"][key] / r["A"][key] for r in runs]
            print(f"  {key:10s} {np.sqrt(each[0] * each[1]):.3f} ({each[0]:.3f}, {each[1]:.3f})")
    if all("ttfm_paired" in r for r in runs):
        each = [r["ttfm_paired"] for r in runs]
        print(f"  TTFM paired median {np.sqrt(each[0] * each[1]):.3f} ({each[0]:.3f}, {each[1]:.3f})")
    for key in ("faults_before_mask", "faults"):
        if all(key in r["A"] for r in runs):
            each = [r["B"][key] - r["A"][key] for r in runs]
            print(f"  {key} B - A {np.mean(each):+.0f} ({each[0]:+.0f}, {each[1]:+.0f})")


def _faults() -> int:
    """The process's minor page faults so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def run_forked(run, out):
    """run(out) in a child forked from this process (the harness's way: a fresh process
    per schema, whose first write to each page it shares with the parent faults, ~1,000
    pages for a compile: bench/results/constrain.md, session 34); the child's additions to
    out come back pickled through a pipe, with its minor page faults. Returns the status
    ("crash" where the child returned nothing)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            mine = {"ttfm": [], "steps": [], "later": [], "per": {}, "ttfm_faults": [], "ttfm_by": {}}
            f0 = _faults()
            status = run(mine)
            mine["faults"] = _faults() - f0
            with os.fdopen(w, "wb") as f:
                pickle.dump((status, mine), f)
        except BaseException:  # noqa: BLE001  (reported as a crash by the parent)
            code = 70
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    if not data:
        return "crash"
    status, mine = pickle.loads(data)
    for key in ("ttfm", "steps", "ttfm_faults"):
        out.setdefault(key, []).extend(mine[key])
    out.setdefault("later", []).extend(mine["later"])
    out["per"].update(mine["per"])
    out.setdefault("ttfm_by", {}).update(mine["ttfm_by"])
    out["faults"].append(mine["faults"])
    return status


def print_slowest(pers, n):
    """The n schemas with the largest sum of steps (both versions added): per version the
    sum of its steps (ms) and its automaton states at the end of its instances."""
    names = [k for k in pers[0] if all(k in p for p in pers)]
    names.sort(key=lambda k: -sum(p[k][0] for p in pers))
    print(f"slowest {min(n, len(names))} schemas: sum of steps ms / automaton states, A then B")
    tot = [[0, 0] for _ in pers]
    for k in names[:n]:
        cells = []
        for t, p in zip(tot, pers):
            t[0] += p[k][0]
            t[1] += p[k][1]
            cells.append(f"{p[k][0] / 1e6:8.1f} / {p[k][1]:7d}")
        print(f"  {k[:40]:40s} " + " | ".join(cells))
    print("  total" + " " * 36 + " | ".join(f"{t[0] / 1e6:8.1f} / {t[1]:7d}" for t in tot))


if __name__ == "__main__":
    main()
