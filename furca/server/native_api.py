"""SGLang's native API: /generate, /get_model_info, /server_info, /flush_cache,
/abort_request, /tokenize, /detokenize, /health, /health_generate.

``/generate`` answers like SGLang's: ``{"text", "output_ids", "meta_info"}`` for one
prompt with n == 1, else a list in input order (a prompt's n samples adjacent); with
``stream`` each SSE event holds the cumulative text and ids of one output (``index``),
and the stream ends with ``data: [DONE]``. With ``return_logprob`` each event's meta_info
holds that event's logprob entries and their cumulative count (`_logprob_segments`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from furca.runtime.output import StreamDelta
from furca.runtime.request_builder import MODEL_DEFAULT_KEYS
from furca.runtime.sampling_params import SamplingParams
from furca.runtime.token_healing import for_text_prompt
from furca.server import openapi_doc as doc
from furca.server.errors import APIError, error_body, stream_error_body
from furca.server.protocol import AbortRequest, DetokenizeRequest, GenerateRequest, TokenizeRequest
from furca.server.redact import hide_paths
from furca.server.sessions_api import check_session
from furca.server.state import EngineStream, ServerState, Ticket
from furca.server.streaming import SSE_DONE, SSEResponse, cancel_on_disconnect, sse

logger = logging.getLogger("furca.server")
router = APIRouter()


def _state(request: Request) -> ServerState:
    return request.app.state.furca


def _params(req: GenerateRequest, num: int, defaults: dict[str, Any]) -> list[SamplingParams]:
    raw = req.sampling_params
    if isinstance(raw, list):
        if len(raw) != num:
            raise APIError(400, f"got {len(raw)} sampling_params for {num} prompts", param="sampling_params")
        dicts = [d.given() for d in raw]
    else:
        dicts = [raw.given() if raw is not None else {} for _ in range(num)]
    out = []
    for d in dicts:
        if req.return_logprob:
            d.update(return_logprob=True, logprob_start_len=req.logprob_start_len,
                     top_logprobs_num=req.top_logprobs_num, return_text_in_logprobs=req.return_text_in_logprobs)
        for key in MODEL_DEFAULT_KEYS:
            if d.get(key) is None and defaults.get(key) is not None:
                d[key] = defaults[key]
        out.append(SamplingParams.from_dict(d))
    return out


@router.post("/generate", responses={**doc.JSON_OR_SSE, **doc.GENERATES})
async def generate(req: GenerateRequest, request: Request):
    state = _state(request)
    state.require_engine()
    _check_size(state, req)
    if req.text is not None:
        texts = [req.text] if isinstance(req.text, str) else list(req.text)
        if not texts or any(t == "" for t in texts):
            raise APIError(400, "text must be a non-empty string or a non-empty list of them", param="text")
        state.check_text_length(max(len(t) for t in texts))
        prompts = await asyncio.to_thread(lambda: [state.tokenizer.encode(t, add_special_tokens=True)
                                                   for t in texts])
        is_batch = not isinstance(req.text, str)
    else:
        ids = req.input_ids
        is_batch = bool(ids) and isinstance(ids[0], list)
        prompts = [list(x) for x in ids] if is_batch else [list(ids)]
        if not prompts or any(not x for x in prompts):
            raise APIError(400, "input_ids must be a non-empty list[int] or list[list[int]]", param="input_ids")
    params = _params(req, len(prompts), state.engine.generation_defaults)
    if req.text is not None:  # tokenized here: token healing's default is a text prompt's
        params = [for_text_prompt(p) for p in params]
    for x, p in zip(prompts, params):
        state.check_context(len(x), p.max_new_tokens, where="prompt")
    rids = _rids(req.rid, len(prompts), is_batch)
    check_session(state, req.session_id)
    ticket = state.admit(sum(p.n for p in params))
    stream = await state.start(prompts, params, ticket, rids=rids, session_id=req.session_id)
    if req.stream:
        return SSEResponse(_stream(stream, [len(x) for x in prompts], params), on_close=stream.aclose)
    outs = await cancel_on_disconnect(request, stream.collect())
    if not is_batch and len(outs) == 1:
        return outs[0]
    return outs


def _check_size(state: ServerState, req: GenerateRequest) -> None:
    """n x prompts within the engine's running batch (ServerState.check_sequences)."""
    source = req.text if req.text is not None else req.input_ids
    num = 1 if isinstance(source, str) or not source or not isinstance(source[0], (str, list)) else len(source)
    sp = req.sampling_params
    per_prompt = [d.n or 1 for d in sp] if isinstance(sp, list) else [(sp.n if sp is not None else None) or 1] * num
    state.check_sequences(sum(per_prompt), param="sampling_params.n")


