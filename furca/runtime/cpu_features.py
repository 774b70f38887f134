"""What the CPU computes fast, for dtype defaults.

``has_native_bf16()``: the CPU has bf16 dot-product instructions (x86 AVX512-BF16 or
AMX-BF16, Arm's BF16 extension), so oneDNN runs bf16 GEMMs from bf16 weights at about
twice fp32's speed: half the bytes to read and twice the products per instruction
(SmolLM2-135M's projections at M = 1 to 256 rows: 2.15-2.40x on two AVX512-BF16 cores,
``bench/cpu_linear_dtype.py``). Without them oneDNN converts bf16 to fp32 on the fly
and the gain is gone (not measured: the development machine has them), so the
engine's ``linear_dtype="auto"`` stays fp32 there.

Read from ``/proc/cpuinfo`` once (Linux); False where it cannot tell.
"""

from __future__ import annotations

import functools

_X86_FLAGS = ("avx512_bf16", "amx_bf16")


@functools.lru_cache(maxsize=1)
def has_native_bf16() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return False
    return cpuinfo_has_native_bf16(text)


def cpuinfo_has_native_bf16(cpuinfo: str) -> bool:
    """From the text of ``/proc/cpuinfo``: x86's ``flags`` or Arm's ``Features`` line of
    the first CPU names a bf16 dot-product extension."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "flags":
            return any(flag in value.split() for flag in _X86_FLAGS)
        if key == "Features":
            return "bf16" in value.split()
    return False
