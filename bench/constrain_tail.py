"""What the 1% slowest steps hold: the steps that set the per-token p99.

    .venv/bin/python bench/constrain_tail.py [--sample 500 | --files LIST] [--top 1.0]
    .venv/bin/python bench/constrain_tail.py --first-only --band 180,350 --time   # the band around the p99
    .venv/bin/python bench/constrain_tail.py --first-only --sampler-wait 20   # then, in another shell:
        py-spy record --rate 250 --format raw --pid <the pid it prints> --output F

Per schema of the harness's stratified sample (Llama-3.1), in one process: a cold compile
and first mask, then every instance token by token (fill_bitmask + accept_token, thread
CPU time), as the shared harness walks them. Each step notes the cold work it ran: a
slice search on a state not searched before (slices.SliceBounds.slice_depth), the first
"any key" walk of a key trie and stack (key_masks.KeyTrieMasks._any_key), another key
trie mask, a new abstract state's walk, a tiered mask, how many new masks. Printed for
the --top percent slowest steps (or those of --band LO,HI µs): how many are in first
instances, their page faults, the automaton states and rows they made, and the
combinations of that work, most frequent first. --time adds the thread CPU time of the
functions in TIMED (each counted at its outermost call: a recursive or nested call is
inside its caller's; a call under another label counts in both), summed over those steps
and over all, and their calls in those steps. --kernels splits each step's time into the
numba kernels' (their dispatch included) and the rest (Python, and most page faults),
overall and by the combination of work, with the four kernels that took most of it, and
the steps over 200 µs if the time outside the kernels (Python and the page faults it
takes; a kernel's dispatch counts as the kernel's) were 0.75 / 0.5 / 0.25 / 0 of itself
(outside(); session 42, forked: 3,115 -> 2,442 / 1,797 / 1,263 / 767, -22 / -42 / -59 /
-75%: the harness meets the target at -36 to -49%, so about half the Python of the cold
path or less; the kernel walks at no time at all, -47%: `--time --what-if "kernel walks"`).

--where (or --where-only TEXT, which keeps the steps whose place holds TEXT) counts the
steps by their place in the JSON text (json_position: a string value's first character,
a key's first character after `{` or `,`, in the root object or a nested one, ...), with
their mean time, new states, faults and the work most of them ran.

--fork: each schema compiled and walked in a process forked after the warm-up, as the
harness runs it (its caches and written pages are its own), the page faults of the steps
counted. A forked process pays a minor fault at its first write to each page it shares
with the parent: CPython writes to the objects it reads (reference counts, 3.11's
adaptive bytecode inside code objects), so the first run of each code path in the child
faults in pages of code and objects (~2.6 µs each here). Measured 2026-12-06 (the first
instances, 54,024 steps): the forked steps took 1.36x the time of the same steps in one
process, ~4.2 µs for each fault (a least-squares fit over the steps; steps without faults
1.04x), their p99 736-840 µs against 455-534 (bench/results/constrain.md, session 34).
--touch-parent {all,heap,anon,code} pays the child's copy-on-write faults of the
parent's pages (all of them, the brk heap's, the anonymous mappings', or those of furca's
functions and code objects) before its compile, to tell which memory the steps' faults
hit (session 38: the heap's pages are most of them, and of those mostly data, not code).

--strip KEYWORD[:open|:anchored] (the keyword's string values removed from every schema)
and --populate-rows (each grammar's transition table written in advance, untimed): upper
bounds of what a kind of state or the rows' page faults cost the steps (session 41's
figures in stripped() and populate_rows()).

--src DIR: furca imported from DIR (a worktree of another commit; PYTHONPATH is not enough,
this script puts its own tree first). Session 40: the same command over two versions in
turn moved 3,302-3,719 steps over 200 µs between runs of either: the VM's drift is larger
than most changes; judge with constrain_ab.py's paired A/B.

--sampler-wait N: compile every grammar and fill its first mask first, print the pid,
sleep N seconds (start a sampling profiler on the pid then), and walk the instances
(--first-only: each schema's first one) without the notes: a profile of the steps alone.
py-spy's blocking mode (the default) gives exact stacks; its --nonblocking samples read
frames that change under it. Figures: bench/results/constrain.md (session 32).
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import resource
import sys
import time

import numpy as np
import _sample  # this script's folder is on the path
from _forked import in_child
clock = time.thread_time_ns
# one fill + accept: thread CPU ns, in a first instance, notes (instrument), TIMED ns and
# calls (--time), minor page faults, (new states, new rows), (ns, calls) in kernels (--kernels)
Step = collections.namedtuple("Step", "ns first notes spent faults calls made kernels by_kernel where")


def faults() -> int:
    """The process's minor page faults so far (a forked process's first write to each
    page it shares with its parent is one: ~2.6 µs here, ~4 µs with what follows it)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