def _rids(rid: Any, num: int, is_batch: bool) -> list[str] | None:
    if rid is None:
        return None
    if isinstance(rid, str) and not is_batch:
        return [rid]
    if isinstance(rid, list) and len(rid) == num and len(set(rid)) == num:
        return list(rid)
    raise APIError(400, f"rid must be a str (one prompt) or a list of {num} distinct str (a batch)", param="rid")


async def _stream(stream: EngineStream, prompt_lens: list[int], params: list[SamplingParams]) -> AsyncIterator[str]:
    prompt_of = [i for i, p in enumerate(params) for _ in range(p.n)]
    texts = [""] * stream.num_outputs
    ids: list[list[int]] = [[] for _ in range(stream.num_outputs)]
    num_logprobs = [0] * stream.num_outputs  # output_token_logprobs_length: entries streamed so far
    try:
        async for i, delta in stream:
            texts[i] += delta.text
            delta.apply_ids(ids[i])  # jump-forward may take back ids streamed before
            if delta.finished:
                meta = dict(delta.meta_info or {})
            else:
                meta = {"id": delta.rid, "finish_reason": None, "prompt_tokens": prompt_lens[prompt_of[i]],
                        "completion_tokens": len(ids[i])}
            p = params[prompt_of[i]]
            if p.return_logprob:
                num_logprobs[i] += len(delta.output_token_logprobs or []) - delta.logprob_retract
                _logprob_segments(meta, delta, p.top_logprobs_num > 0, num_logprobs[i])
            yield sse({"text": texts[i], "output_ids": ids[i], "meta_info": meta, "index": i})
    except Exception as e:  # noqa: BLE001 - the headers are sent: report in the stream
        yield sse(stream_error_body(e))
    finally:
        await stream.aclose()
    yield SSE_DONE


def _logprob_segments(meta: dict[str, Any], delta: StreamDelta, top: bool, length: int) -> None:
    """An event's logprobs, as SGLang streams them (its ``incremental_streaming_output``):
    ``output_token_logprobs`` / ``output_top_logprobs`` hold this event's entries only,
    ``output_token_logprobs_length`` counts all so far. After a retraction (jump-forward
    re-tokenized tokens already streamed) the entries so far are ``merged[:length -
    len(segment)] + segment``; without one that is plain concatenation. The prompt's
    logprobs stay in the final event (SGLang's frontend keeps the last event's meta_info)."""
    meta["output_token_logprobs"] = delta.output_token_logprobs or []
    if top:
        meta["output_top_logprobs"] = delta.output_top_logprobs or []
    meta["output_token_logprobs_length"] = length


@router.get("/get_model_info", responses=doc.READS)
async def get_model_info(request: Request):
    state = _state(request)
    engine = state.require_engine()
    path = state.shown_model_path()  # the model id; the whole path with --expose-model-path
    tok = engine.tokenizer
    # the template the server renders chats with (--chat-template, else the model's; None:
    # the ChatML fallback), and the special tokens it sees, so a client renders the same
    return {"model_path": path, "tokenizer_path": path, "is_generation": True,
            "served_model_name": state.model_name, "context_length": state.context_length,
            "max_total_tokens": int(engine.capacity),
            "chat_template": state.renderer.template if state.renderer is not None else None,
            "bos_token": getattr(tok, "bos_token", None), "eos_token": getattr(tok, "eos_token", None)}


@router.get("/server_info", responses=doc.READS)
@router.get("/get_server_info", responses=doc.READS)
async def server_info(request: Request):
    state = _state(request)
    engine = state.require_engine()
    info = await asyncio.to_thread(engine.get_server_info)
    state.metrics.update_from_engine(info)
    info["server"] = {"num_inflight": state.num_inflight, "num_active_rids": len(state.active_rids),
                      "active_rids": sorted(state.active_rids),
                      "draining": state.draining, "served_model_name": state.model_name,
                      "max_queued_requests": state.args.max_queued_requests,
                      "constrained_decoding": engine.grammar_backend is not None,
                      "structural_tags": state.tool_tags,
                      "args": _server_args(state)}
    return hide_paths(info, state)  # the model's directory only with --expose-model-path


