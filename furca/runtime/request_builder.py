"""From `generate`'s arguments to validated `Req` objects (caller's thread).

Everything that can be wrong with a request is found here, before anything reaches the
scheduler, so a bad request holds no slot, row or lock. Errors (all under FurcaError):
`InvalidRequestError` (shape of the arguments, token ids, constraints),
`ContextLengthError` (too long for the context or the KV pool), `SamplingParamsError`.
"""

from __future__ import annotations

import uuid
from numbers import Integral
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from furca.errors import ContextLengthError, InvalidRequestError, SamplingParamsError
from furca.runtime.detokenizer import OutputTextState
from furca.runtime.request import Req
from furca.runtime.sampler import make_generator
from furca.runtime.sampling_params import SamplingParams
from furca.runtime.token_healing import HealedOutputText, healer_for

# generation_config.json keys used as defaults when the caller leaves them out (SGLang's
# `sampling_defaults="model"`)
MODEL_DEFAULT_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


@dataclass
class Limits:
    context_length: int
    pool_capacity: int
    vocab_size: int  # model's logits width: ids must be below it


def _is_int_list(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and all(isinstance(t, Integral) and not isinstance(t, bool) for t in x)


def normalize_prompts(tokenizer, prompt, input_ids) -> tuple[list[list[int]], bool]:
    """-> (token ids per prompt, is_batch)."""
    if prompt is not None and input_ids is not None:
        raise InvalidRequestError("give either prompt or input_ids, not both")
    if prompt is None and input_ids is None:
        raise InvalidRequestError("give a prompt (str or list[str]) or input_ids (list[int] or list[list[int]])")
    if prompt is not None:
        if isinstance(prompt, str):
            texts, is_batch = [prompt], False
        elif isinstance(prompt, (list, tuple)) and prompt and all(isinstance(p, str) for p in prompt):
            texts, is_batch = list(prompt), True
        else:
            raise InvalidRequestError(f"prompt must be a str or a non-empty list of str, got {type(prompt).__name__}")
        for i, text in enumerate(texts):
            if text == "":
                raise InvalidRequestError(f"prompt {i} is empty")
        ids = [tokenizer.encode(t, add_special_tokens=True) for t in texts]
        for i, seq in enumerate(ids):
            if not seq:
                raise InvalidRequestError(f"prompt {i} encodes to no tokens")
        return ids, is_batch
    if hasattr(input_ids, "tolist"):
        input_ids = input_ids.tolist()
    if _is_int_list(input_ids):
        seqs, is_batch = [[int(t) for t in input_ids]], False
    elif isinstance(input_ids, (list, tuple)) and input_ids and all(_is_int_list(s) for s in input_ids):
        seqs, is_batch = [[int(t) for t in s] for s in input_ids], True
    else:
        raise InvalidRequestError("input_ids must be a list[int] or a non-empty list[list[int]]")
    for i, seq in enumerate(seqs):
        if not seq:
            raise InvalidRequestError(f"input_ids {i} is empty")
    return seqs, is_batch


def normalize_params(sampling_params, num: int, model_defaults: dict[str, Any]) -> list[SamplingParams]:
    def one(p) -> SamplingParams:
        if isinstance(p, SamplingParams):
            return p
        if p is not None and not isinstance(p, dict):
            raise SamplingParamsError(f"sampling_params must be a dict or SamplingParams, got {type(p).__name__}")
        d = dict(p or {})
        for key in MODEL_DEFAULT_KEYS:
            if d.get(key) is None and model_defaults.get(key) is not None:
                d[key] = model_defaults[key]
        return SamplingParams.from_dict(d)

    if isinstance(sampling_params, (list, tuple)):
        if len(sampling_params) != num:
            raise InvalidRequestError(f"got {len(sampling_params)} sampling_params for {num} prompts")
        return [one(p) for p in sampling_params]
    shared = one(sampling_params)
    return [shared] * num


def normalize_rids(rid, num: int, is_batch: bool) -> list[str]:
    if rid is None:
        return [uuid.uuid4().hex for _ in range(num)]
    if isinstance(rid, str) and not is_batch:
        return [rid]
    if isinstance(rid, (list, tuple)) and len(rid) == num and all(isinstance(r, str) for r in rid):
        if len(set(rid)) != len(rid):
            raise InvalidRequestError(f"rids must be distinct, got {list(rid)}")
        return list(rid)
    raise InvalidRequestError(f"rid must be a str (one prompt) or a list of {num} str (a batch), got {rid!r}")


def check_request(ids: list[int], p: SamplingParams, limits: Limits, index: int) -> None:
    bad = [t for t in ids if not 0 <= t < limits.vocab_size]
    if bad:
        raise InvalidRequestError(
            f"prompt {index}: token id {bad[0]} is outside the vocabulary [0, {limits.vocab_size})"
        )
    n, ctx = len(ids), limits.context_length
    if n >= ctx:
        raise ContextLengthError(f"prompt {index} has {n} tokens; the context length is {ctx} (prompt must be shorter)")
    if n + p.max_new_tokens > ctx:
        raise ContextLengthError(
            f"prompt {index} has {n} tokens and max_new_tokens is {p.max_new_tokens}: {n + p.max_new_tokens} "
            f"exceeds the context length {ctx}; lower max_new_tokens to at most {ctx - n}"
        )
    if n + p.max_new_tokens > limits.pool_capacity:
        raise ContextLengthError(
            f"prompt {index} has {n} tokens and max_new_tokens is {p.max_new_tokens}: {n + p.max_new_tokens} "
            f"tokens exceed the KV pool ({limits.pool_capacity} tokens); raise the KV budget or shorten the request"
        )
    for name, ids in (("stop_token_ids", p.stop_token_ids), ("logit_bias", [t for t, _ in p.logit_bias])):
        bad = [t for t in ids if t >= limits.vocab_size]
        if bad:
            raise SamplingParamsError(
                f"request {index}: sampling parameter {name} names token id {bad[0]}, outside the "
                f"vocabulary [0, {limits.vocab_size})", param=name
            )
    if p.return_logprob and p.logprob_start_len >= n:
        raise InvalidRequestError(
            f"prompt {index}: logprob_start_len {p.logprob_start_len} must be below the prompt length {n}"
        )


def build_requests(
    *,
    tokenizer,
    prompt,
    input_ids,
    sampling_params,
    rid,
    stream: bool,
    limits: Limits,
    eos_ids: Sequence[int],
    model_defaults: dict[str, Any],
    grammar_backend,
    device,
    make_emit: Callable[[int], Callable[[Any], None]],
) -> tuple[list[Req], bool]:
    """-> (requests in output order, a prompt's n samples adjacent; whether the caller
    gets a list). Raises before creating anything if any request is bad."""
    seqs, is_batch = normalize_prompts(tokenizer, prompt, input_ids)
    params = normalize_params(sampling_params, len(seqs), model_defaults)
    rids = normalize_rids(rid, len(seqs), is_batch)
    for i, (ids, p) in enumerate(zip(seqs, params)):
        check_request(ids, p, limits, i)
        if p.has_constraint and grammar_backend is None:
            raise InvalidRequestError(
                f"constrained decoding not available: request {i} sets {p.constraint[0]} "
                "but this engine has no grammar backend"
            )
    healer = healer_for(tokenizer)
    plans = [None if healer is None else healer.plan(ids, p, prompt is not None) for ids, p in zip(seqs, params)]
    reqs: list[Req] = []
    for ids, p, group_rid, plan in zip(seqs, params, rids, plans):
        if plan is not None:
            ids = list(plan.kept_ids)
        for j in range(p.n):
            index = len(reqs)
            child_rid = group_rid if p.n == 1 else f"{group_rid}-{j}"
            seed = None if p.seed is None else (p.seed + j) % 2**63
            grammar = grammar_backend.create_matcher(p) if p.has_constraint else None
            req = Req(
                rid=child_rid,
                group_rid=group_rid,
                origin_input_ids=list(ids),
                params=p,
                emit=make_emit(index),
                stream=stream,
                sample_index=j,
                detok=(OutputTextState(tokenizer, p, eos_ids=eos_ids, prompt_ids=ids) if plan is None else
                       HealedOutputText(tokenizer, p, prefix_text=plan.text, eos_ids=eos_ids, prompt_ids=ids)),
                grammar=grammar,
                generator=make_generator(seed, device),
            )
            if plan is not None:
                req.grammar = healer.matcher(plan, grammar, _hand_over(req, grammar))
            reqs.append(req)
    return reqs, is_batch or len(reqs) > 1


def _hand_over(req: Req, grammar) -> Callable[[int], None]:
    """Once the healing prefix is spelled: ``req``'s own grammar (or none) takes over, and
    jump-forward never re-tokenizes the healing tokens."""

    def done(_num_tokens: int) -> None:
        req.grammar = grammar
        req.jump.floor = max(req.jump.floor, len(req.output_ids))

    return done
