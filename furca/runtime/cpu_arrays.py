"""CPU tensors handed to the numba kernels (attention's decode kernel, the layers' glue)."""

from __future__ import annotations

import numpy as np
import torch


def numpy_view(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a numpy array over the same memory (no copy): fp32 as it is, bf16
    as its uint16 bits (numpy has no bf16; the kernels widen the bits exactly)."""
    return t.view(torch.uint16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
