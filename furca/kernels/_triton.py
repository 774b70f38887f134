"""Triton, or a stand-in when it is not installed.

Kernel modules do ``from furca.kernels._triton import triton, tl, HAS_TRITON`` so
that importing them never fails: without Triton, ``triton.jit`` returns a stub that
raises `KernelUnavailableError` when launched, and every ``*_ref`` still works.

Whether a kernel runs interpreted is decided by Triton when the module defining it is
imported: set ``TRITON_INTERPRET=1`` before importing a kernel module to run on CPU.
"""

import functools

from furca.errors import FurcaError


class KernelUnavailableError(FurcaError, ImportError):
    """A Triton kernel was launched (or the Triton backend built) without Triton installed."""


try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - exercised only where triton is absent
    HAS_TRITON = False

    class _StubKernel:
        def __init__(self, fn):
            self.fn = fn

        def __getitem__(self, _grid):
            raise KernelUnavailableError(
                f"{self.fn.__name__} needs Triton: pip install triton (or use the torch path)")

    class _StubTriton:
        @staticmethod
        def jit(fn=None, **_kwargs):
            return _StubKernel(fn) if fn is not None else _StubKernel

        @staticmethod
        def cdiv(a: int, b: int) -> int:
            return -(-a // b)

        @staticmethod
        def next_power_of_2(n: int) -> int:
            return 1 << max(0, int(n) - 1).bit_length()

    class _StubLanguage:
        constexpr = object  # only used in annotations

    triton = _StubTriton()
    tl = _StubLanguage()


def require_triton() -> None:
    if not HAS_TRITON:
        raise KernelUnavailableError("this kernel needs Triton: pip install triton (or use the torch path)")


class KernelArgumentError(FurcaError, ValueError):
    """A kernel launcher got a tensor of the wrong dtype, shape, stride or device."""


def check(cond: bool, message: str) -> None:
    """Launcher argument check: raise `KernelArgumentError` naming what to change."""
    if not cond:
        raise KernelArgumentError(message)


@functools.lru_cache(maxsize=None)
def _cuda_properties(index: int):
    import torch

    return torch.cuda.get_device_properties(index)


def cuda_properties(device):
    """A CUDA device's properties (compute capability ``major``/``minor``,
    ``multi_processor_count``, ...), read once per device: the launchers ask on every
    call, once per layer in a decode step. None for any other device."""
    if device.type != "cuda":
        return None
    import torch

    return _cuda_properties(device.index if device.index is not None else torch.cuda.current_device())


def cuda_capability(device) -> tuple[int, int] | None:
    """``(major, minor)`` of a CUDA device (cached, see `cuda_properties`); None elsewhere."""
    p = cuda_properties(device)
    return None if p is None else (p.major, p.minor)
