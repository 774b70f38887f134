"""JSON text for every answer, with the non-finite floats JSON cannot hold replaced.

A constraint forbids tokens by giving them logprob ``-inf``; asked for many alternatives,
the engine returns some of those. JSON has no infinity (Python's ``json`` would write
``-Infinity``, which clients reject, and Starlette refuses it with a 500), so answers carry
``-inf`` as ``-9999.0`` (vLLM's stand-in), ``+inf`` as ``9999.0`` and NaN as ``null``.
Bodies without such floats are encoded exactly as ``json.dumps`` does (one fast pass).
"""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi.responses import JSONResponse

NEG_INF_LOGPROB = -9999.0


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else math.copysign(-NEG_INF_LOGPROB, obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def json_text(obj: Any, *, ensure_ascii: bool = True) -> str:
    """``json.dumps(obj)``, non-finite floats replaced (see the module docstring)."""
    try:
        return json.dumps(obj, ensure_ascii=ensure_ascii, allow_nan=False)
    except ValueError:  # an inf or NaN somewhere: the rare path walks the body once
        return json.dumps(_finite(obj), ensure_ascii=ensure_ascii, allow_nan=False)


class FiniteJSONResponse(JSONResponse):
    """The app's default response class: `json_text` instead of Starlette's encoder."""

    def render(self, content: Any) -> bytes:
        return json_text(content, ensure_ascii=False).encode("utf-8")
