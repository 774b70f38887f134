"""OpenAI response shapes: finish reasons, logprobs, usage, choices and stream chunks."""

from __future__ import annotations

import time
from typing import Any


def finish_reason(meta: dict[str, Any]) -> str | None:
    reason = (meta or {}).get("finish_reason")
    if not reason:
        return None
    return {"stop": "stop", "length": "length", "abort": "abort"}.get(reason.get("type"), reason.get("type"))


def matched_stop(meta: dict[str, Any]) -> Any:
    reason = (meta or {}).get("finish_reason") or {}
    return reason.get("matched") if reason.get("type") == "stop" else None


def _tok(entry: list) -> tuple[str, float]:
    logprob, _token_id, text = entry
    return (text if text is not None else ""), float(logprob)


def chat_logprobs(meta: dict[str, Any], num_top: int) -> dict[str, Any] | None:
    """``{"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}`` from meta_info."""
    entries = meta.get("output_token_logprobs")
    if entries is None:
        return None
    tops = meta.get("output_top_logprobs") or [None] * len(entries)
    content = []
    for entry, top in zip(entries, tops):
        token, lp = _tok(entry)
        alts = []
        for alt in (top or [])[:num_top]:
            t, alp = _tok(alt)
            alts.append({"token": t, "logprob": alp, "bytes": list(t.encode())})
        content.append({"token": token, "logprob": lp, "bytes": list(token.encode()), "top_logprobs": alts})
    return {"content": content}


def completion_logprobs(meta: dict[str, Any], num_top: int, text_offset: int = 0) -> dict[str, Any] | None:
    """The legacy completions shape: tokens, token_logprobs, top_logprobs, text_offset."""
    entries = meta.get("output_token_logprobs")
    if entries is None:
        return None
    tops = meta.get("output_top_logprobs") or [None] * len(entries)
    tokens, lps, top_out, offsets = [], [], [], []
    pos = text_offset
    for entry, top in zip(entries, tops):
        token, lp = _tok(entry)
        tokens.append(token)
        lps.append(lp)
        offsets.append(pos)
        pos += len(token)
        top_out.append({_tok(a)[0]: _tok(a)[1] for a in (top or [])[:num_top]} if num_top else None)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": top_out if num_top else None,
            "text_offset": offsets}


def usage(metas: list[dict[str, Any]], num_prompts: int = 1) -> dict[str, Any]:
    """Prompt tokens counted once per prompt (not per sample), as OpenAI does."""
    per_prompt = max(len(metas) // max(num_prompts, 1), 1)
    firsts = metas[::per_prompt]
    prompt = sum(m.get("prompt_tokens", 0) for m in firsts)
    completion = sum(m.get("completion_tokens", 0) for m in metas)
    cached = sum(m.get("cached_tokens", 0) for m in firsts)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def envelope(kind: str, rid: str, model: str, created: int | None = None) -> dict[str, Any]:
    return {"id": rid, "object": kind, "created": created or int(time.time()), "model": model}