notes: collections.Counter = collections.Counter()


def _note(owner, name, label, new):
    """Counts owner.name's calls for which new(self, *args) holds under label."""
    f = getattr(owner, name)

    def g(self, *a, **k):
        if new(self, *a):
            notes[label] += 1
        return f(self, *a, **k)

    setattr(owner, name, g)


def instrument():
    from furca.constrain import contexts, key_masks, masks, slices

    _note(slices.SliceBounds, "slice_depth", "slice search", lambda b, s, sl: s not in b._depth.get(sl.name, {}))
    _note(key_masks.KeyTrieMasks, "_any_key", "any key", lambda k, n, st, *_a: (n, st) not in k._any)
    _note(key_masks.KeyTrieMasks, "words", "key mask", lambda *_a: True)
    _note(contexts.ContextSplit, "abstract_part", "new abstract", lambda m, ab, *_a: ab not in m._abs)
    _note(masks.TokenMasks, "_tiered_mask", "tiered", lambda *_a: True)
    _note(masks.TokenMasks, "_compute_mask_ctx", "new mask", lambda *_a: True)


TIMED = [  # (label, module of furca.constrain, attribute path): --time
    ("new mask", "masks", "TokenMasks._compute_mask_ctx"),
    ("slice search", "slices", "SliceBounds.slice_depth"),
    ("key words", "key_masks", "KeyTrieMasks.words"),
    ("literal walks", "key_masks", "KeyTrieMasks._literal_walks"),
    ("any key", "key_masks", "KeyTrieMasks._any_key"),
    ("recorded split", "contexts", "ContextSplit.recorded_split"),
    ("recording walk", "masks", "walk_recording"),
    ("continuation", "masks", "walk_continue"),
    ("split's walks", "contexts", "walk_recording"),
    ("split's conts", "contexts", "walk_continue"),
    ("kernel walks", "core_rows", "Core.walk_roots"),
    ("key kernel", "core_rows", "Core.key_words"),
    ("stored", "masks", "_stored"),
    ("split's stored", "contexts", "_stored"),
    ("gc pause end", "gcpause", "GcPause.exit"),
    ("literal conts", "key_masks", "walk_continue"),
    ("bounded part", "string_counters", "BoundedStrings.part"),
    ("accept", "matcher", "Matcher.accept_token"),
    ("accept's steps", "automaton", "LazyAutomaton.step"),
]
NESTED = {  # --what-if: the TIMED labels always inside another's call
    "new mask": ("slice search", "key words", "literal walks", "any key", "recorded split", "recording walk",
                 "continuation", "split's walks", "split's conts", "kernel walks", "key kernel", "stored", "split's stored",
                 "literal conts", "bounded part"),
    "key words": ("literal walks", "any key", "key kernel", "literal conts"),
    "accept": ("accept's steps",),
}
spent: collections.Counter = collections.Counter()
calls: collections.Counter = collections.Counter()  # TIMED calls in the step, nested ones too
in_kernels = [0, 0]  # --kernels: thread CPU ns inside the numba kernels called from Python in the step, calls
by_kernel: collections.Counter = collections.Counter()  # --kernels: those ns by the kernel's name


