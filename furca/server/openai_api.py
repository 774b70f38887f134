"""OpenAI-compatible routes: /v1/chat/completions and /v1/models here, /v1/completions in
openai_completions.py (included in this router).

Each handler: check the model name, build the prompt ids off the event loop, check the
context, build `SamplingParams`, admit, start the engine stream, then either collect it
(non-streaming, cancelled if the client leaves) or stream SSE chunks from it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from fastapi import APIRouter, Request

from furca.server import legacy_functions as legacy
from furca.server import openapi_doc as doc
from furca.server import openai_format as fmt
from furca.server import tools as toolmod
from furca.server.openai_common import (check_model, log_answer,
                                        sampling_params, state_of)
from furca.server.openai_completions import router as completions_router
from furca.server.openai_stream import chat_chunks
from furca.server.protocol import ChatCompletionRequest, ChatMessage
from furca.server.state import ServerState
from furca.server.streaming import SSEResponse, cancel_on_disconnect

router = APIRouter()
router.include_router(completions_router)


def _call_dict(c: Any) -> dict[str, Any]:
    try:
        args: Any = json.loads(c.arguments)
    except json.JSONDecodeError:
        args = c.arguments
    return {"name": c.name, "arguments": args}


def _message_dict(m: ChatMessage) -> dict[str, Any]:
    """A request message as the chat template receives it; the legacy ``function`` role
    and ``function_call`` become a tool result and a tool call."""
    role = {"developer": "system", "function": "tool"}.get(m.role, m.role)
    has_calls = bool(getattr(m, "tool_calls", None) or getattr(m, "function_call", None))
    # an assistant turn without content or calls renders as an empty turn
    d: dict[str, Any] = {"role": role, "content": m.text() if m.text() is not None or has_calls else ""}
    if m.name:
        d["name"] = m.name
    if getattr(m, "tool_call_id", None):
        d["tool_call_id"] = m.tool_call_id
    calls = [(c.id, c.function) for c in getattr(m, "tool_calls", None) or []]
    if getattr(m, "function_call", None) is not None:
        calls.append((None, m.function_call))
    if calls:
        d["tool_calls"] = [{"id": cid, "type": "function", "function": _call_dict(fn)}
                           for cid, fn in calls]
    return d


def _choice(i: int, out: dict[str, Any], mode: toolmod.ToolMode, req: ChatCompletionRequest) -> dict[str, Any]:
    meta = out["meta_info"]
    content, calls = toolmod.parse_output(mode, out["text"], req.tools or [])
    called = bool(calls) and toolmod.calls_complete(mode, out["text"], calls)
    if req.legacy_functions:
        message = fmt.chat_message(content, [], legacy.function_call(calls))
    else:
        message = fmt.chat_message(content, calls)
    return {"index": i, "message": message,
            "logprobs": fmt.chat_logprobs(meta, req.top_logprobs or 0) if req.logprobs else None,
            "finish_reason": fmt.tool_finish_reason(meta, called, req.legacy_functions),
            "matched_stop": fmt.matched_stop(meta)}


@router.post("/v1/chat/completions", responses={**doc.JSON_OR_SSE, **doc.GENERATES})
async def chat_completions(req: ChatCompletionRequest, request: Request):
    state = state_of(request)
    check_model(state, req.model)
    state.check_sequences(req.n)
    state.check_text_length(sum(len(m.text() or "") for m in req.messages), where="messages")
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
    params = sampling_params(state, req, max_new, **extra, return_logprob=req.logprobs or None,
                             top_logprobs_num=req.top_logprobs or None, return_text_in_logprobs=req.logprobs or None)
    ticket = state.admit(req.n)
    rid = req.rid or f"chatcmpl-{uuid.uuid4().hex}"
    stream = await state.start([ids], [params], ticket, rids=[rid])
    if req.stream:
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        return SSEResponse(chat_chunks(state, stream, req, mode, rid, include_usage), on_close=stream.aclose)
    outs = await cancel_on_disconnect(request, stream.collect())
    body = fmt.envelope("chat.completion", rid, state.model_name)
    body.update(choices=[_choice(i, out, mode, req) for i, out in enumerate(outs)],
                usage=fmt.usage([o["meta_info"] for o in outs]))
    log_answer(state, "chat", rid, body)
    return body


# -- models ----------------------------------------------------------------------------------


def _model_card(state: ServerState) -> dict[str, Any]:
    return {"id": state.model_name, "object": "model", "created": state.created, "owned_by": "furca",
            "root": state.shown_model_path() or state.model_name,  # the id; the path with --expose-model-path
            "max_model_len": state.context_length, "shutdown_date": None}


@router.get("/v1/models", responses=doc.READS)
async def list_models(request: Request):
    state = state_of(request)
    state.require_engine()
    return {"object": "list", "data": [_model_card(state)]}


@router.get("/v1/models/{model_id:path}", responses=doc.READS_BY_ID)
async def get_model(model_id: str, request: Request):
    """The served model by its id, its path or ``default``; the card has its real id."""
    state = state_of(request)
    check_model(state, model_id)
    return _model_card(state)

