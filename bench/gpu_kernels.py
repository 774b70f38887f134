"""GPU measurements of furca's Triton kernels and the engine on its two attention backends.

    PYTHONPATH=. python3 bench/gpu_kernels.py --out bench/results/raw/gpu-DATE     # on the GPU machine
    PYTHONPATH=. .venv/bin/python bench/gpu_kernels.py --smoke --out /tmp/x   # CPU, interpreted, tiny

Sections (each writes its part of ``results.json`` as soon as it ends, so a run cut
short keeps what it measured; ``results.md`` is the table):

1. ``copy``: device-to-device copy bandwidth (bytes read + written), the ceiling.
2. ``decode``: decode attention at batch 64, context 4096, 32 query / 8 KV heads, head
   dim 128, bf16, KV slots contiguous and shuffled; bytes that must move (K, V, slot
   indices, q, out) over the median time, against the copy bandwidth (target >= 70%);
   a small sweep of splits / BLOCK_N / stages; the torch backend's gather + SDPA.
3. ``extend``: extend attention on the same heads against
   ``torch.nn.functional.scaled_dot_product_attention`` (K/V contiguous for SDPA,
   paged and shuffled for Triton): plain prefill, and new tokens after a cached prefix.
4. ``engine``: random weights with SmolLM2-135M's config, bf16; decode tokens/s at
   batch 1 and 64, Triton vs torch backend (the difference of two runs that differ
   only in max_new_tokens, so prefill and start-up cancel).
5. ``quant`` (``bench/gpu_quant.py``): the int4 / int8 / fp8 weight-only matmuls at
   M = 1 (weight bytes moved, against the copy bandwidth) and M = 64 (TFLOP/s), both
   against bf16 ``F.linear``.

Times: CUDA events around ``inner`` back-to-back calls (launch gaps amortised), median
of ``reps``; correctness: ``||out - ref|| / ||ref||`` against an fp32 reference.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

SMOKE = "--smoke" in sys.argv
import torch  # noqa: E402

if SMOKE and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before any furca.kernels import

import triton  # noqa: E402

from furca.kernels.decode_attention import decode_attention, decode_attention_ref  # noqa: E402
from furca.kernels.extend_attention import extend_attention, extend_attention_ref  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
IS_CUDA = DEVICE.type == "cuda"
DTYPE = torch.bfloat16 if IS_CUDA else torch.float32  # the interpreter's bf16 math is wrong


# ------------------------------------------------------------------ timing helpers

def sync() -> None:
    if IS_CUDA:
        torch.cuda.synchronize()


def bench_ms(fn, *, inner: int = 10, reps: int = 15, warmup: int = 2) -> float:
    """Median milliseconds of one ``fn()`` call."""
    if not IS_CUDA:
        inner, reps, warmup = 1, 1, 0
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        if IS_CUDA:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / inner)
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


class Results:
    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self.data: dict = {"env": env_info(), "smoke": SMOKE}
        self.md: list[str] = []

    def put(self, section: str, value) -> None:
        self.data[section] = value
        (self.out_dir / "results.json").write_text(json.dumps(self.data, indent=1, default=str))

    def table(self, title: str, header: list[str], rows: list[list]) -> None:
        lines = [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(_fmt(c) for c in r) + " |" for r in rows]
        self.md += lines + [""]
        text = "\n".join(lines)
        print(text + "\n", flush=True)
        env = self.data["env"]
        head = [f"# furca GPU check ({'smoke, ' if SMOKE else ''}{env['device']}, {env['date']})", "",
                f"torch {env['torch']}, triton {env['triton']}, python {env['python']}", ""]
        (self.out_dir / "results.md").write_text("\n".join(head + self.md))


def _fmt(c) -> str:
    if isinstance(c, float):
        return f"{c:.3g}" if abs(c) < 1000 else f"{c:,.0f}"
    return str(c)


def env_info() -> dict:
    info = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "device": "cpu (interpreted)"}
    if IS_CUDA:
        p = torch.cuda.get_device_properties(DEVICE)
        info.update(device=p.name, sms=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 1),
                    capability=f"{p.major}.{p.minor}")
    return info


# ------------------------------------------------------------------ 1. copy bandwidth

def section_copy(res: Results) -> float:
    nbytes = (2 << 30) if IS_CUDA else (8 << 20)
    src = torch.randn(nbytes // 2, device=DEVICE, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = bench_ms(lambda: dst.copy_(src), inner=5, reps=10)
    gbps = 2 * nbytes / ms / 1e6  # read + write, GB/s
    assert torch.equal(dst, src)
    res.put("copy", {"bytes": nbytes, "ms": ms, "GBps": gbps})
    res.table("Device-to-device copy (the bandwidth ceiling)", ["buffer", "ms", "GB/s (read+write)"],
              [[f"{nbytes / 2**30:.2f} GiB", ms, gbps]])
    del src, dst
    return gbps


# ------------------------------------------------------------------ 2. decode attention

def make_pool(num_slots: int, num_kv_heads: int, head_dim: int, dtype, gen):
    """K/V pools as KVCache lays them out: head-major memory, seen slot-major."""
    shape = (num_kv_heads, num_slots, head_dim)
    k = torch.randn(shape, device=DEVICE, dtype=dtype, generator=gen).transpose(0, 1)
    v = torch.randn(shape, device=DEVICE, dtype=dtype, generator=gen).transpose(0, 1)
    return k, v


def section_decode(res: Results, copy_gbps: float) -> None:
    batch, ctx, heads, kv_heads, dim = (64, 4096, 32, 8, 128) if IS_CUDA else (2, 80, 4, 2, 64)
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    num_slots = batch * ctx + 1
    k_buf, v_buf = make_pool(num_slots, kv_heads, dim, DTYPE, gen)
    q = torch.randn(batch, heads, dim, device=DEVICE, dtype=DTYPE, generator=gen)
    kv_indptr = torch.arange(0, batch * ctx + 1, ctx, device=DEVICE, dtype=torch.int64)
    layouts = {
        "contiguous": torch.arange(1, num_slots, device=DEVICE, dtype=torch.int64),
        "shuffled": torch.randperm(num_slots - 1, device=DEVICE, generator=gen) + 1,
    }
    elt = q.element_size()
    need = 2 * batch * ctx * kv_heads * dim * elt + batch * ctx * 8 + 2 * q.numel() * elt  # K, V, indices, q, out
    scaling = dim ** -0.5
    rows, record = [], {"shape": dict(batch=batch, context=ctx, heads=heads, kv_heads=kv_heads, head_dim=dim,
                                      dtype=str(DTYPE)), "bytes_needed": need, "runs": []}

    def run(layout: str, label: str, **kw):
        if kw:
            label += ": splits {num_kv_splits}, BLOCK_N {block_n}, stages {num_stages}".format(**kw)
        idx = layouts[layout]
        fn = lambda: decode_attention(q, k_buf, v_buf, kv_indptr, idx, scaling, max_seq_len=ctx, **kw)  # noqa: E731
        ms = bench_ms(fn)
        gbps = need / ms / 1e6
        entry = {"layout": layout, "config": label, **kw, "ms": ms, "GBps": gbps, "of_copy": gbps / copy_gbps}
        record["runs"].append(entry)
        rows.append([layout, label, ms, gbps, f"{100 * gbps / copy_gbps:.0f}%"])
        return entry

    # correctness at full size first (fp32 reference from the same bf16 inputs)
    for layout, idx in layouts.items():
        out = decode_attention(q, k_buf, v_buf, kv_indptr, idx, scaling, max_seq_len=ctx)
        ref = decode_attention_ref(q, k_buf, v_buf, kv_indptr, idx, scaling)
        record[f"rel_err_{layout}"] = err = rel_err(out, ref)
        assert err < 2e-2, f"decode attention ({layout}) is wrong: rel err {err:.3g}"
    for layout in layouts:
        run(layout, "default")
    sweep = [dict(num_kv_splits=s, block_n=bn, num_stages=st) for s in (1, 2, 4, 8, 16)
             for bn, st in ((32, 2), (64, 2), (64, 3))]
    if not IS_CUDA:
        sweep = [dict(num_kv_splits=2, block_n=16, num_stages=2)]
    best = None
    for kw in sweep:
        try:
            e = run("contiguous", "sweep", **kw)
        except Exception as ex:  # a config the compiler rejects (shared memory) is reported, not fatal
            record["runs"].append({"config": kw, "error": repr(ex)[:200]})
            continue
        if best is None or e["ms"] < best["ms"]:
            best = e
    if best is not None:
        kw = {k: best[k] for k in ("num_kv_splits", "block_n", "num_stages")}
        run("shuffled", "best sweep", **kw)

    # the torch backend's way: gather the slots, then SDPA with the G query heads as queries
    idx = layouts["contiguous"]

    def torch_gather_sdpa():
        kd = k_buf.transpose(0, 1).index_select(1, idx).view(kv_heads, batch, ctx, dim).transpose(0, 1)
        vd = v_buf.transpose(0, 1).index_select(1, idx).view(kv_heads, batch, ctx, dim).transpose(0, 1)
        qd = q.view(batch, kv_heads, heads // kv_heads, dim)
        return torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, scale=scaling)

    try:
        ms = bench_ms(torch_gather_sdpa, inner=2, reps=5)
        record["torch_gather_sdpa_ms"] = ms
        rows.append(["contiguous", "torch backend's way: gather + SDPA", ms, need / ms / 1e6,
                     f"{100 * need / ms / 1e6 / copy_gbps:.0f}%"])
    except Exception as ex:  # the baseline failing must not hide the kernel's numbers
        record["torch_gather_sdpa_error"] = repr(ex)[:300]
    res.put("decode", record)
    res.table(f"Decode attention: batch {batch}, context {ctx}, {heads} q / {kv_heads} KV heads, head dim {dim}, "
              f"{str(DTYPE)[6:]} ({need / 1e9:.2f} GB to move; target >= 70% of copy)",
              ["KV slots", "config", "ms", "GB/s", "of copy"], rows)
    del k_buf, v_buf


# ------------------------------------------------------------------ 3. extend attention

def section_extend(res: Results) -> None:
    from torch.nn.attention.bias import causal_lower_right

    heads, kv_heads, dim = (32, 8, 128) if IS_CUDA else (4, 2, 64)
    shapes = [(4, 0, 4096), (4, 3072, 1024), (16, 512, 512)] if IS_CUDA else [(1, 0, 40), (2, 30, 20)]
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    scaling = dim ** -0.5
    record, rows = [], []
    best_cfg = None
    sweep = [None, (64, 64, 4, 2), (128, 64, 4, 2), (128, 128, 8, 2), (64, 128, 4, 3), (128, 64, 8, 3)] \
        if IS_CUDA else [None]
    for si, (batch, prefix, new) in enumerate(shapes):
        seq = prefix + new
        num_slots = batch * seq + 1
        k_buf, v_buf = make_pool(num_slots, kv_heads, dim, DTYPE, gen)
        kv_indices = torch.randperm(num_slots - 1, device=DEVICE, generator=gen) + 1  # shuffled pool slots
        q = torch.randn(batch * new, heads, dim, device=DEVICE, dtype=DTYPE, generator=gen)
        # the new tokens' K/V: also stored in the pool at their slots, as the backend does
        new_slots = kv_indices.view(batch, seq)[:, prefix:].reshape(-1)
        k_new, v_new = k_buf[new_slots].contiguous(), v_buf[new_slots].contiguous()
        qo_indptr = torch.arange(0, batch * new + 1, new, device=DEVICE, dtype=torch.int64)
        kv_indptr = torch.arange(0, batch * seq + 1, seq, device=DEVICE, dtype=torch.int64)
        args = (q, k_new, v_new, k_buf, v_buf, qo_indptr, kv_indptr, kv_indices, scaling)

        # SDPA on contiguous (B, H, S, D) tensors, GQA expanded (gather excluded from its time)
        slots = kv_indices.view(batch, seq)
        kd = k_buf[slots].permute(0, 2, 1, 3).repeat_interleave(heads // kv_heads, 1).contiguous()
        vd = v_buf[slots].permute(0, 2, 1, 3).repeat_interleave(heads // kv_heads, 1).contiguous()
        qd = q.view(batch, new, heads, dim).transpose(1, 2).contiguous()
        mask = dict(is_causal=True) if prefix == 0 else dict(attn_mask=causal_lower_right(new, seq))
        sdpa = functools.partial(torch.nn.functional.scaled_dot_product_attention, qd, kd, vd, scale=scaling, **mask)
        try:
            want = sdpa().transpose(1, 2).reshape(batch * new, heads, dim)
            sdpa_ms = bench_ms(sdpa, inner=3, reps=7)
        except Exception as ex:  # no SDPA baseline: check against the fp32 reference instead
            record.append({"shape": (batch, prefix, new), "sdpa_error": repr(ex)[:300]})
            want, sdpa_ms = extend_attention_ref(*args), float("nan")
        got = extend_attention(*args, max_qo_len=new)
        err = rel_err(got, want)
        assert err < 2e-2, f"extend attention is wrong at {(batch, prefix, new)}: rel err {err:.3g}"
        flop = 4 * batch * heads * dim * new * (prefix + (new + 1) / 2)
        configs = sweep if si == 0 else [None, best_cfg]  # the first shape picks the best config
        timings = []
        for cfg in dict.fromkeys(configs):
            kw = {} if cfg is None else dict(block_m=cfg[0], block_n=cfg[1], num_warps=cfg[2], num_stages=cfg[3])
            try:
                ms = bench_ms(lambda: extend_attention(*args, max_qo_len=new, **kw), inner=3, reps=7)
            except Exception as ex:
                record.append({"shape": (batch, prefix, new), "config": cfg, "error": repr(ex)[:200]})
                continue
            timings.append((ms, cfg))
            record.append({"shape": (batch, prefix, new), "config": cfg, "ms": ms, "TFLOPs": flop / ms / 1e9,
                           "sdpa_ms": sdpa_ms, "sdpa_TFLOPs": flop / sdpa_ms / 1e9, "rel_err_vs_sdpa": err})
            rows.append([f"B{batch} prefix {prefix} new {new}", "default" if cfg is None else
                         "BLOCK_M/N {} {}, warps {}, stages {}".format(*cfg), ms, flop / ms / 1e9,
                         sdpa_ms, flop / sdpa_ms / 1e9, f"{sdpa_ms / ms:.2f}x"])
        if si == 0:
            best_cfg = min(timings, key=lambda t: t[0])[1] if timings else None
        res.put("extend", record)
        del k_buf, v_buf, kd, vd
    res.table(f"Extend attention vs SDPA: {heads} q / {kv_heads} KV heads, head dim {dim}, {str(DTYPE)[6:]} "
              "(Triton reads the prefix from shuffled pool slots; SDPA gets contiguous, GQA-expanded K/V)",
              ["shape", "Triton config", "Triton ms", "TFLOP/s", "SDPA ms", "SDPA TFLOP/s", "SDPA ms / Triton ms"], rows)


# ------------------------------------------------------------------ 4. engine

def tiny_vocab_tokenizer(vocab: int):
    """A word-level tokenizer with one token per id ("t0", "t1", ...): any id decodes."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = HFTokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="t0", bos_token="t1", unk_token="t0")