def _server_args(state: ServerState) -> dict[str, Any]:
    """The HTTP layer's options as given (the engine's are ``config`` / ``effective_config``);
    the API key is never shown."""
    out = {f.name: getattr(state.args, f.name) for f in dataclasses.fields(state.args) if f.name != "engine"}
    if out.get("api_key") is not None:
        out["api_key"] = "<set>"
    return out


# POST only: a cross-site GET (a link, an <img>) must not change state
@router.post("/flush_cache", operation_id="flush_cache", responses=doc.error_responses(400, 401, 413, 503))
async def flush_cache(request: Request):
    state = _state(request)
    engine = state.require_engine()
    if await asyncio.to_thread(engine.flush_cache):
        return {"message": "Cache flushed."}
    raise APIError(400, "Cache not flushed: requests are queued or running; retry when the server is idle")


@router.post("/abort_request", responses=doc.error_responses(400, 401, 404, 413, 503))
async def abort_request(req: AbortRequest, request: Request):
    """Abort every engine request the HTTP request with rid ``req.rid`` started (a batch
    completion's prompts, every sample of ``n``); 404 when none is in flight. With
    ``abort_all: true``, every request in flight (200 whatever their number)."""
    state = _state(request)
    state.require_engine()
    if req.abort_all:
        return {"message": f"abort requested for {state.abort_all()} requests"}
    if not state.abort(req.rid):
        raise APIError(404, f"no request with rid {req.rid!r} is queued or running", param="rid",
                       code="rid_not_found")
    return {"message": f"abort requested for {req.rid!r}"}


@router.post("/tokenize", responses=doc.TAKES_BODY)
async def tokenize(req: TokenizeRequest, request: Request):
    state = _state(request)
    state.require_engine()
    source = req.prompt if req.prompt is not None else req.text
    tok = state.tokenizer

    def encode() -> tuple[Any, Any]:
        if isinstance(source, list):
            tokens = [tok.encode(s, add_special_tokens=req.add_special_tokens) for s in source]
            return tokens, [len(t) for t in tokens]
        tokens = tok.encode(source, add_special_tokens=req.add_special_tokens)
        return tokens, len(tokens)

    tokens, count = await asyncio.to_thread(encode)
    return {"tokens": tokens, "count": count, "max_model_len": state.context_length}


@router.post("/detokenize", responses=doc.TAKES_BODY)
async def detokenize(req: DetokenizeRequest, request: Request):
    state = _state(request)
    state.require_engine()
    vocab = len(state.tokenizer.hf)
    bad = [t for t in req.tokens if not 0 <= t < vocab]
    if bad:
        raise APIError(400, f"token id {bad[0]} is outside the vocabulary [0, {vocab})", param="tokens")
    text = await asyncio.to_thread(state.tokenizer.decode, req.tokens, req.skip_special_tokens)
    return {"text": text}


@router.get("/health", response_class=Response, responses={**doc.NO_BODY, **doc.error_responses(503)})
async def health(request: Request):
    state = _state(request)
    if state.ready and not state.draining and not state.engine.is_closed:
        return Response(status_code=200)
    death = state.engine_death
    why = (f"the engine died: {death}" if death is not None else "draining" if state.draining
           else "failed to load" if state.load_error else "starting")
    return JSONResponse(error_body(503, f"not ready: {why}"), status_code=503)


@router.get("/health_generate", response_class=Response,
            responses={**doc.NO_BODY, **doc.error_responses(401, 503)})
async def health_generate(request: Request):
    state = _state(request)
    state.require_engine()
    if state.draining:
        raise APIError(503, "the server is shutting down")
    params = SamplingParams(max_new_tokens=1, temperature=0.0)
    stream = await state.start([[state.tokenizer.eos_token_ids[0]]], [params], Ticket(state, 0))
    outs = await cancel_on_disconnect(request, stream.collect())
    if outs[0]["meta_info"].get("completion_tokens") != 1:
        raise APIError(503, f"health generation failed: {outs[0]['meta_info']}")
    return Response(status_code=200)
