"""Section ``quant`` of ``bench/gpu_kernels.py``: the weight-only quantized matmuls of
``furca/kernels/dequant_matmul.py`` against ``F.linear`` on the bf16 weight.

Shapes: Llama-3-8B's fused gate/up projection (N 28672, K 4096) at M = 1 (decode) and
M = 64 (a prefill chunk), and its q/o projection (4096 x 4096) at M = 1. Layouts:
int4 group 128 and group 32 (fp16 scales and zeros, as GGUF's Q4_1 stores them), int8
per-channel, fp8 e4m3 per-channel. Figures: at M = 1, the bytes that must move (packed
weight, x, out) over the median time, against the copy bandwidth; at M = 64, TFLOP/s;
both against bf16 ``F.linear`` (``bf16 ms / ms``). Each timed call reads one of several
copies of the weight in turn, so the weights (int4 29k x 4k: 59 MB, about the H200's
L2) come from HBM, not L2. A small sweep of split-K / BLOCK_N on int4 g128 at M = 1,
4096 x 4096 (64 tiles of 16 x 64: the shape where splitting K decides how many SMs
stream weights; the default splits 4 ways on 132 SMs).
"""

from __future__ import annotations

import dataclasses
import itertools

import torch

from furca.kernels.dequant_matmul import (
    dequantize, fp8_matmul, int4_matmul, int8_matmul, pack_fp8, pack_int4, pack_int8, quantize_fp8)
from furca.runtime.quant.groups import QuantGroups

ROTATE_BYTES = 512 << 20  # weight copies cycled per call: well past any L2
LAYOUTS = (("int4 g128", "int4", 128), ("int4 g32", "int4", 32), ("int8 per-channel", "int8", None),
           ("fp8 per-channel", "fp8", None))


def _pack(kind: str, group: int | None, n: int, k: int, device, gen):
    if kind == "fp8":
        return pack_fp8(*quantize_fp8(torch.randn(n, k, device=device, generator=gen) * 0.02)), fp8_matmul
    g = group or k
    if kind == "int4":
        codes = torch.randint(0, 16, (n, k), device=device, generator=gen, dtype=torch.uint8)
        offset = -torch.rand(n, k // g, device=device, generator=gen) * 0.05
    else:
        codes = torch.randint(-127, 128, (n, k), device=device, generator=gen).to(torch.int8)
        offset = None
    scale = torch.rand(n, k // g, device=device, generator=gen) * 0.005 + 0.001
    groups = QuantGroups(codes, scale, offset, g, 4 if kind == "int4" else 8, kind)
    if kind == "int4":
        return pack_int4(groups, scale_dtype=torch.float16), int4_matmul
    return pack_int8(groups), int8_matmul


def _clone(packed):
    fresh = {f: getattr(packed, f) for f in ("qweight", "scale", "zero")}
    return dataclasses.replace(packed, **{f: None if t is None else t.clone() for f, t in fresh.items()})


def _copies(make, nbytes: int, is_cuda: bool) -> itertools.cycle:
    count = max(2, min(8, -(-ROTATE_BYTES // max(nbytes, 1)))) if is_cuda else 1
    return itertools.cycle([make() for _ in range(count)])


def section_quant(res, copy_gbps: float, *, bench_ms, rel_err, device, dtype) -> None:
    is_cuda = device.type == "cuda"
    cases = [(28672, 4096, 1), (28672, 4096, 64), (4096, 4096, 1)] if is_cuda else [(64, 128, 1), (64, 128, 7)]
    gen = torch.Generator(device=device).manual_seed(2)
    record, rows = [], []
    for n, k, m in cases:
        x = torch.randn(m, k, device=device, dtype=dtype, generator=gen)
        w = torch.randn(n, k, device=device, dtype=dtype, generator=gen) * 0.02
        dense = _copies(lambda: w.clone(), w.numel() * w.element_size(), is_cuda)
        base_ms = bench_ms(lambda: torch.nn.functional.linear(x, next(dense)))
        flop = 2 * m * n * k
        io_bytes = (m * k + m * n) * x.element_size()

        def add(label, ms, nbytes, err, **extra):
            gbps = (nbytes + io_bytes) / ms / 1e6
            record.append({"n": n, "k": k, "m": m, "layout": label, "ms": ms, "weight_bytes": nbytes, "GBps": gbps,
                           "of_copy": gbps / copy_gbps, "TFLOPs": flop / ms / 1e9, "bf16_ms": base_ms,
                           "rel_err": err, **extra})
            rows.append([f"{n}x{k}", m, label, ms, gbps, f"{100 * gbps / copy_gbps:.0f}%", flop / ms / 1e9,
                         f"{base_ms / ms:.2f}x", err])

        add(f"{str(dtype)[6:]} F.linear", base_ms, w.numel() * w.element_size(), 0.0)
        del dense, w
        for label, kind, group in LAYOUTS:
            packed, fn = _pack(kind, group, n, k, device, gen)
            want = torch.nn.functional.linear(x.float(), dequantize(packed))
            err = rel_err(fn(x, packed), want)
            assert err < 2e-2, f"{label} matmul is wrong at {(n, k, m)}: rel err {err:.3g}"
            del want
            weights = _copies(lambda: _clone(packed), packed.nbytes, is_cuda)
            add(label, bench_ms(lambda: fn(x, next(weights))), packed.nbytes, err)
            if kind == "int4" and group == 128 and m == 1 and n == cases[-1][0]:
                sweep = [(1, 32), (1, 64), (2, 64), (8, 64)] if is_cuda else [(2, 32)]
                for split, bn in sweep:
                    ms = bench_ms(lambda: fn(x, next(weights), split_k=split, block_n=bn))
                    add(f"{label}, split_k {split}, BLOCK_N {bn}", ms, packed.nbytes, err, split_k=split, block_n=bn)
            del weights, packed
            res.put("quant", record)
    res.table(f"Weight-only quantized matmul ({str(dtype)[6:]} x, fp32 accumulation) vs {str(dtype)[6:]} F.linear: "
              "GB/s = (packed weight + x + out bytes) / time; weights rotated past L2",
              ["N x K", "M", "layout", "ms", "GB/s", "of copy", "TFLOP/s", "F.linear ms / ms", "rel err"], rows)
