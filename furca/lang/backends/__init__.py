"""Backends: where a program's gens and selects run. See `base.py` for the protocol.

`local` (furca's in-process Engine), `runtime_endpoint` (SGLang's native API over
HTTP), `runtime` (a `furca serve` subprocess), `openai_backend` (any
OpenAI-compatible endpoint). Each loads its heavy dependency when created.

`as_backend` turns what a user passes into a `Backend`; it lives here, above the
backends, because it picks one of them (an in-process Engine gets `local`'s wrapper).
"""

from __future__ import annotations

from typing import Any

from furca.lang.backends.base import Backend
from furca.lang.backends.local import LocalBackend
from furca.lang.errors import NoBackendError


def as_backend(obj: Any) -> Backend:
    """A `Backend` from what a user passes: a backend, a ``Runtime`` (its endpoint), or
    an in-process furca ``Engine`` (wrapped once, see `LocalBackend`)."""
    if obj is None:
        raise NoBackendError(
            "no backend: call furca.set_default_backend(...) (an Engine(), RuntimeEndpoint(url), "
            "Runtime() or OpenAI(model)) or pass backend= to run()"
        )
    if hasattr(obj, "endpoint") and not isinstance(obj, Backend):
        obj = obj.endpoint
    if isinstance(obj, Backend):
        return obj
    if hasattr(obj, "generate") and hasattr(obj, "tokenizer"):
        return LocalBackend.for_engine(obj)
    raise NoBackendError(f"{type(obj).__name__} is not a backend (expected an Engine, RuntimeEndpoint, Runtime or OpenAI)")
