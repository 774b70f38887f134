"""Which of its parent's pages a forked child copies while it walks, and what lies on them.

    .venv/bin/python bench/constrain_cow_pages.py [--schemas 100] [--window compile|walk|both]

The shared harness forks a child per schema after the engine's warm-up; a child's first
write to each page it shares with the parent is a copy-on-write fault (~2.5 µs here,
`bench/page_fault_cost.py`), and CPython writes to what it reads (reference counts,
3.11's inline caches). Per schema of the harness's stratified sample (every k-th, for
--schemas of them), in a child forked as the harness forks it: the pages of the writable
mappings present and shared before the window and private after it (`/proc/self/pagemap`:
bit 63 present, bit 56 exclusively mapped) — the window being the compile and first mask
(`compile`), the first instance's steps (`walk`, the default) or both. Each copied page
is named by its mapping and by the parent objects on it: every object the parent's
collector tracks and their referents (`gc.get_objects()`, `gc.get_referents`), by
address and `sys.getsizeof`; "<no object>" is a page none of those overlaps (free chunks
the child's allocations reuse, list and dict buffers, array data). A page counts once
for each kind of object on it, so the kinds sum past the pages.

--around MODULE.ATTR (e.g. core_rows.pack) counts only the pages copied inside that
function's calls in the window (the compile and first mask with --window compile).

--by owner names a page's objects by the module global that reaches them (owner_map)
instead of their type. Session 42 (`--window compile --schemas 50 --by owner`, 861 pages a
child): no owner stands out; furca's classes (their methods and code) 20-42 pages a child
each, numba's dispatch structures behind the kernels ~75, `sys.path_importer_cache`'s
reach 48, objects no global reaches (tuples, dicts, strings, ints, IR nodes) ~390 (a page
counted once for each on it), no object 141.

Session 41 (`--schemas 100`): the first instances' walks copied 17,536 pages (175 a child):
glibc's heap 11,655, anonymous mappings (pymalloc's arenas) 5,739, numpy's data 74,
libpython's 68; 8,616 of them hold no tracked object, 3,604 a code object. The compile and
first mask (`--window compile`): 87,865 (879 a child: the forked TTFM's faults), anonymous
56,901, the heap 26,373, libpython 4,152; strings on 49,297 of them, tuples 26,739, code
objects 26,198 (bench/results/constrain.md).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import gc
import json
import os
import sys
import types

import numpy as np
from _forked import in_child  # this script's folder is on the path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(ROOT, "..", "shared", "bench", "grammar")


def writable_ranges():
    """(lo, hi, name) of the process's private writable mappings, the stack left out."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            m = line.split()
            name = m[5] if len(m) > 5 else ""
            if m[1] != "rw-p" or name.startswith("[st"):
                continue
            lo, hi = (int(x, 16) for x in m[0].split("-"))
            out.append((lo, hi, name or "anonymous"))
    return out