def time_kernels():
    """Wraps every numba kernel that Python calls (the modules' dispatchers, read at each
    call or at a Core's creation; _walk's helper kernels) to add its time, dispatch and
    unboxing included, to in_kernels. After the warm-up: the kernels call each other
    through the dispatchers they were compiled against, never through these wrappers (a
    kernel compiled after this, for a new type signature, would find a wrapper where it
    names another kernel and fail to compile; not seen on the 500 sample)."""
    from numba.core.registry import CPUDispatcher

    from furca.constrain import _core_kernels, _core_tables, _core_walk_kernels, _walk

    def timed(f, name):
        def g(*a, **k):
            t0 = clock()
            try:
                return f(*a, **k)
            finally:
                t = clock() - t0
                in_kernels[0] += t
                in_kernels[1] += 1
                by_kernel[name] += t
        return g

    for mod in (_core_kernels, _core_tables, _core_walk_kernels):
        for name in dir(mod):
            if isinstance(getattr(mod, name), CPUDispatcher):
                setattr(mod, name, timed(getattr(mod, name), name))
    for name, f in list(_walk._KERNELS.items()):
        _walk._KERNELS[name] = timed(f, name)


def time_calls(with_faults=False, only=None):
    """Wraps every TIMED function: its thread CPU time at the outermost call into spent
    (under label), with_faults its page faults too (under (label, "faults"): getrusage
    twice a call, ~1 µs, which puts more steps over a threshold)."""
    from _wrap import wrap

    count_faults = faults if with_faults else int
    timed = [x for x in TIMED if only is None or x[0] in only]

    depth: collections.Counter = collections.Counter()
    for label, module, path in timed:

        def make(f, _label=label):
            def g(*a, **k):
                depth[_label] += 1
                calls[_label] += 1
                t0, f0 = clock(), count_faults()
                try:
                    return f(*a, **k)
                finally:
                    depth[_label] -= 1
                    if not depth[_label]:
                        spent[_label] += clock() - t0
                        spent[_label, "faults"] += count_faults() - f0

            return g

        wrap(module, path, make)


def touch_parent(which) -> None:
    """--touch-parent (a diagnostic): in a forked child, one write to every page of the
    private writable mappings it shares with its parent, before the schema's compile:
    those pages' copy-on-write faults are paid here, so the steps' faults that remain are
    the others (fresh pages). which: "all", "heap" (glibc's brk heap: code objects,
    malloc'ed numpy data and Python objects over 512 bytes), "anon" (anonymous
    mappings: pymalloc's arenas, big arrays, numba's memory) or "code" (furca's functions
    and code objects only: touch_code). The stack is left alone."""
    import ctypes

    if which == "code":  # furca's code objects (and their functions): a reference to each writes its count
        touch_code()
        return
    with open("/proc/self/maps") as f:
        maps = [line.split() for line in f]
    for m in maps:
        name = m[5] if len(m) > 5 else ""
        if m[1] != "rw-p" or name.startswith("[st") or (which == "heap" and name != "[heap]") or (
                which == "anon" and name):
            continue
        lo, hi = (int(x, 16) for x in m[0].split("-"))
        np.frombuffer((ctypes.c_ubyte * (hi - lo)).from_address(lo), np.uint8)[::4096] += 0


_TOUCHED: list = []


def touch_code() -> None:
    """--touch-parent code: one new reference to every function and code object of furca's
    modules (nested code objects included), which writes each one's reference count: the
    pages those objects share with the parent are copied here, not in the steps."""
    import types

    def codes(c):
        yield c
        for k in c.co_consts:
            if isinstance(k, types.CodeType):
                yield from codes(k)

    for name, mod in list(sys.modules.items()):
        if not name.startswith("furca") or mod is None:
            continue
        for obj in list(vars(mod).values()):
            fns = [obj] if isinstance(obj, types.FunctionType) else (
                [v for v in vars(obj).values() if isinstance(v, types.FunctionType)] if isinstance(obj, type) else [])
            for f in fns:
                _TOUCHED.append(f)
                _TOUCHED.extend(codes(f.__code__))
    gc.freeze()  # the list out of the young collections at every mask's end


