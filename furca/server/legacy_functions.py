"""The legacy function-calling API (``functions`` / ``function_call``), as answers.

protocol.py maps a request's ``functions`` onto ``tools`` (``function_call`` onto
``tool_choice``: "none", "auto" or a named function; one call, no parallel calls), so
generation and parsing are the tools' own. Here the answer takes the old shape: the
message carries ``function_call: {"name", "arguments"}`` (the first call; no call id),
``finish_reason`` is ``"function_call"``, and a stream sends ``delta.function_call`` (the
name first, then argument pieces) where it would send ``delta.tool_calls``.
"""

from __future__ import annotations

from typing import Any

def function_call(calls: list[dict[str, Any]]) -> dict[str, str] | None:
    """``{"name", "arguments"}`` of the first call, or None."""
    if not calls:
        return None
    fn = calls[0]["function"]
    return {"name": fn["name"], "arguments": fn["arguments"]}


def stream_delta(delta: dict[str, Any]) -> dict[str, Any] | None:
    """A chat delta in the legacy shape: ``tool_calls[0]`` becomes ``function_call``; deltas
    of further calls are dropped (None: send nothing)."""
    if "tool_calls" not in delta:
        return delta
    out = {k: v for k, v in delta.items() if k != "tool_calls"}
    first = [c for c in delta["tool_calls"] if c.get("index", 0) == 0]
    if first:
        fn = first[0].get("function") or {}
        out["function_call"] = {k: fn[k] for k in ("name", "arguments") if k in fn}
    return out if out else None
