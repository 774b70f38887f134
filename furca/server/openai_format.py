"""OpenAI response shapes: finish reasons, logprobs, usage, messages and envelopes.

Every field of the `openai` package's response types is present (null where furca has
nothing to say: ``refusal``, ``service_tier``, ``audio``...), so clients that read a field
without a default find it; tests/server/test_response_fields.py walks the types.
Fields only sent when a request asks for a feature furca does not have (``moderation``,
``metadata``, stream ``obfuscation``) are left out, as OpenAI leaves them out.
"""

from __future__ import annotations

import time
from typing import Any

import furca

SYSTEM_FINGERPRINT = f"furca-{furca.__version__}"


def finish_reason(meta: dict[str, Any]) -> str | None:
    reason = (meta or {}).get("finish_reason")
    if not reason:
        return None
    return {"stop": "stop", "length": "length", "abort": "abort"}.get(reason.get("type"), reason.get("type"))


def tool_finish_reason(meta: dict[str, Any], called: bool, legacy: bool) -> str | None:
    """``tool_calls`` (``function_call`` for the legacy API) when whole calls are returned,
    also when the text went on to max_tokens (as vLLM does); else the engine's reason."""
    reason = finish_reason(meta)
    if called and reason in ("stop", "length"):
        return "function_call" if legacy else "tool_calls"
    return reason


def matched_stop(meta: dict[str, Any]) -> Any:
    reason = (meta or {}).get("finish_reason") or {}
    return reason.get("matched") if reason.get("type") == "stop" else None


def _tok(entry: list) -> tuple[str, float]:
    logprob, _token_id, text = entry
    return (text if text is not None else ""), float(logprob)


def chat_logprobs(meta: dict[str, Any], num_top: int) -> dict[str, Any] | None:
    """``{"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}], "refusal": None}``."""
    entries = meta.get("output_token_logprobs")
    if entries is None:
        return None
    tops = meta.get("output_top_logprobs") or [None] * len(entries)
    return {"content": chat_logprob_items(entries, tops, num_top), "refusal": None}


def chat_logprob_items(entries: list, tops: list, num_top: int) -> list[dict[str, Any]]:
    """``logprobs.content`` items of meta_info entries and their top alternatives (a whole
    answer's, or a stream chunk's: streamed items concatenate to the whole answer's)."""
    content = []
    for entry, top in zip(entries, tops):
        token, lp = _tok(entry)
        alts = []
        for alt in (top or [])[:num_top]:
            t, alp = _tok(alt)
            alts.append({"token": t, "logprob": alp, "bytes": list(t.encode())})
        content.append({"token": token, "logprob": lp, "bytes": list(token.encode()), "top_logprobs": alts})
    return content


def chat_message(content: str | None, calls: list[dict[str, Any]], function_call: Any = None) -> dict[str, Any]:
    """An assistant message with every field of ``ChatCompletionMessage``."""
    return {"role": "assistant", "content": content, "refusal": None, "annotations": [], "audio": None,
            "function_call": function_call, "tool_calls": calls}


def usage(metas: list[dict[str, Any]], num_prompts: int = 1) -> dict[str, Any]:
    """Prompt tokens counted once per prompt (not per sample), as OpenAI does."""
    per_prompt = max(len(metas) // max(num_prompts, 1), 1)
    firsts = metas[::per_prompt]
    prompt = sum(m.get("prompt_tokens", 0) for m in firsts)
    completion = sum(m.get("completion_tokens", 0) for m in metas)
    cached = sum(m.get("cached_tokens", 0) for m in firsts)
    # speculative decoding's draft tokens (meta_info spec_*) as OpenAI's predicted-output counts
    accepted = sum(m.get("spec_num_correct_drafts", 0) for m in metas)
    rejected = sum(m.get("spec_num_proposed_drafts", 0) for m in metas) - accepted
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "cache_write_tokens": None, "audio_tokens": 0,
                                      "image_tokens": 0, "text_tokens": prompt},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "text_tokens": completion,
                                          "accepted_prediction_tokens": accepted,
                                          "rejected_prediction_tokens": rejected}}


def envelope(kind: str, rid: str, model: str, created: int | None = None) -> dict[str, Any]:
    """The top-level fields of an answer or a stream chunk (chat ones have ``service_tier``)."""
    body = {"id": rid, "object": kind, "created": created or int(time.time()), "model": model,
            "system_fingerprint": SYSTEM_FINGERPRINT}
    if kind.startswith("chat."):
        body["service_tier"] = None
    return body
