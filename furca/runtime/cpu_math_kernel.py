"""Vectorizable math for the numba CPU kernels (attention's softmax, the layers' SiLU)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(inline="always", nogil=True)
def exp_nonpositive(x, out, ebits):
    """``out[d] = exp(x[d])`` for ``x[d] <= 0`` (``out`` may be ``x``; ``ebits`` int32
    scratch of the same length): x = n ln2 + f (|f| <= ln2/2, ln2 in two parts), a Cephes
    polynomial for exp(f), then n added to the exponent bits (x clamped at -87 keeps 2^n
    normal). Unlike numba's scalar ``expf`` call, both loops vectorize."""
    for d in range(x.shape[0]):
        v = max(x[d], np.float32(-87.0))
        n = np.floor(v * np.float32(1.44269504088896341) + np.float32(0.5))
        v = v - n * np.float32(0.693359375) - n * np.float32(-2.12194440e-4)
        z = v * v
        y = ((((np.float32(1.9875691500e-4) * v + np.float32(1.3981999507e-3)) * v
               + np.float32(8.3334519073e-3)) * v + np.float32(4.1665795894e-2)) * v
             + np.float32(1.6666665459e-1)) * v + np.float32(5.0000001201e-1)
        out[d] = y * z + v + np.float32(1.0)
        ebits[d] = np.int32(n) << 23
    obits = out.view(np.int32)
    for d in range(x.shape[0]):
        obits[d] += ebits[d]