def stripped(schema, spec):
    """--strip KEYWORD[:open|:anchored]: schema without the string values of KEYWORD (for
    a pattern, :open only those without a final $, :anchored only those with one). The
    instances are still walked (a removed keyword only widens the language): the steps'
    figures against a plain run bound what that keyword's states cost. Session 41: the
    first instances forked, formats removed 2,231 / 2,164 -> 2,005 / 2,030 steps over 200
    µs, p99 612 -> 565 µs; anchored patterns 2,126 -> 1,952, p99 602 -> 505; open ones level."""
    if not spec:
        return schema
    key, _, which = spec.partition(":")

    def drop(k, v):
        return k == key and isinstance(v, str) and (not which or v.endswith("$") == (which == "anchored"))

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if not drop(k, v)}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    return strip(schema)


def populate_rows(g) -> None:
    """--populate-rows: the pages of g's transition table (its first 32,768 rows: 32 MB)
    written in bulk (MADV_POPULATE_WRITE) after its compile, outside the timed steps: the
    steps then pay no page fault for the rows they write. Session 41: the first
    instances' step faults -24%, their steps over 200 µs level (2,158 / 2,217 -> 2,205 /
    2,155): a fresh zero page is a cheap fault; the rows' pages are not what the slow
    steps wait on."""
    import mmap

    buf = g.automaton.trans.base
    while buf is not None and not isinstance(buf, mmap.mmap):
        buf = buf.obj if isinstance(buf, memoryview) else getattr(buf, "base", None)
    if buf is not None:  # a reserved table (tables.reserved_table), not one numpy allocated
        buf.madvise(23, 0, min(len(buf), 32768 * 1024))  # MADV_POPULATE_WRITE (Linux 5.14)


def kinds(n) -> str:
    out = [x for x in ("slice search", "any key") if n.get(x)]
    if n.get("key mask") and not n.get("any key"):
        out.append("key mask")
    out += [x for x in ("new abstract", "tiered") if n.get(x)]
    masks_made = n.get("new mask", 0)
    out.append("no new mask" if not masks_made else "new masks > 1" if masks_made > 1 else "one new mask")
    return ", ".join(out)


