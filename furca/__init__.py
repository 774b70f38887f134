"""furca: structured generation for LLMs.

Heavy parts (the runtime, which imports torch) load lazily, so ``import furca``,
``import furca.lang`` and ``import furca.constrain`` stay light.
"""

from __future__ import annotations

from importlib import import_module

from furca.errors import FurcaError

__version__ = "0.1.0"

_LAZY = {
    "Engine": ("furca.runtime.engine", "Engine"),
    "SamplingParams": ("furca.runtime.sampling_params", "SamplingParams"),
    "Output": ("furca.runtime.output", "Output"),
}


def __getattr__(name: str):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'furca' has no attribute {name!r}") from None
    value = getattr(import_module(module), attr)
    globals()[name] = value
    return value


__all__ = ["FurcaError", "__version__", *_LAZY]
