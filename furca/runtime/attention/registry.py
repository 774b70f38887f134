"""Attention backends by name: the one place that lists them, resolves "auto" and
builds one.

A backend is one module ``<name>_backend.py`` in this package that calls
``register_backend("<name>", factory, ...)`` when it is imported. Adding a backend is
adding that file: `EngineConfig` validates ``attention_backend`` against
`config_choices()`, the command line offers the same choices, and the model runner
builds the backend with `make_attention_backend`.

Cheap by design: `backend_names()` reads the module names from this package's
directory without importing them, so `EngineConfig` (and ``furca --help``) load no
torch. A backend module is imported the first time a backend is built or "auto" is
resolved, and it must import without its optional dependency: it says through
``available`` whether it can run, and imports that dependency in its factory (the
Triton backend imports triton only when it is built, or asked on a CUDA device).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from furca.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from furca.runtime.forward_batch import AttentionBackend

AUTO = "auto"
_PACKAGE = "furca.runtime.attention"
_SUFFIX = "_backend"


def _always() -> bool:
    return True


@dataclass(frozen=True)
class BackendEntry:
    """One registered backend. ``auto_devices``: the device types ("cpu", "cuda") on
    which "auto" may pick it, None for every type; among those that are available,
    "auto" takes the highest ``auto_priority`` (ties: the first name)."""

    name: str
    factory: Callable[[], "AttentionBackend"]
    available: Callable[[], bool] = _always
    auto_devices: tuple[str, ...] | None = None
    auto_priority: int = 0


_ENTRIES: dict[str, BackendEntry] = {}


def register_backend(name: str, factory: Callable[[], "AttentionBackend"], *,
                     available: Callable[[], bool] = _always,
                     auto_devices: tuple[str, ...] | None = None, auto_priority: int = 0) -> None:
    """Register ``name`` (the module ``<name>_backend.py`` calls this once, at import).

    ``factory()`` builds a backend; it runs only when ``available()`` is true.
    ``available()`` says whether this install can run the backend; it is asked only when
    the backend is wanted, so it may import the optional dependency."""
    _ENTRIES[name] = BackendEntry(name, factory, available,
                                  None if auto_devices is None else tuple(auto_devices), auto_priority)


@functools.cache
def backend_names() -> tuple[str, ...]:
    """Every backend's name, sorted: the ``<name>`` of each ``<name>_backend`` module in
    this package (read from the directory, nothing imported)."""
    package = importlib.import_module(_PACKAGE)
    return tuple(sorted(m.name.removesuffix(_SUFFIX) for m in pkgutil.iter_modules(package.__path__)
                        if m.name.endswith(_SUFFIX) and not m.ispkg))


def config_choices() -> tuple[str, ...]:
    """The values ``EngineConfig.attention_backend`` accepts: "auto", then every name."""
    return (AUTO, *backend_names())


def check_name(name: object) -> None:
    """Raise `ConfigError` naming the choices unless ``name`` is one of `config_choices()`."""
    choices = config_choices()
    if name not in choices:
        quoted = [repr(c) for c in choices]
        listed = f"{', '.join(quoted[:-1])} or {quoted[-1]}" if len(quoted) > 1 else quoted[0]
        raise ConfigError(f"attention_backend must be {listed}, got {name!r}")


def _entry(name: str) -> BackendEntry:
    if name not in _ENTRIES:
        importlib.import_module(f"{_PACKAGE}.{name}{_SUFFIX}")
        if name not in _ENTRIES:
            raise ConfigError(f"{_PACKAGE}.{name}{_SUFFIX} does not call register_backend({name!r}, ...)")
    return _ENTRIES[name]


def resolve_backend_name(name: str, device: "torch.device | None" = None) -> str:
    """``name`` itself, unless it is "auto": then the available backend with the highest
    ``auto_priority`` among those registered for ``device``'s type (cpu when None)."""
    check_name(name)
    if name != AUTO:
        return name
    kind = device.type if device is not None else "cpu"
    candidates = [e for e in map(_entry, backend_names()) if e.auto_devices is None or kind in e.auto_devices]
    for entry in sorted(candidates, key=lambda e: (-e.auto_priority, e.name)):
        if entry.available():
            return entry.name
    raise ConfigError(f"no attention backend is available for device type {kind!r}")


def make_attention_backend(name: str, device: "torch.device | None" = None) -> "AttentionBackend":
    """A new backend for ``name`` ("auto" or one of `backend_names()`) on ``device``.

    Raises `ConfigError` for an unknown name and for a backend this install cannot run
    ("attention_backend='triton' is not available in this build")."""
    entry = _entry(resolve_backend_name(name, device))
    if not entry.available():
        raise ConfigError(f"attention_backend={entry.name!r} is not available in this build")
    return entry.factory()