def json_position(text: str) -> str:
    """Where a JSON text's prefix ends, in words: the kind of place the next token begins
    at (a document's start, a key's first character in the root object or a nested one, a
    value's start after a key or in an array, inside a key, string value or number)."""
    stack, in_str, esc, is_key, str_len, after, opener = [], False, False, False, 0, "", ""
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
                after = "key" if is_key else "value"
                continue
            str_len += 1
            continue
        if ch == '"':
            in_str, str_len = True, 0
            is_key = bool(stack) and stack[-1] == "{" and after in ("{", ",")
            opener = after
        elif ch in "{[":
            stack.append(ch)
            after = ch
        elif ch in "}]":
            stack.pop() if stack else None
            after = "value"
        elif ch in ",:":
            after = ch
        elif not ch.isspace():
            after = "scalar"
    depth = "root" if len(stack) <= 1 else "nested"
    if not text:
        return "document start"
    if in_str:
        what = f"key after {opener}" if is_key else "string value"
        return f"{what}'s {'first character' if str_len == 0 else 'later characters'} ({depth})"
    if after == "{":
        return f"after {{ ({depth})"
    if after == "[":
        return f"an array's first item ({depth})"
    if after == ":":
        return f"a member's value start ({depth})"
    if after == ",":
        return f"after , in {'an object' if stack and stack[-1] == '{' else 'an array'} ({depth})"
    if after == "scalar":
        return "inside a number or literal"
    if not stack:
        return "after the document"
    return f"after a {after} ({depth})"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _sample.add_args(ap)
    ap.add_argument("--top", type=float, default=1.0, help="the percent of slowest steps described")
    ap.add_argument("--band", help="LO,HI: the steps of LO to HI µs described instead of --top")
    ap.add_argument("--time", action="store_true", help="time the TIMED functions in those steps")
    ap.add_argument("--label-faults", action="store_true", help="with --time: each label's page faults too")
    ap.add_argument("--what-if",
                    help="with --time: LABEL[,LABEL][;...]: the steps over 200 µs if those took no time (each "
                         "group); LABEL-INNER[-INNER]: a label's time less that of labels nested in it")
    ap.add_argument("--kernels", action="store_true",
                    help="split the steps' time into the numba kernels' (dispatch included) and the rest")
    ap.add_argument("--first-only", action="store_true", help="each schema's first instance only")
    ap.add_argument("--sampler-wait", type=float, default=0.0, help="compile all first, print the pid, wait")
    ap.add_argument("--touch-parent", choices=("all", "heap", "anon", "code"),
                    help="with --fork: the child writes every page it shares with the parent first (touch_parent)")
    ap.add_argument("--trim-parent", action="store_true",
                    help="with --fork: malloc_trim(0) in the parent first (its free heap pages no longer shared)")
    ap.add_argument("--src", help="import furca from this tree (a `git worktree` of another commit) instead of "
                                   "this script's: the same tool over two versions, in turn")
    ap.add_argument("--strip", help="KEYWORD[:open|:anchored]: the keyword (string values; a pattern's with or "
                                    "without a final $) removed from every schema before its compile (stripped)")
    ap.add_argument("--populate-rows", action="store_true",
                    help="each grammar's transition table written in advance after its compile (populate_rows)")
    ap.add_argument("--where", action="store_true",
                    help="count the steps by their place in the JSON text (json_position)")
    ap.add_argument("--where-only", help="with --where: describe only the steps whose place holds this text")
    ap.add_argument("--fork", action="store_true",
                    help="each schema in a process forked after the warm-up, as the harness runs it")
    a = ap.parse_args(argv)
    _sample.paths(a.src or _sample.ROOT)
    import schemas
    from engines import WARM_UP_SCHEMA

    from furca.constrain import GrammarCompiler
    from furca.errors import CompileError

    names = _sample.names(a)
    info, tok = _sample.llama3()
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    GrammarCompiler(info).compile_json_schema(WARM_UP_SCHEMA).matcher().fill_bitmask(bm)  # as the harness's parent
    if a.kernels:  # after the warm-up has compiled or loaded every kernel
        time_kernels()
    work = []
    for name in names:
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            d = json.load(f)
        tests = d["tests"][:1] if a.first_only else d["tests"]
        texts = [tok.encode(schemas.instance_text(t["data"], d["schema"]), add_special_tokens=False).ids for t in tests]
        work.append((d["schema"], texts))
    def compiled():
        """Each schema's grammar with its instances' ids, compiled and its first mask
        filled (as the harness does before the instances); the ones furca refuses left out."""
        for schema, texts in work:
            try:
                g = GrammarCompiler(info, cache_size=0).compile_json_schema(stripped(schema, a.strip))
            except CompileError:
                continue
            if a.populate_rows:
                populate_rows(g)
            g.matcher().fill_bitmask(bm)
            yield g, texts

    def walk(grammars, steps):
        """Every instance token by token (then EOS): (ns, first instance, notes) a step."""
        if a.fork:  # each grammar's compile and walk in a child, the caches of earlier ones not seen
            return walk_forked(steps)
        for g, texts in grammars:
            for k, ids in enumerate(texts):
                m = g.matcher()
                for i, t in enumerate(ids + [info.eos_token_id]):
                    notes.clear()
                    spent.clear()
                    calls.clear()
                    in_kernels[:] = [0, 0]
                    by_kernel.clear()
                    auto = g.automaton
                    n0, r0 = len(auto.configs), int(np.count_nonzero(auto.walkable[: len(auto.configs)]))
                    f0 = faults()
                    t0 = clock()
                    m.fill_bitmask(bm)
                    ok = m.accept_token(t)
                    t1 = clock()
                    f1 = faults()
                    made = (len(auto.configs) - n0, int(np.count_nonzero(auto.walkable[: len(auto.configs)])) - r0)
                    steps.append(Step(t1 - t0, k == 0, dict(notes), dict(spent), f1 - f0, dict(calls), made,
                                      tuple(in_kernels), dict(by_kernel),
                                      json_position(tok.decode(ids[:i])) if a.where or a.where_only else None))
                    if not ok:
                        break

    def walk_forked(steps):
        """walk() of each schema in a child forked from this process (which has the
        warm-up's caches, its GC frozen), as the harness runs them; the child's steps
        come back pickled through a pipe (none where it failed)."""
        for k in range(len(work)):

            def child(k=k):
                mine = []
                if a.touch_parent:
                    touch_parent(a.touch_parent)
                work[:] = work[k : k + 1]
                a.fork = False
                walk(compiled(), mine)
                return mine

            steps += in_child(child) or []

    steps = []
    if a.sampler_wait:
        grammars = list(compiled())
        gc.collect()
        gc.freeze()
        print(f"pid {os.getpid()}: start the sampler; walking in {a.sampler_wait:g} s", flush=True)
        time.sleep(a.sampler_wait)
        walk(grammars, steps)
        print(f"{len(steps)} steps walked in {sum(x.ns for x in steps) / 1e9:.2f} s (thread CPU time)")
        return
    instrument()
    if a.time:
        # with --what-if, only its labels are wrapped: each wrapper adds ~1 µs a call to the
        # steps, which would put steps over 200 µs that are not
        only = ({y for g in a.what_if.split(";") for x in g.split(",") for y in x.split("-") if y}
                if a.what_if else None)
        time_calls(a.label_faults, only)
    gc.collect()
    gc.freeze()
    if a.trim_parent:  # glibc: the heap's free pages back to the kernel before the forks
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    walk(compiled(), steps)
    steps.sort(key=lambda x: -x.ns)
    if a.band:
        lo, hi = (float(x) * 1e3 for x in a.band.split(","))
        top = [x for x in steps if lo <= x.ns < hi]
        print(f"{len(steps)} steps (p99 {steps[len(steps) // 100][0] / 1e3:.1f} µs); {len(top)} of "
              f"{a.band} µs, {sum(1 for s in top if s.first)} in first instances")
    else:
        top = steps[: max(1, int(len(steps) * a.top / 100))]
        print(f"{len(steps)} steps; the {len(top)} slowest ({a.top:g}%) from {top[-1][0] / 1e3:.1f} µs, "
              f"{sum(1 for s in top if s.first)} in first instances")
    if a.where_only:
        top = [x for x in top if a.where_only in x.where]
        print(f"  {len(top)} of them at {a.where_only!r}")
    if not top:
        return
    n_f = sum(x.faults for x in top)
    print(f"  page faults   {n_f} in these steps ({n_f / len(top):.1f} a step), {sum(x.faults for x in steps)} in all")
    made = np.array([x.made for x in top])
    print(f"  new states    {made[:, 0].mean():.1f} a step (p50 {np.median(made[:, 0]):.0f}, p90 "
          f"{np.percentile(made[:, 0], 90):.0f}), new rows {made[:, 1].mean():.1f}; over all steps "
          f"{sum(x.made[0] for x in steps) / len(steps):.2f} / {sum(x.made[1] for x in steps) / len(steps):.2f}")
    for label in ("slice search", "any key", "key mask", "new abstract", "tiered"):
        print(f"  {label:13s} in {sum(1 for s in top if s.notes.get(label)):6d}")
    if a.kernels:
        kern = np.array([x.kernels for x in top])
        print(f"  in kernels    {kern[:, 0].mean() / 1e3:.1f} µs a step in {kern[:, 1].mean():.1f} calls, of "
              f"{np.mean([x.ns for x in top]) / 1e3:.1f} µs")
        outside(steps)
    if a.where:
        print("by their place in the text:")
        for w, n in collections.Counter(x.where for x in top).most_common(16):
            sel = [x for x in top if x.where == w]
            ran = collections.Counter(kinds(x.notes) for x in sel).most_common(1)[0]
            print(f"  {n:6d}  {w}: {np.mean([x.ns for x in sel]) / 1e3:.0f} µs, "
                  f"{np.mean([x.made[0] for x in sel]):.1f} new states, {np.mean([x.faults for x in sel]):.1f} faults; "
                  f"most ran {ran[0]} ({ran[1]})")
    print("by what they ran:")
    for combo, n in collections.Counter(kinds(s.notes) for s in top).most_common(12):
        more = ""
        if a.kernels:
            sel = [x for x in top if kinds(x.notes) == combo]
            ns, kern = np.mean([x.ns for x in sel]), np.mean([x.kernels for x in sel], axis=0)
            faulted, made = np.mean([x.faults for x in sel]), np.mean([x.made[0] for x in sel])
            more = (f": {ns / 1e3:.0f} µs a step, {kern[0] / 1e3:.0f} in {kern[1]:.1f} kernel calls, "
                    f"{faulted:.1f} faults, {made:.1f} new states")
        print(f"  {n:6d}  {combo}{more}")
        if a.kernels:
            per = collections.Counter()
            for x in sel:
                per.update(x.by_kernel)
            print("            " + ", ".join(f"{k} {v / len(sel) / 1e3:.0f}" for k, v in per.most_common(4)))
    if a.time:
        total = sum(x.ns for x in top)
        print(f"time (thread CPU, outermost calls): these steps {total / 1e6:.1f} ms, "
              f"all {sum(x.ns for x in steps) / 1e6:.1f} ms")
        for label, _m, _p in TIMED:
            t = sum(x.spent.get(label, 0) for x in top)
            n = sum(1 for x in top if label in x.spent)
            t_all = sum(x.spent.get(label, 0) for x in steps)
            c = sum(x.calls.get(label, 0) for x in top)
            f = sum(x.spent.get((label, "faults"), 0) for x in top)
            print(f"  {label:15s} {t / 1e6:7.1f} ms ({100 * t / total:4.1f}%) in {n:5d} steps, {c:5d} calls, "
                  f"{f:6d} faults | all {t_all / 1e6:7.1f} ms")
        for labels in (a.what_if or "").split(";"):
            if labels:
                what_if(steps, labels.split(","))


