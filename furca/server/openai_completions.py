"""``/v1/completions``: text (or token-id) prompts, one or a batch, with ``n`` samples each.

``echo`` puts the prompt's text before each choice's; with ``logprobs`` it also scores the
prompt (scoring.py: the request lm-evaluation-harness sends, ``echo`` + ``logprobs`` +
``max_tokens`` 0 or 1, and the DSL's `select` through `OpenAI`).
"""

from __future__ import annotations

import asyncio
import uuid

from fastapi import APIRouter, Request

from furca.server import openai_format as fmt
from furca.server import openapi_doc as doc
from furca.server import scoring
from furca.server.errors import APIError
from furca.server.openai_common import (check_model, log_answer,
                                        sampling_params, state_of)
from furca.server.openai_stream import completion_chunks
from furca.server.protocol import CompletionRequest
from furca.server.state import ServerState
from furca.server.streaming import SSEResponse, cancel_on_disconnect

router = APIRouter()


async def _prompt_ids(state: ServerState, req: CompletionRequest) -> list[list[int]]:
    p = req.prompt
    state.check_sequences(req.n * (1 if isinstance(p, str) or isinstance(p[0], int) else len(p)))
    if isinstance(p, str) or isinstance(p[0], str):
        texts = [p] if isinstance(p, str) else list(p)
        if any(t == "" for t in texts):
            raise APIError(400, "prompt must not be empty", param="prompt")
        state.check_text_length(max(len(t) for t in texts))
        return await asyncio.to_thread(lambda: [state.tokenizer.encode(t, add_special_tokens=True) for t in texts])
    prompts = [list(p)] if isinstance(p[0], int) else [list(x) for x in p]
    vocab = len(state.tokenizer.hf)
    for i, x in enumerate(prompts):
        where = "prompt" if isinstance(p[0], int) else f"prompt[{i}]"
        if not x:
            raise APIError(400, "prompt token lists must not be empty", param=where)
        if any(not 0 <= t < vocab for t in x):
            raise APIError(400, f"prompt token ids must be in [0, {vocab})", param=where)
    return prompts


@router.post("/v1/completions", responses={**doc.JSON_OR_SSE, **doc.GENERATES})
async def completions(req: CompletionRequest, request: Request):
    state = state_of(request)
    check_model(state, req.model)
    prompts = await _prompt_ids(state, req)
    max_new = [state.check_context(len(x), req.max_tokens, where="prompt") for x in prompts]
    want_lp = req.logprobs is not None
    score_prompt = want_lp and req.echo
    params = [sampling_params(state, req, m, return_logprob=want_lp or None, top_logprobs_num=req.logprobs or None,
                              return_text_in_logprobs=want_lp or None, logprob_start_len=0 if score_prompt else None)
              for m in max_new]
    echo = [state.tokenizer.decode(x, skip_special_tokens=True) if req.echo else "" for x in prompts]
    ticket = state.admit(req.n * len(prompts))
    rid = req.rid or f"cmpl-{uuid.uuid4().hex}"
    rids = [rid] if len(prompts) == 1 else [f"{rid}-p{i}" for i in range(len(prompts))]
    stream = await state.start(prompts, params, ticket, rids=rids, request_rid=rid)  # abort(rid): the batch
    n = req.n

    def logprobs(i: int, meta: dict):
        if not want_lp:
            return None
        return scoring.completion_logprobs(meta, req.logprobs or 0, state.tokenizer, prompts[i // n], req.echo)

    if req.stream:
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        return SSEResponse(completion_chunks(state, stream, req, rid, echo, len(prompts), include_usage, prompts),
                           on_close=stream.aclose)
    outs = await cancel_on_disconnect(request, stream.collect())
    choices = []
    for i, out in enumerate(outs):
        meta = out["meta_info"]
        lp = await asyncio.to_thread(logprobs, i, meta) if score_prompt else logprobs(i, meta)
        choices.append({"index": i, "text": echo[i // n] + out["text"], "logprobs": lp,
                        "finish_reason": fmt.finish_reason(meta), "matched_stop": fmt.matched_stop(meta)})
    body = fmt.envelope("text_completion", rid, state.model_name)
    body.update(choices=choices, usage=fmt.usage([o["meta_info"] for o in outs], len(prompts)))
    log_answer(state, "completion", rid, body)
    return body
