"""OpenAI-compatible routes: /v1/chat/completions, /v1/completions, /v1/models.

Each handler: check the model name, build the prompt ids off the event loop, check the
context, build `SamplingParams`, admit, start the engine stream, then either collect it
(non-streaming, cancelled if the client leaves) or stream SSE chunks from it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any

from fastapi import APIRouter, Request

from furca.runtime.request_builder import MODEL_DEFAULT_KEYS
from furca.runtime.sampling_params import SamplingParams
from furca.server import openai_format as fmt
from furca.server import tools as toolmod
from furca.server.errors import APIError
from furca.server.openai_stream import chat_chunks, completion_chunks
from furca.server.protocol import ChatCompletionRequest, ChatMessage, CompletionRequest
from furca.server.state import ServerState
from furca.server.streaming import SSEResponse, cancel_on_disconnect

logger = logging.getLogger("furca.server")
router = APIRouter()


def _state(request: Request) -> ServerState:
    return request.app.state.furca


def check_model(state: ServerState, name: str | None) -> None:
    state.require_engine()
    if name is None or name in (state.model_name, str(getattr(state.engine, "model_path", None))):
        return
    raise APIError(404, f"The model `{name}` does not exist; this server serves `{state.model_name}`",
                   param="model", code="model_not_found")


def sampling_params(req, max_new_tokens: int, defaults: dict[str, Any], **extra: Any) -> SamplingParams:
    d: dict[str, Any] = {
        "max_new_tokens": max_new_tokens, "n": req.n, "stop": req.stop, "temperature": req.temperature,
        "top_p": req.top_p, "top_k": req.top_k, "min_p": req.min_p, "seed": req.seed,
        "repetition_penalty": req.repetition_penalty, "frequency_penalty": req.frequency_penalty,
        "presence_penalty": req.presence_penalty, "min_new_tokens": req.min_tokens,
        "ignore_eos": req.ignore_eos, "stop_token_ids": req.stop_token_ids,
        "skip_special_tokens": req.skip_special_tokens, "regex": req.regex, "ebnf": req.ebnf,
        "json_schema": req.json_schema,
    }
    rf = req.response_format
    if rf is not None and rf.type == "json_object":
        d["json_object"] = True
    elif rf is not None and rf.type == "json_schema":
        d["json_schema"] = rf.json_schema.schema_
    d.update({k: v for k, v in extra.items() if v is not None})
    for key in MODEL_DEFAULT_KEYS:
        if d.get(key) is None and defaults.get(key) is not None:
            d[key] = defaults[key]
    return SamplingParams.from_dict(d)


def _message_dict(m: ChatMessage) -> dict[str, Any]:
    d: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
    if m.name:
        d["name"] = m.name
    if m.tool_call_id:
        d["tool_call_id"] = m.tool_call_id
    if m.tool_calls:
        calls = []
        for c in m.tool_calls:
            try:
                args: Any = json.loads(c.function.arguments)
            except json.JSONDecodeError:
                args = c.function.arguments
            calls.append({"id": c.id, "type": "function",
                          "function": {"name": c.function.name, "arguments": args}})
        d["tool_calls"] = calls
    return d


# -- chat ---------------------------------------------------------------------------------------


@router.post("/v1/chat/completions")
async def chat_completions(req: ChatCompletionRequest, request: Request):
    state = _state(request)
    check_model(state, req.model)
    mode = toolmod.tool_mode(req.tools, req.tool_choice)
    tools = toolmod.tool_dicts(req.tools) if mode.kind != "none" else None
    messages = [_message_dict(m) for m in req.messages]

    def build_prompt() -> list[int]:
        text = state.renderer.render(messages, tools, continue_final_message=req.continue_final_message,
                                     template_kwargs=req.chat_template_kwargs)
        return state.tokenizer.encode(text, add_special_tokens=False)

    ids = await asyncio.to_thread(build_prompt)
    max_new = state.check_context(len(ids), req.max_completion_tokens or req.max_tokens)
    extra = toolmod.constraint_fields(mode, req.tools or [], req.parallel_tool_calls, state.tool_tags)
    if extra and mode.kind == "auto" and (req.regex or req.ebnf or req.json_schema or req.response_format):
        extra = {}  # the user's own constraint wins over the optional tool-call tag
    params = sampling_params(req, max_new, state.engine.generation_defaults, **extra,
                             return_logprob=req.logprobs or None, top_logprobs_num=req.top_logprobs or None,
                             return_text_in_logprobs=req.logprobs or None)
    ticket = state.admit(req.n)
    rid = req.rid or f"chatcmpl-{uuid.uuid4().hex}"
    stream = await state.start([ids], [params], ticket, rids=[rid])
    if req.stream:
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        return SSEResponse(chat_chunks(state, stream, req, mode, rid, include_usage), on_close=stream.aclose)
    outs = await cancel_on_disconnect(request, stream.collect())
    choices = []
    for i, out in enumerate(outs):
        meta = out["meta_info"]
        content, calls = toolmod.parse_output(mode, out["text"], req.tools or [])
        reason = fmt.finish_reason(meta)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
            if reason == "stop":
                reason = "tool_calls"
        choices.append({"index": i, "message": message,
                        "logprobs": fmt.chat_logprobs(meta, req.top_logprobs or 0) if req.logprobs else None,
                        "finish_reason": reason, "matched_stop": fmt.matched_stop(meta)})
    body = fmt.envelope("chat.completion", rid, state.model_name)
    body.update(choices=choices, usage=fmt.usage([o["meta_info"] for o in outs]))
    _log(state, "chat", rid, body)
    return body


# -- completions -----------------------------------------------------------------------------


@router.post("/v1/completions")
async def completions(req: CompletionRequest, request: Request):
    state = _state(request)
    check_model(state, req.model)
    p = req.prompt
    if isinstance(p, str) or (p and isinstance(p[0], str)):
        texts = [p] if isinstance(p, str) else list(p)
        if any(t == "" for t in texts):
            raise APIError(400, "prompt must not be empty", param="prompt")
        prompts = await asyncio.to_thread(lambda: [state.tokenizer.encode(t, add_special_tokens=True)
                                                   for t in texts])
    else:
        prompts = [list(p)] if isinstance(p[0], int) else [list(x) for x in p]
        vocab = len(state.tokenizer.hf)
        for x in prompts:
            if not x:
                raise APIError(400, "prompt token lists must not be empty", param="prompt")
            if any(not 0 <= t < vocab for t in x):
                raise APIError(400, f"prompt token ids must be in [0, {vocab})", param="prompt")
    max_new = [state.check_context(len(x), req.max_tokens, where="prompt") for x in prompts]
    want_lp = req.logprobs is not None
    params = [sampling_params(req, m, state.engine.generation_defaults, return_logprob=want_lp or None,
                              top_logprobs_num=req.logprobs or None, return_text_in_logprobs=want_lp or None)
              for m in max_new]
    echo = [state.tokenizer.decode(x, skip_special_tokens=True) if req.echo else "" for x in prompts]
    ticket = state.admit(req.n * len(prompts))
    rid = req.rid or f"cmpl-{uuid.uuid4().hex}"
    rids = [rid] if len(prompts) == 1 else [f"{rid}-p{i}" for i in range(len(prompts))]
    stream = await state.start(prompts, params, ticket, rids=rids)
    n = req.n
    if req.stream:
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        return SSEResponse(completion_chunks(state, stream, req, rid, echo, len(prompts), include_usage),
                           on_close=stream.aclose)
    outs = await cancel_on_disconnect(request, stream.collect())
    choices = []
    for i, out in enumerate(outs):
        meta = out["meta_info"]
        choices.append({"index": i, "text": echo[i // n] + out["text"],
                        "logprobs": fmt.completion_logprobs(meta, req.logprobs or 0) if want_lp else None,
                        "finish_reason": fmt.finish_reason(meta), "matched_stop": fmt.matched_stop(meta)})
    body = fmt.envelope("text_completion", rid, state.model_name)
    body.update(choices=choices, usage=fmt.usage([o["meta_info"] for o in outs], len(prompts)))
    _log(state, "completion", rid, body)
    return body


# -- models ----------------------------------------------------------------------------------


def _model_card(state: ServerState) -> dict[str, Any]:
    return {"id": state.model_name, "object": "model", "created": state.created, "owned_by": "furca",
            "root": str(getattr(state.engine, "model_path", None) or state.model_name),
            "max_model_len": state.context_length}


@router.get("/v1/models")
async def list_models(request: Request):
    state = _state(request)
    state.require_engine()
    return {"object": "list", "data": [_model_card(state)]}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request):
    state = _state(request)
    check_model(state, model_id)
    return _model_card(state)


def _log(state: ServerState, kind: str, rid: str, body: dict[str, Any]) -> None:
    if state.args.log_requests:
        logger.info("%s %s: %s", kind, rid, json.dumps(body)[:2000])
