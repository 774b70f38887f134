"""Bit-level numba helpers of the int4 kernels (imported only when numba is installed):
a uint32 register reinterpreted as float32 (`f32_bits`), a 4-bit code converted to float32
from 32 bits (`nibble_f32`: numba's own int -> float conversion widens to int64 first,
vcvtqq2ps on half-width vectors), fp16 bits widened exactly (`half_to_f32`).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

LOW_NIBBLE = np.uint32(15)
_TWO_112 = np.float32(2.0 ** 112)  # fp16 -> fp32 exponent rebias (15 -> 127)


@intrinsic
def f32_bits(typingctx, u):
    """The uint32 ``u`` reinterpreted as a float32 (a register bitcast, vectorizable)."""
    sig = types.float32(types.uint32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


@intrinsic
def nibble_f32(typingctx, u):
    """The uint32 ``u`` (a code below 2^31) as a float32, converted from 32 bits (numba's
    own int -> float conversion widens to int64 first: vcvtqq2ps on half-width vectors)."""
    sig = types.float32(types.uint32)

    def codegen(context, builder, signature, args):
        return builder.sitofp(args[0], ir.FloatType())

    return sig, codegen


@njit(inline="always", nogil=True)
def half_to_f32(h, out):
    """out[j] = the fp16 bits h[j] as fp32: exact for normals, subnormals and zeros (the
    magnitude's bits shifted into fp32 place, then the exponent rebiased by 2^112)."""
    for j in range(h.shape[0]):
        b = np.uint32(h[j])
        f = f32_bits((b & np.uint32(0x7FFF)) << np.uint32(13)) * _TWO_112
        out[j] = -f if b & np.uint32(0x8000) else f
