"""wrap(module, path, make): a function of furca.constrain replaced by a wrapper, for the
bench scripts that time or watch parts of a compile or a step (constrain_tail.py,
constrain_ttfm.py, constrain_cow_pages.py, constrain_key_steps.py,
constrain_narrow_walks.py)."""

from __future__ import annotations

import importlib


def wrap(module: str, path: str, make):
    """Replaces the attribute `path` (dotted: "TokenMasks.mask") of furca.constrain.`module`
    with make(the original), and returns the original. Callers that look the attribute
    up at call time (module globals, methods) then call the wrapper."""
    owner = importlib.import_module("furca.constrain." + module)
    *owners, name = path.split(".")
    for x in owners:
        owner = getattr(owner, x)
    f = getattr(owner, name)
    setattr(owner, name, make(f))
    return f
