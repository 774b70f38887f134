"""Legacy completions logprobs, echo included: how lm-evaluation-harness and the DSL's
`select` score text through ``/v1/completions``.

``echo=true`` with ``logprobs=N`` returns the prompt's tokens before the completion's, as
vLLM does: ``tokens``, ``token_logprobs``, ``top_logprobs`` and ``text_offset`` cover the
prompt then the completion; the first prompt token has no logprob (null, and null
``top_logprobs``). The engine scores the prompt (``logprob_start_len=0``,
``top_logprobs_num=N``; ``max_tokens=0`` scores without generating).

Token texts come from incremental detokenization, so they add up to the answer's text
(a character split over tokens goes with the token that completes it) and ``text_offset``
indexes it. ``top_logprobs`` maps each alternative's own text to its logprob; when two
alternatives of one position share a text, the more likely keeps it and the other is
keyed ``token_id:<id>`` (vLLM's spelling for tokens as ids).
"""

from __future__ import annotations

from typing import Any, Sequence

from furca.runtime.detokenizer import IncrementalDetokenizer


def token_texts(tokenizer: Any, ids: Sequence[int], context: Sequence[int] = ()) -> list[str]:
    """Per token, its piece of ``decode(ids)`` (the text that follows `context`)."""
    det = IncrementalDetokenizer(tokenizer, prompt_ids=list(context) or None, skip_special_tokens=True)
    texts = [det.add(t) for t in ids]
    if texts:
        texts[-1] += det.flush()
    return texts


def _top_dict(alts: list, num_top: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for logprob, token_id, text in alts[:num_top]:
        key = text if text is not None and text not in out else f"token_id:{token_id}"
        out[key] = float(logprob)
    return out


def format_logprobs(entries: Sequence[list], tops: Sequence[list | None], tokens: Sequence[str], num_top: int,
                    offset: int = 0) -> dict[str, Any]:
    """The legacy shape of meta_info entries, their top alternatives and their token texts:
    ``tokens``, ``token_logprobs``, ``top_logprobs`` (None unless ``num_top``) and
    ``text_offset`` (from ``offset``, where the tokens' text begins in the answer)."""
    offsets = []
    for t in tokens:
        offsets.append(offset)
        offset += len(t)
    logprobs = [None if e[0] is None else float(e[0]) for e in entries]
    top = [None if lp is None else _top_dict(alts or [], num_top) for lp, alts in zip(logprobs, tops)]
    return {"tokens": list(tokens), "token_logprobs": logprobs, "top_logprobs": top if num_top else None,
            "text_offset": offsets}


def completion_logprobs(meta: dict[str, Any], num_top: int, tokenizer: Any, prompt_ids: Sequence[int],
                        echo: bool) -> dict[str, Any] | None:
    """``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`` of one choice: the
    completion's tokens, after the prompt's with `echo` (meta_info from a request with
    ``return_logprob``, ``return_text_in_logprobs``, and ``logprob_start_len=0`` for echo)."""
    out_entries = meta.get("output_token_logprobs")
    if out_entries is None:
        return None
    out_tops = meta.get("output_top_logprobs") or [None] * len(out_entries)
    out_ids = [e[1] for e in out_entries]
    entries, tops, tokens = list(out_entries), list(out_tops), token_texts(tokenizer, out_ids, prompt_ids)
    if echo:
        in_entries = meta.get("input_token_logprobs") or []
        if len(in_entries) != len(prompt_ids):
            raise RuntimeError(f"the engine scored {len(in_entries)} of {len(prompt_ids)} prompt tokens (a bug)")
        in_tops = meta.get("input_top_logprobs") or [None] * len(in_entries)
        tokens = token_texts(tokenizer, prompt_ids) + tokens
        entries, tops = list(in_entries) + entries, list(in_tops) + tops
    return format_logprobs(entries, tops, tokens, num_top)