class PageFlags:
    """Snapshots of the pagemap entries of fixed ranges into buffers made up front (a
    snapshot allocates nothing, so it copies no page of its own)."""

    def __init__(self, ranges):
        self.ranges = ranges
        self._f = open("/proc/self/pagemap", "rb", buffering=0)  # kept open for the child's life
        self.before = [np.zeros((hi - lo) // 4096, np.uint64) for lo, hi, _ in ranges]
        self.after = [x.copy() for x in self.before]
        self.take(self.after)  # the pages these reads touch are written once here
        self.take(self.before)

    def take(self, bufs):
        for (lo, _hi, _n), arr in zip(self.ranges, bufs):
            self._f.seek(lo // 4096 * 8)
            self._f.readinto(memoryview(arr).cast("B"))

    def copied(self):
        """(range index, page index) of the pages present and shared before, exclusive after."""
        one = np.uint64(1)
        for r, (x0, x1) in enumerate(zip(self.before, self.after)):
            shared = ((x0 >> np.uint64(63)) & one).astype(bool) & ~((x0 >> np.uint64(56)) & one).astype(bool)
            mine = ((x1 >> np.uint64(56)) & one).astype(bool)
            for p in np.flatnonzero(shared & mine).tolist():
                yield r, p


def label(o) -> str:
    t = type(o)
    if t is types.CodeType:
        return "code object"
    if t is types.FunctionType:
        return "function"
    mod, name = t.__dict__.get("__module__", "builtins"), getattr(t, "__qualname__", t.__name__)
    return name if not isinstance(mod, str) or mod == "builtins" else f"{mod}.{name}"


def kinds_on(a0, addrs, objs, own=None) -> set:
    """The kinds of the parent objects (object_map) that overlap the page at a0, or with
    own (owner_map) their owners ("<unowned KIND>" for an object no global reaches)."""
    kinds = set()
    j = bisect.bisect_right(addrs, a0) - 1
    first = j if j >= 0 and addrs[j] + objs[addrs[j]][0] > a0 else j + 1
    j += 1
    while j < len(addrs) and addrs[j] < a0 + 4096:
        j += 1
    for x in addrs[first:j]:
        kinds.add(objs[x][1] if own is None else own.get(x, f"<unowned {objs[x][1]}>"))
    return kinds


def object_map():
    """Sorted addresses and {address: (size, label)} of the parent's tracked objects and
    their referents."""
    seen: dict[int, tuple] = {}
    todo = list(gc.get_objects())
    while todo:
        o = todo.pop()
        i = id(o)
        if i in seen:
            continue
        try:
            size = sys.getsizeof(o)
        except Exception:  # noqa: BLE001 - an extension type that refuses: counted as 16 bytes
            size = 16
        seen[i] = (size, label(o))
        todo.extend(gc.get_referents(o))
    return sorted(seen), seen


def owner_map(objs, roots=()):
    """--by owner: {address: "module.global"} for the objects reachable from a module's
    globals within 6 references (breadth first; first the attributes of the roots,
    (label, object) pairs such as the tokenizer info the harness holds in a local, each
    attribute named "label.attribute", then furca's modules; a class owns its methods
    and their code, a kernel's dispatcher numba's structures behind it): which part of
    the parent a copied page belongs to, roughly (an object reachable from two globals
    counts for the first met)."""
    own = {}
    frontier = []
    for label, root in roots:
        own[id(root)] = label
        frontier.append(root)
        for k, v in list(vars(root).items()):
            if id(v) not in own:
                own[id(v)] = f"{label}.{k}"
                frontier.append(v)
    mods = sorted(((n, m) for n, m in list(sys.modules.items()) if m is not None),
                  key=lambda x: (not x[0].startswith("furca"), x[0]))
    for mname, mod in mods:
        try:
            d = vars(mod)
        except TypeError:
            continue
        for k, v in list(d.items()):
            i = id(v)
            if i not in own:
                own[i] = f"{mname}.{k}"
                frontier.append(v)
    for _depth in range(6):
        nxt = []
        for o in frontier:
            lab = own[id(o)]
            try:
                refs = gc.get_referents(o)
            except Exception:
                continue
            for r in refs:
                if type(r) is types.ModuleType:
                    continue
                i = id(r)
                if i not in own:
                    own[i] = lab
                    nxt.append(r)
        frontier = nxt
    return own


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schemas", type=int, default=100, help="every k-th schema of the 500 sample, this many")
    ap.add_argument("--window", choices=("compile", "walk", "both"), default="walk")
    ap.add_argument("--around", help="MODULE.ATTR[.ATTR] of furca.constrain: only the pages copied inside "
                                     "that function's calls within the window (each call's own, summed)")
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "maskbench-dev"))
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--by", choices=("kind", "owner"), default="kind",
                    help="name a copied page's objects by their type, or by the module global that reaches them")
    a = ap.parse_args(argv)
    sys.path[:0] = [ROOT, HARNESS, os.path.join(ROOT, "tests")]
    import schemas
    from constrain.tokenizers_cache import tokenizer_json
    from engines import WARM_UP_SCHEMA
    from tokenizers import Tokenizer

    from furca.constrain import GrammarCompiler, TokenizerInfo
    from furca.errors import CompileError

    names = schemas.stratified_sample(schemas.list_files(a.data), 500)[:: max(1, 500 // a.schemas)]
    path, eos = tokenizer_json("llama3_1")
    tok = Tokenizer.from_file(str(path))
    info = TokenizerInfo.from_tokenizer_json(path, eos_token=eos)
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    GrammarCompiler(info).compile_json_schema(WARM_UP_SCHEMA).matcher().fill_bitmask(bm)  # as the harness's parent
    work = []
    for name in names:
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            d = json.load(f)
        ids = tok.encode(schemas.instance_text(d["tests"][0]["data"], d["schema"]), add_special_tokens=False).ids
        work.append((d["schema"], ids))
    gc.collect()
    addrs, objs = object_map()
    own = owner_map(objs, [("info", info)]) if a.by == "owner" else None
    gc.freeze()  # as the harness does before its forks
    by_map: collections.Counter = collections.Counter()
    by_kind: collections.Counter = collections.Counter()
    children = 0
    def child(schema, ids):
        """(pages by mapping, pages by kind of object) copied in the window (with --around,
        inside that function's calls in it), or None where furca refuses the schema."""
        flags = PageFlags(writable_ranges())
        inside = None
        if a.around:
            from _wrap import wrap

            inside = set()

            def make(f):
                def g(*args, **kw):
                    flags.take(flags.before)
                    try:
                        return f(*args, **kw)
                    finally:
                        flags.take(flags.after)
                        inside.update(flags.copied())

                return g

            wrap(*a.around.split(".", 1), make)
        elif a.window != "walk":
            flags.take(flags.before)
        try:
            g = GrammarCompiler(info, cache_size=0).compile_json_schema(schema)
        except CompileError:
            return None
        m = g.matcher()
        m.fill_bitmask(bm)
        if a.window == "walk" and inside is None:
            flags.take(flags.before)
        if a.window != "compile":
            for t in ids + [info.eos_token_id]:
                m.fill_bitmask(bm)
                if not m.accept_token(t):
                    break
        if inside is None:
            flags.take(flags.after)
        mine_map, mine_kind = collections.Counter(), collections.Counter()
        for k, p in inside if inside is not None else flags.copied():
            lo, _hi, mapping = flags.ranges[k]
            mine_map[mapping.rsplit("/", 1)[-1]] += 1
            mine_kind.update(kinds_on(lo + p * 4096, addrs, objs, own) or ["<no object>"])
        return mine_map, mine_kind

    for schema, ids in work:
        got = in_child(lambda: child(schema, ids))  # noqa: B023 - called before the loop moves on
        if got is not None:
            by_map.update(got[0])
            by_kind.update(got[1])
            children += 1
    total = sum(by_map.values())
    print(f"{children} children, window {a.window}: {total} pages copied ({total / max(1, children):.0f} a child)")
    print("by mapping: " + ", ".join(f"{k} {v}" for k, v in by_map.most_common(8)))
    print(f"by the parent objects on them, by {a.by} (a page counts for each {a.by} on it):")
    for k, v in by_kind.most_common(a.top):
        print(f"  {v:7d}  {k}")


if __name__ == "__main__":
    main()
