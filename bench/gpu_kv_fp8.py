"""Section ``kv_fp8`` of ``bench/gpu_kernels.py``: decode attention over an fp8 (e4m3)
KV pool against the same pool in bf16.

Shape: batch 64, context 4096, 32 query / 8 KV heads, head dim 128 (the decode
section's). The fp8 pool holds ``to_e4m3`` of the bf16 pool's values, so both read the
same keys up to e4m3 rounding. Figures per pool: median ms, the bytes that must move
(K and V at 2 or 1 bytes per element, indices, q and out) over that time against the
copy bandwidth, the speed-up of fp8 over bf16, and two errors: the fp8 run against the
fp32 reference over the fp8 pool (the kernel's own error: bf16 tolerance) and against
the bf16 run (what the e4m3 rounding of K/V costs). Needs sm_89+ (Triton has no e4m3
before): on older GPUs the section reports that and measures nothing. ``--smoke`` on a
CPU: tiny shapes, interpreted, fp16 queries (the interpreter's bf16 math is wrong).
"""

from __future__ import annotations

import torch

from furca.kernels.decode_attention import decode_attention, decode_attention_ref
from furca.kernels.fp8 import to_e4m3


def section_kv_fp8(res, copy_gbps: float, *, bench_ms, rel_err, device) -> None:
    is_cuda = device.type == "cuda"
    if is_cuda and torch.cuda.get_device_capability(device) < (8, 9):
        res.put("kv_fp8", {"skipped": f"sm_{''.join(map(str, torch.cuda.get_device_capability(device)))}: "
                                      "fp8 (e4m3) needs sm_89+"})
        return
    batch, ctx, heads, kv_heads, dim = (64, 4096, 32, 8, 128) if is_cuda else (2, 80, 4, 2, 64)
    q_dtype = torch.bfloat16 if is_cuda else torch.float16
    gen = torch.Generator(device=device).manual_seed(3)
    num_slots = batch * ctx + 1
    shape = (kv_heads, num_slots, dim)
    pools = {"bf16" if is_cuda else "fp16": tuple(
        torch.randn(shape, device=device, dtype=q_dtype, generator=gen).transpose(0, 1) for _ in range(2))}
    pools["fp8 e4m3"] = tuple(to_e4m3(buf) for buf in next(iter(pools.values())))
    q = torch.randn(batch, heads, dim, device=device, dtype=q_dtype, generator=gen)
    kv_indptr = torch.arange(0, batch * ctx + 1, ctx, device=device, dtype=torch.int64)
    idx = torch.randperm(num_slots - 1, device=device, generator=gen) + 1  # shuffled slots, as after serving a while
    scaling = dim ** -0.5
    record, rows, outs = {"shape": dict(batch=batch, context=ctx, heads=heads, kv_heads=kv_heads, head_dim=dim,
                                        q_dtype=str(q_dtype))}, [], {}
    for label, (k_buf, v_buf) in pools.items():
        assert k_buf.stride() == v_buf.stride() and k_buf.stride(2) == 1, "pool layout is KVCache's"
        need = 2 * batch * ctx * kv_heads * dim * k_buf.element_size() + batch * ctx * 8 + 2 * q.numel() * 2
        outs[label] = decode_attention(q, k_buf, v_buf, kv_indptr, idx, scaling, max_seq_len=ctx)
        err = rel_err(outs[label], decode_attention_ref(q, k_buf, v_buf, kv_indptr, idx, scaling))
        assert err < 2e-2, f"decode attention over the {label} pool is wrong: rel err {err:.3g}"
        ms = bench_ms(lambda: decode_attention(q, k_buf, v_buf, kv_indptr, idx, scaling, max_seq_len=ctx))
        gbps = need / ms / 1e6
        record[label] = {"ms": ms, "bytes_needed": need, "GBps": gbps, "of_copy": gbps / copy_gbps, "rel_err": err}
        rows.append([label, ms, need / 1e9, gbps, f"{100 * gbps / copy_gbps:.0f}%", err])
    base, fp8 = (record[name] for name in pools)
    record["speedup"] = base["ms"] / fp8["ms"]
    record["fp8_vs_half_rel_err"] = rel_err(outs["fp8 e4m3"], outs[next(iter(pools))])
    rows[-1] += [f"{record['speedup']:.2f}x", record["fp8_vs_half_rel_err"]]
    rows[0] += ["1.00x", 0.0]
    res.put("kv_fp8", record)
    res.table(f"Decode attention over an fp8 (e4m3) vs a {str(q_dtype)[6:]} KV pool: batch {batch}, context {ctx}, "
              f"{heads} q / {kv_heads} KV heads, head dim {dim}, {str(q_dtype)[6:]} queries, shuffled slots",
              ["pool", "ms", "GB to move", "GB/s", "of copy", "rel err vs fp32 ref", "speed-up",
               "rel err vs half pool"], rows)
