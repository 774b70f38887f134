"""float8 e4m3 ("e4m3fn": 4 exponent bits, 3 mantissa bits, no infinities, largest finite
value 448) rounding shared by the KV-cache kernels and their references.

    to_e4m3(x) -> x.float().clamp(-448, 448).to(torch.float8_e4m3fn)   # torch
    round_e4m3(x) (Triton, inside a kernel) -> fp32 values that e4m3 holds exactly

Out-of-range values saturate to +-448 (a plain cast to e4m3fn turns them into NaN);
in range, rounding is to nearest, ties to even, as torch's cast and the hardware's
``cvt.rn.satfinite`` do. ``round_e4m3`` does the rounding itself in fp32 arithmetic, so
the cast that follows it is exact: the result is the same compiled or in Triton's
interpreter (whose own float-to-fp8 cast rounds some values to the wrong binade).
"""

import torch

from furca.kernels._triton import tl, triton

E4M3_MAX = 448.0


def to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """``x`` saturated to +-448 and rounded to float8_e4m3fn (NaN stays NaN)."""
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


@triton.jit
def round_e4m3(x):
    """``x`` as fp32, saturated to +-448 and rounded (to nearest even) onto e4m3's grid."""
    x = tl.minimum(tl.maximum(x.to(tl.float32), -448.0), 448.0)
    # normal range (|x| >= 2**-6): keep 3 of fp32's 23 mantissa bits, ties to even;
    # a carry out of the mantissa correctly bumps the exponent
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFFF + ((bits >> 20) & 1)) & -1048576  # -1048576 == 0xFFF00000
    normal = bits.to(tl.float32, bitcast=True)
    # subnormal range: steps of 2**-9, which is the fp32 ulp at 1.5 * 2**14, so adding
    # and subtracting that constant rounds to the grid (fp32 addition rounds to even);
    # done on |x| and signed after, so a negative value that rounds to zero gives -0
    ax = tl.abs(x)
    sub = (ax + 24576.0) - 24576.0
    sub = tl.where(x < 0, -sub, sub)
    return tl.where(ax < 0.015625, sub, normal)
