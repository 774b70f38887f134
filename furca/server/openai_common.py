"""What the OpenAI routes share: the served model's names, and request -> `SamplingParams`;
what every generating route checks before any work (the native /generate too):
`check_sequences` (n x prompts at most ``max(128, max_running_requests)``, so one
request cannot fill the queue ahead of everyone) and `check_text_length` (a prompt whose
character count alone proves it past the context is refused before tokenizing).

The served model answers to its id (``--served-model-name`` or the model directory's
name), its path, and ``default`` (the name README's examples and many clients use); the
answers always carry its id. On these routes a JSON schema (``response_format``
``json_schema``, the ``json_schema`` extra, tool parameters) is read as OpenAI's strict
mode reads it: an object without ``additionalProperties`` admits only its declared
properties, unless the server runs with ``--json-schema-allow-extra-properties``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import Request

from furca.runtime.request_builder import MODEL_DEFAULT_KEYS
from furca.runtime.sampling_params import SamplingParams
from furca.server.errors import APIError
from furca.server.state import ServerState

logger = logging.getLogger("furca.server")
MODEL_ALIAS = "default"


def state_of(request: Request) -> ServerState:
    return request.app.state.furca


def check_model(state: ServerState, name: str | None) -> None:
    state.require_engine()
    if name is None or name in (state.model_name, MODEL_ALIAS, str(getattr(state.engine, "model_path", None))):
        return
    raise APIError(404, f"The model `{name}` does not exist; this server serves `{state.model_name}` "
                        f"(also called `{MODEL_ALIAS}`)", param="model", code="model_not_found")


MAX_SEQUENCES = 128  # OpenAI's bound on n: a request may always start this many


def check_sequences(state: ServerState, num: int, param: str = "n") -> None:
    """400 when one request would start more engine sequences (n x prompts) than
    ``max(128, max_running_requests)``: one request may fill the running batch, never the
    queue behind it."""
    running = getattr(getattr(state.engine, "config", None), "max_running_requests", None)
    limit = max(MAX_SEQUENCES, running if isinstance(running, int) else 0)
    if num > limit:
        raise APIError(400, f"this request starts {num} sequences (n x prompts), but one request may start at "
                            f"most {limit} (the larger of 128 and --max-running-requests); lower n or split the "
                            "batch", param=param)


# Characters of a prompt one token may stand for, at most, over the longest vocabulary
# piece: normalizers (NFC) may join a few characters into one before tokenizing.
_NORMALIZE_SLACK = 4


def _max_token_chars(state: ServerState) -> int | None:
    """An upper bound on the characters of prompt text one token covers (cached): the
    longest vocabulary piece in characters (a byte-level piece has one character per
    byte, a sentencepiece piece one per character, "▁" for a space), times
    `_NORMALIZE_SLACK`; None when the tokenizer has no vocabulary to read."""
    cached = getattr(state, "_max_token_chars", None)
    if cached is None:
        try:
            cached = max(len(piece) for piece in state.tokenizer.hf.get_vocab()) * _NORMALIZE_SLACK
        except Exception:  # noqa: BLE001 - no vocabulary to read: no early check
            cached = 0
        state._max_token_chars = cached
    return cached or None


def check_text_length(state: ServerState, chars: int, where: str = "prompt") -> None:
    """The context-length 400, before tokenizing, for text of `chars` characters that
    has more tokens than the context holds whatever its content."""
    per_token = _max_token_chars(state) if chars > state.context_length else None
    if per_token is None:
        return
    at_least = chars // per_token
    if at_least >= state.context_length:
        raise APIError(400, f"This model's maximum context length is {state.context_length} tokens. However, your "
                            f"request has at least {at_least} input tokens ({chars} characters). Please reduce the "
                            f"length of the {where}.", param="messages" if where == "messages" else "prompt",
                       code="context_length_exceeded")


def sampling_params(state: ServerState, req: Any, max_new_tokens: int, **extra: Any) -> SamplingParams:
    """`req`'s sampling fields (chat or completions), then `extra` (set where not None),
    then the model's generation defaults for what is still unset."""
    lax = bool(getattr(state.args, "json_schema_allow_extra_properties", False))
    d: dict[str, Any] = {
        "max_new_tokens": max_new_tokens, "n": req.n, "stop": req.stop, "temperature": req.temperature,
        "top_p": req.top_p, "top_k": req.top_k, "min_p": req.min_p, "seed": req.seed,
        "repetition_penalty": req.repetition_penalty, "frequency_penalty": req.frequency_penalty,
        "presence_penalty": req.presence_penalty, "min_new_tokens": req.min_tokens,
        "ignore_eos": req.ignore_eos, "stop_token_ids": req.stop_token_ids,
        "skip_special_tokens": req.skip_special_tokens, "regex": req.regex, "ebnf": req.ebnf,
        "json_schema": req.json_schema, "allow_extra_properties": lax, "logit_bias": req.logit_bias,
    }
    rf = req.response_format
    if rf is not None and rf.type == "json_object":
        d["json_object"] = True
    elif rf is not None and rf.type == "json_schema":
        d["json_schema"] = rf.json_schema.schema_
    d.update({k: v for k, v in extra.items() if v is not None})
    defaults = state.engine.generation_defaults
    for key in MODEL_DEFAULT_KEYS:
        if d.get(key) is None and defaults.get(key) is not None:
            d[key] = defaults[key]
    return SamplingParams.from_dict(d)


def log_answer(state: ServerState, kind: str, rid: str, body: dict[str, Any]) -> None:
    if state.args.log_requests:
        logger.info("%s %s: %s", kind, rid, json.dumps(body)[:2000])
