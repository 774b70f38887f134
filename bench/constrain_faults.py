"""What a forked child's first compile writes of its parent's memory (the shared harness's
time to first mask is mostly that: bench/grammar_compare.sh forks one child per schema).

    .venv/bin/python bench/constrain_faults.py [--sample 500] [--every 10]

The parent loads the Llama-3.1 tokenizer, makes a GrammarCompiler (which makes the shared
lexeme masks), compiles and masks the harness's warm-up schema, collects and freezes the
GC, as the harness's parent does. For every `--every`-th schema of the harness's sample, a
child forked from it compiles the schema and fills the first mask, and reports:

- its minor page faults (getrusage), and the pages that were present and shared with the
  parent before the compile and are its own after it (copy-on-write: /proc/self/pagemap's
  "exclusively mapped" bit), by mapping (anonymous memory: obmalloc arenas and numpy;
  [heap]: malloc'd objects such as code objects; libpython's data: its static objects);
- the Python functions the compile ran (a profile hook, in a second child) and the
  distinct pages of their code objects (each call writes its code object: the frame's
  reference and the adaptive bytecode's counters);
- a control: the same child after first allocating and freeing ~200k small objects (the
  free slots of the parent's obmalloc pools then lie in pages the child already owns), to
  tell the writes to existing objects from allocations into shared pools.

A {"type": "string"} schema is included as the floor: what any first compile costs.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import resource
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(ROOT, "..", "shared", "bench", "grammar")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _ranges():
    """(start, end, name) of the writable mappings."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if "w" not in parts[1]:
                continue
            a, b = (int(x, 16) for x in parts[0].split("-"))
            name = parts[5] if len(parts) > 5 else ""
            out.append((a, b, "anonymous" if not name else os.path.basename(name).split(".")[0]))
    return out


def _pagemap(ranges, buf):
    """The pagemap entries of the ranges, read into buf (allocated beforehand: reading
    must not allocate in the pages it looks at)."""
    fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    try:
        off = 0
        for a, b, _name in ranges:
            n = (b - a) // PAGE
            os.preadv(fd, [memoryview(buf[off:off + n]).cast("B")], (a // PAGE) * 8)
            off += n
    finally:
        os.close(fd)


def _child(compile_one, schema, wfd, prefill=False, trace=False):
    if prefill:  # free slots of the shared pools made the child's own before the clock
        junk = [tuple(range(1000, 1000 + k % 24)) for k in range(150_000)]
        junk += [[1] * (k % 16) for k in range(50_000)]
        del junk
    ranges = _ranges()
    n = sum((b - a) // PAGE for a, b, _ in ranges)
    before, after = np.ones(n, np.uint64), np.ones(n, np.uint64)
    _pagemap(ranges, before)
    codes = set()
    if trace:
        sys.setprofile(lambda frame, event, arg: codes.add(frame.f_code) if event == "call" else None)
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    try:
        compile_one(schema)
    except Exception:  # noqa: BLE001 - a compile error writes what it wrote too
        pass
    f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    sys.setprofile(None)
    _pagemap(ranges, after)
    shared = ((before >> np.uint64(63)) & np.uint64(1)).astype(bool) & ~((before >> np.uint64(56)) & np.uint64(1)).astype(bool)
    own = ((after >> np.uint64(56)) & np.uint64(1)).astype(bool)
    copied = collections.Counter()
    off = 0
    for a, b, name in ranges:
        k = (b - a) // PAGE
        copied[name] += int((shared[off:off + k] & own[off:off + k]).sum())
        off += k
    out = {"faults": f1 - f0, "copied": dict(copied)}
    if trace:
        out["functions"] = len(codes)
        out["code_pages"] = len({id(c) // PAGE for c in codes})
    os.write(wfd, json.dumps(out).encode())
    os._exit(0)


def _forked(compile_one, schema, **kw):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _child(compile_one, schema, w, **kw)
    os.close(w)
    chunks = []
    while True:
        c = os.read(r, 1 << 16)
        if not c:
            break
        chunks.append(c)
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=500)
    ap.add_argument("--every", type=int, default=10, help="fork for every N-th schema of the sample")
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "maskbench-dev"))
    a = ap.parse_args(argv)
    sys.path.insert(0, HARNESS)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import schemas
    from constrain.tokenizers_cache import tokenizer_json
    from engines import WARM_UP_SCHEMA

    from furca.constrain import GrammarCompiler, TokenizerInfo

    path, eos = tokenizer_json("llama3_1")
    info = TokenizerInfo.from_tokenizer_json(str(path), eos_token=eos)
    compiler = GrammarCompiler(info)
    bitmask = np.zeros((1, info.num_words), dtype=np.int32)

    def compile_one(schema):
        compiler.compile_json_schema(schema).matcher().fill_bitmask(bitmask)

    compile_one(WARM_UP_SCHEMA)
    names = schemas.stratified_sample(schemas.list_files(a.data), a.sample)[:: a.every]
    docs = [("string", {"type": "string"})]
    for n in names:
        with open(os.path.join(a.data, n)) as f:
            docs.append((n, json.load(f)["schema"]))
    gc.collect()
    gc.freeze()
    rows = {"floor": [], "sample": []}
    for i, (name, schema) in enumerate(docs):
        plain = _forked(compile_one, schema)
        traced = _forked(compile_one, schema, trace=True)
        pre = _forked(compile_one, schema, prefill=True)
        rows["floor" if i == 0 else "sample"].append((plain, traced, pre))
    for label, rs in rows.items():
        plain = [r[0] for r in rs]
        by_map = collections.Counter()
        for p in plain:
            by_map.update(p["copied"])
        print(f"{label} ({len(rs)} schemas): faults mean {np.mean([p['faults'] for p in plain]):.0f}, "
              f"copied pages mean {np.mean([sum(p['copied'].values()) for p in plain]):.0f} "
              "(" + ", ".join(f"{k} {v / len(rs):.0f}" for k, v in by_map.most_common(4)) + "); "
              f"functions run {np.mean([r[1]['functions'] for r in rs]):.0f}, their code objects on "
              f"{np.mean([r[1]['code_pages'] for r in rs]):.0f} pages; faults after a prefill of the pools "
              f"{np.mean([r[2]['faults'] for r in rs]):.0f}")


if __name__ == "__main__":
    main()