def random_model(hf_config: dict, dtype, seed: int = 0):
    from _util import random_weights_model  # bench/, beside this script

    from furca.runtime.tokenizer import Tokenizer

    vocab = hf_config["vocab_size"]
    return random_weights_model(hf_config, Tokenizer(tiny_vocab_tokenizer(vocab)), device=DEVICE, dtype=dtype,
                                seed=seed)


SMOLLM2_135M = {  # HuggingFaceTB/SmolLM2-135M config.json (the parts furca reads)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152, "hidden_size": 576,
    "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "tie_word_embeddings": True,
    "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu",
}
SMOKE_CONFIG = {**SMOLLM2_135M, "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


def section_engine(res: Results) -> None:
    import random

    from furca.runtime.engine import Engine

    loaded = random_model(SMOLLM2_135M if IS_CUDA else SMOKE_CONFIG, DTYPE)
    prompt_len, short, long = (128, 16, 144) if IS_CUDA else (8, 2, 5)
    batches = (1, 64) if IS_CUDA else (1, 3)
    rng = random.Random(0)
    vocab = loaded.config.vocab_size
    record, rows = [], []

    def run(engine, batch: int, new_tokens: int) -> float:
        prompts = [[rng.randrange(2, vocab) for _ in range(prompt_len)] for _ in range(batch)]
        params = {"temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": True}
        t0 = time.perf_counter()
        outs = engine.generate(input_ids=prompts, sampling_params=params)
        sync()
        elapsed = time.perf_counter() - t0
        assert all(len(o.output_ids) == new_tokens for o in outs)
        return elapsed

    for backend in ("triton", "torch"):
        with Engine(loaded, attention_backend=backend, grammar_backend=False, disable_radix_cache=True,
                    max_total_tokens=96 * (prompt_len + long), max_running_requests=64, check_memory=False,
                    log_capacity=False) as engine:
            for batch in batches:
                run(engine, batch, short)  # warm-up: compiles, allocator
                t_short = min(run(engine, batch, short) for _ in range(2))
                t_long = min(run(engine, batch, long) for _ in range(2))
                tps = batch * (long - short) / max(t_long - t_short, 1e-9)
                record.append({"backend": backend, "batch": batch, "prompt_len": prompt_len,
                               "decode_steps": long - short, "t_short_s": t_short, "t_long_s": t_long,
                               "decode_tokens_per_s": tps})
                rows.append([backend, batch, prompt_len, long - short, t_short, t_long, tps])
                res.put("engine", record)
    # the two backends agree on a greedy continuation (random weights: compare the first tokens)
    agree = _greedy_agreement(loaded, prompt_len, vocab)
    res.put("engine", record + [{"greedy_agreement": agree}])
    res.table(f"Engine decode, random weights with SmolLM2-135M's config ({str(DTYPE)[6:]}): tokens/s = "
              f"batch x steps / (t_long - t_short); greedy first-{agree['tokens']} tokens agree: {agree['agree']}",
              ["backend", "batch", "prompt", "steps", "t_short s", "t_long s", "decode tok/s"], rows)


def _greedy_agreement(loaded, prompt_len: int, vocab: int) -> dict:
    import random

    from furca.runtime.engine import Engine

    rng = random.Random(7)
    prompts = [[rng.randrange(2, vocab) for _ in range(prompt_len)] for _ in range(4)]
    n = 8
    outs = {}
    for backend in ("triton", "torch"):
        with Engine(loaded, attention_backend=backend, grammar_backend=False, max_total_tokens=8192,
                    check_memory=False, log_capacity=False) as engine:
            got = engine.generate(input_ids=prompts, sampling_params={"temperature": 0, "max_new_tokens": n,
                                                                      "ignore_eos": True})
            outs[backend] = [o.output_ids for o in got]
    same = sum(a == b for a, b in zip(outs["triton"], outs["torch"]))
    return {"tokens": n, "agree": f"{same}/{len(prompts)} prompts", "triton": outs["triton"], "torch": outs["torch"]}


# ------------------------------------------------------------------ main

SECTIONS = ("copy", "decode", "extend", "engine", "quant", "kv_fp8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes; on CPU the kernels run interpreted")
    ap.add_argument("--out", type=Path, default=Path("bench/results/raw") / f"gpu-{time.strftime('%Y-%m-%d')}")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
    args = ap.parse_args()
    if not IS_CUDA and not args.smoke:
        sys.exit("no CUDA device: run with --smoke (interpreted, tiny shapes)")
    wanted = [s for s in args.sections.split(",") if s]
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        sys.exit(f"unknown sections {sorted(unknown)}; known: {SECTIONS}")
    res = Results(args.out)
    print(json.dumps(res.data["env"]), flush=True)
    copy_gbps = None
    failed = []
    for name in wanted:
        t0 = time.perf_counter()
        try:
            torch.manual_seed(0)
            with torch.inference_mode():
                if name == "copy":
                    copy_gbps = section_copy(res)
                elif name == "decode":
                    section_decode(res, copy_gbps or section_copy(res))
                elif name == "extend":
                    section_extend(res)
                elif name == "quant":
                    from gpu_quant import section_quant  # bench/, beside this script

                    section_quant(res, copy_gbps or section_copy(res), bench_ms=bench_ms, rel_err=rel_err,
                                  device=DEVICE, dtype=DTYPE)
                elif name == "kv_fp8":
                    from gpu_kv_fp8 import section_kv_fp8  # bench/, beside this script

                    section_kv_fp8(res, copy_gbps or section_copy(res), bench_ms=bench_ms, rel_err=rel_err,
                                   device=DEVICE)
            if name == "engine":
                section_engine(res)
        except Exception as ex:  # keep going: the other sections still report
            import traceback

            traceback.print_exc()
            failed.append(name)
            res.put(f"{name}_error", repr(ex)[:2000])
        print(f"[{name}: {time.perf_counter() - t0:.1f} s]", flush=True)
        if IS_CUDA:
            torch.cuda.empty_cache()
    print(f"results in {args.out}/results.md and results.json", flush=True)
    if failed:
        sys.exit(f"sections failed: {failed}")


if __name__ == "__main__":
    main()
