"""Kernel tests: importing kernel_cases first sets TRITON_INTERPRET=1 where there is
no CUDA, before any furca.kernels module (and its @triton.jit) is imported."""

import kernel_cases  # noqa: F401
