"""What the OpenAI routes share: the served model's names, and request -> `SamplingParams`.

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
        "member_order": req.member_order,
        "token_healing": False,  # OpenAI's semantics: the prompt is continued as sent
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