def outside(steps) -> None:
    """--kernels: the steps over 200 µs (the p99 target) if each step's time outside the
    numba kernels (Python and the page faults it takes; a kernel's dispatch and unboxing
    count as the kernel's, and the timing wrappers' ~1 µs a call as outside) were a
    fraction of what it is: what the rest of the cold path, compiled with the same
    algorithms, would buy if it ran in that fraction of its time (session 42)."""
    before = sum(1 for x in steps if x.ns > 200e3)
    out = []
    for f in (0.75, 0.5, 0.25, 0.0):
        n = sum(1 for x in steps if x.kernels[0] + f * (x.ns - x.kernels[0]) > 200e3)
        out.append(f"x{f:g} {n} ({100 * (n - before) / max(1, before):+.0f}%)")
    print(f"  outside the kernels x1 / x0.75 / x0.5 / x0.25 / x0: steps over 200 µs {before}, " + ", ".join(out))


def _less(spent, label) -> int:
    """A step's time under label, or under "A-B-C": A's less B's and C's (labels nested in A).
    B's time counts wherever B ran in the step, so a B that also runs outside A's calls
    makes the difference too small (session 49: "key words-key kernel-any key" came out
    below zero, the key kernel and "any key" running outside `words` too)."""
    first, *inner = label.split("-")
    return spent.get(first, 0) - sum(spent.get(x, 0) for x in inner)


def what_if(steps, labels) -> None:
    """--what-if: the steps over 200 µs (the p99 target) if the TIMED functions under
    labels took no time (each step's time less theirs; labels nested in another count
    once, at the outermost; "A-B": A's time less B's, a label nested in it). Only the
    what-ifs' labels are wrapped then."""
    outer = [x for x in labels if not any(y != x and y in labels and x in NESTED.get(y, ()) for y in labels)]
    before = sum(1 for x in steps if x.ns > 200e3)
    after = sum(1 for x in steps if x.ns - sum(_less(x.spent, lb) for lb in outer) > 200e3)
    print(f"what if {' + '.join(labels)} took no time: steps over 200 µs {before} -> {after} "
          f"({100 * (after - before) / max(1, before):+.0f}%)")


if __name__ == "__main__":
    main()
