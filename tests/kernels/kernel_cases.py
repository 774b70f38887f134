"""Where the kernel tests run, their dtypes and tolerances, and input builders.

On a machine without CUDA (or with ``TRITON_INTERPRET=1`` already set) the kernels run
in Triton's interpreter on CPU, in fp32 and fp16 (the interpreter's bf16 math is
wrong); with CUDA they run compiled, bf16 included. Importing this module sets
``TRITON_INTERPRET`` before any kernel module is imported (conftest.py imports it).
"""

from __future__ import annotations

import os

import numpy as np
import torch

IS_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available()
if IS_INTERPRETED:
    os.environ["TRITON_INTERPRET"] = "1"


def _speed_up_interpreted_dot() -> None:
    """Triton's interpreter computes ``tl.dot`` as ``np.matmul(a, b, dtype=acc_dtype)``,
    which numpy runs without BLAS, and slower still on a transposed operand: ~20 ms per
    64x128x64 tile, most of the test time. Casting the operands to the accumulator dtype
    first and multiplying with ``np.einsum`` (its own single-threaded loop: BLAS threads
    fight over the shared test machine's cores) gives the same fp32 products and sums
    (fp16 products are exact in fp32) in a fraction of a millisecond."""
    try:
        from triton.runtime.interpreter import InterpreterBuilder, TensorHandle
    except ImportError:
        return
    original = InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype.primitive_bitwidth == 8 or b.dtype.primitive_bitwidth == 8 or not d.dtype.is_floating():
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        acc = d.data.dtype
        prod = np.einsum("...ik,...kj->...ij", a.data.astype(acc), b.data.astype(acc))
        return TensorHandle(prod + d.data, d.dtype.scalar)

    InterpreterBuilder.create_dot = create_dot


if IS_INTERPRETED:
    _speed_up_interpreted_dot()
DEVICE = torch.device("cpu" if IS_INTERPRETED else "cuda")

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# (atol, rtol) of an attention output against the fp32 reference computed from the same
# (rounded) inputs: one output rounding plus the probabilities rounded to the dtype.
TOLERANCES = {torch.float32: (2e-5, 1e-4), torch.float16: (3e-3, 1e-2), torch.bfloat16: (2e-2, 2e-2)}


def dtypes_for(name: str) -> list[torch.dtype]:
    """A pairwise row's dtype on CPU; every dtype (bf16 too) on CUDA, where it is cheap."""
    return [DTYPES[name]] if IS_INTERPRETED else list(DTYPES.values())


def case_id(**kw) -> str:
    return "-".join(f"{k}{v}" for k, v in kw.items())


def make_pool(num_slots: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, gen: torch.Generator):
    """K and V pools laid out as KVCache lays them (head-major memory, seen slot-major:
    ``(num_slots, KV, D)`` with strides ``(D, num_slots * D, 1)``), filled with random
    values everywhere so a wrong slot or head shows."""
    shape = (num_kv_heads, num_slots, head_dim)
    k = torch.randn(shape, generator=gen).to(DEVICE, dtype).transpose(0, 1)
    v = torch.randn(shape, generator=gen).to(DEVICE, dtype).transpose(0, 1)
    return k, v


def shuffled_slots(num_slots: int, count: int, gen: torch.Generator) -> torch.Tensor:
    """``count`` distinct slots in 1 .. num_slots-1, in random (non-contiguous) order."""
    assert count < num_slots
    return (torch.randperm(num_slots - 1, generator=gen)[:count] + 1).to(DEVICE)


def indptr(lens: list[int]) -> torch.Tensor:
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int64, device=DEVICE)


def assert_close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol = TOLERANCES[dtype]
    assert not got.isnan().any(), "NaN in the kernel output"
    torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=rtol)
