"""Experiment: a forked child populates (MADV_POPULATE_WRITE) the pages a probe child's
first compile copied, before its own compile; TTFM with and without, alternating."""
import ctypes, gc, json, os, resource, sys, time
import numpy as np
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HARNESS = os.path.join(ROOT, "..", "shared", "bench", "grammar")
sys.path.insert(0, HARNESS); sys.path.insert(0, ROOT); sys.path.insert(0, ROOT + "/bench")
import schemas, toks
from engines import WARM_UP_SCHEMA, alloc_bitmask, make_engine
from constrain_ttfm import OTHER
PAGE = 4096
libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

def maps():
    out = []
    for l in open("/proc/self/maps"):
        p = l.split()
        if "w" in p[1] and "p" in p[1]:
            name = p[5] if len(p) > 5 else ""
            if name in ("[stack]", "[vvar]", "[vdso]"): continue
            lo, hi = (int(x, 16) for x in p[0].split("-"))
            out.append((lo, hi))
    return out

def exclusive(ms):
    pm = open("/proc/self/pagemap", "rb", buffering=0)
    res = {}
    for lo, hi in ms:
        pm.seek(lo // PAGE * 8)
        a = np.frombuffer(pm.read((hi - lo) // PAGE * 8), dtype=np.uint64)
        res[(lo, hi)] = ((a >> 56) & 1 & (a >> 63)).astype(bool)
    pm.close()
    return res

def faults(): return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def probe(engine, bm, probe_schemas):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        ms = maps()
        e0 = exclusive(ms)
        for s in probe_schemas:
            engine.fill(engine.new_matcher(engine.compile("json_schema", s)), bm)
        e1 = exclusive(ms)
        pages = []
        for k in ms:
            lo = k[0]
            new = np.nonzero(e1[k] & ~e0[k])[0]
            pages.extend((lo + int(i) * PAGE) for i in new)
        os.write(w, json.dumps(pages).encode()); os._exit(0)
    os.close(w)
    out = b""
    while True:
        b = os.read(r, 1 << 16)
        if not b: break
        out += b
    os.waitpid(pid, 0)
    pages = sorted(json.loads(out))
    ranges = []
    for p in pages:
        if ranges and ranges[-1][1] == p: ranges[-1][1] = p + PAGE
        else: ranges.append([p, p + PAGE])
    return pages, ranges

def child(engine, schema, bm, ranges):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        f0 = faults(); t0 = time.perf_counter_ns()
        bad = 0
        if ranges is not None:
            for lo, hi in ranges:
                if libc.madvise(lo, hi - lo, 23) != 0: bad += 1
        t1 = time.perf_counter_ns()
        try:
            engine.fill(engine.new_matcher(engine.compile("json_schema", schema)), bm); ok = True
        except Exception: ok = False
        t2 = time.perf_counter_ns()
        os.write(w, json.dumps([(t2 - t0) / 1e6, (t1 - t0) / 1e6, faults() - f0, ok, bad]).encode()); os._exit(0)
    os.close(w)
    out = os.read(r, 4096); os.close(r); os.waitpid(pid, 0)
    return json.loads(out)

def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    tok = toks.load("llama3")
    e = make_engine("furca", furca_path=ROOT); e.setup(tok)
    bm = alloc_bitmask(tok.vocab_size)
    e.fill(e.new_matcher(e.compile("json_schema", WARM_UP_SCHEMA)), bm)
    d = os.path.join(ROOT, "..", "shared", "data", "maskbench-dev")
    names = schemas.stratified_sample(schemas.list_files(d), 500)[::max(1, 500 // n)]
    gc.collect(); gc.freeze()
    pages, ranges = probe(e, bm, [OTHER, WARM_UP_SCHEMA])
    print("probe pages", len(pages), "ranges", len(ranges))
    A, B, P, FA, FB = [], [], [], [], []
    for i, nm in enumerate(names):
        s = json.load(open(os.path.join(d, nm)))["schema"]
        order = (None, ranges) if i % 2 == 0 else (ranges, None)
        for rg in order:
            ms, pop, f, ok, bad = child(e, s, bm, rg)
            if not ok: continue
            if rg is None: A.append(ms); FA.append(f)
            else: B.append(ms); P.append(pop); FB.append(f)
    med = lambda x: float(np.median(x))
    print(f"plain     TTFM p50 {med(A):.2f} ms mean {np.mean(A):.2f}  faults p50 {med(FA):.0f}")
    print(f"populated TTFM p50 {med(B):.2f} ms mean {np.mean(B):.2f}  (populate itself p50 {med(P):.2f} ms) faults p50 {med(FB):.0f}")
    print("paired median ratio", med(np.array(B[:len(A)]) / np.array(A[:len(B)])))
main()
