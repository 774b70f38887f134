"""The CPU quantized linear against fp32 / bf16 F.linear, on the default model's shapes.

For each M (rows of x) it times one full set of the model's projections: 30 layers of
qkv 960x576, o 576x576, gate_up 3072x576, down 576x1536, 30 distinct weights per shape
(so no weight stays in cache between uses), and prints ms per set:

- fp32 / bf16: F.linear on an fp32 / bf16 weight (x of the same dtype);
- int4 g32 / g64: packed.Int4Packed (torch's int4 pack), bf16 x, both paths: the packed
  kernel and dequantize-to-bf16 + F.linear (the layout switches at INT4_SMALL_M);
- int8 pc / q8 g32: packed.GroupInt8 (numba) on per-channel rtn int8 and on Q8_0-like
  signed group-32 codes, bf16 x, both paths (switch at GROUP_INT8_SMALL_M);

then the LM head 49152x576 at M = 1, 16, 32, 64: fp32 F.linear vs GroupInt8 Q8_0-like, fp32 x
and output; and the bf16 rounding loss of Int4Packed's scale / zero against the groups'
exact fp32 (max and mean relative error of the dequantized weight).

    .venv/bin/python bench/quant_linear.py [--threads 2] [--repeat 3] [--layers 30]
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F

from furca.runtime.quant.groups import QuantGroups
from furca.runtime.quant.packed import GroupInt8, Int4Packed, pack
from furca.runtime.quant.rtn import quantize_int4, quantize_int8

SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536))
LM_HEAD = (49152, 576)


def q8_like(w: torch.Tensor) -> QuantGroups:
    """Q8_0's form: signed int8 codes, one fp32 scale per 32 weights, no offset."""
    n, k = w.shape
    g = w.view(n, k // 32, 32)
    scale = g.abs().amax(dim=2) / 127.0
    codes = torch.round(g / scale.clamp_min(1e-12)[..., None]).clamp(-127, 127).to(torch.int8)
    return QuantGroups(codes.view(n, k), scale.contiguous(), None, 32, 8, "Q8_0-like")


def timed(fn, repeat: int) -> float:
    fn()  # warm: compile, page in
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def forced(p, path: str):
    """p.matmul with the path fixed: "kernel" (packed) or "dequant" (dequantize + F.linear)."""
    def op(x, _):
        if path == "kernel":
            return p._small(x)
        return F.linear(x, p._weight(x.dtype))
    return op


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--ms", default="1,8,32,256")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ms = [int(m) for m in args.ms.split(",") if m]  # empty: the LM head and bf16 loss only
    print(f"threads {args.threads}, layers {args.layers}, best of {args.repeat}, load {os.getloadavg()}")

    fp32 = [torch.randn(n, k) * 0.05 for n, k in SHAPES for _ in range(args.layers)]
    bf16 = [w.to(torch.bfloat16) for w in fp32]
    layouts = {
        "int4 g32": [pack(quantize_int4(w, 32)) for w in fp32],
        "int4 g64": [pack(quantize_int4(w, 64)) for w in fp32],
        "int8 pc": [pack(quantize_int8(w)) for w in fp32],
        "q8 g32": [pack(q8_like(w)) for w in fp32],
    }
    assert isinstance(layouts["int4 g32"][0], Int4Packed) and isinstance(layouts["q8 g32"][0], GroupInt8)
    print("resident MB per set: fp32 %.0f, bf16 %.0f, " % (sum(w.numel() * 4 for w in fp32) / 1e6,
                                                          sum(w.numel() * 2 for w in fp32) / 1e6)
          + ", ".join(f"{name} {sum(p.nbytes for p in ps) / 1e6:.0f}" for name, ps in layouts.items()))

    header = ["M", "fp32", "bf16"] + [f"{name} {path}" for name in layouts for path in ("kernel", "dequant")]
    print("| " + " | ".join(header) + " |")
    print("|" + "--:|" * len(header))
    for m in ms:
        xs = {dt: {k: torch.randn(m, k).to(dt) for k in (576, 1536)} for dt in (torch.float32, torch.bfloat16)}
        row = [timed(lambda: [F.linear(xs[torch.float32][w.shape[1]], w) for w in fp32], args.repeat),
               timed(lambda: [F.linear(xs[torch.bfloat16][w.shape[1]], w) for w in bf16], args.repeat)]
        for ps in layouts.values():
            for path in ("kernel", "dequant"):
                row.append(timed(lambda: [forced(p, path)(xs[torch.bfloat16][p.shape[1]], None) for p in ps],
                                 args.repeat))
        print(f"| {m} | " + " | ".join(f"{v:.1f}" for v in row) + " |", flush=True)
    del fp32, bf16, layouts

    w = torch.randn(*LM_HEAD) * 0.05
    head = pack(q8_like(w))
    print(f"LM head {LM_HEAD[0]}x{LM_HEAD[1]}, fp32 x and output: fp32 {w.numel() * 4 / 1e6:.0f} MB, "
          f"q8 g32 {head.nbytes / 1e6:.0f} MB")
    for m in (1, 16, 32, 64):
        x = torch.randn(m, LM_HEAD[1])
        print(f"  M={m}: fp32 F.linear {timed(lambda: F.linear(x, w), args.repeat):.2f} ms, "
              f"q8 g32 kernel {timed(lambda: head._small(x), args.repeat):.2f} ms, "
              f"dequant + F.linear {timed(lambda: F.linear(x, head._weight(torch.float32)), args.repeat):.2f} ms")

    print("Int4Packed bf16 scale/zero vs the groups' fp32 (relative to each weight's max |w| per row):")
    for n, k in SHAPES:
        for g in (32, 64):
            groups = quantize_int4(torch.randn(n, k) * 0.05, g)
            exact = groups.dequantize()
            err = (pack(groups).dequantize() - exact).abs() / exact.abs().amax(dim=1, keepdim=True)
            print(f"  {n}x{k} g{g}: max {err.max():.2e}, mean {err.mean():.2e}")
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
