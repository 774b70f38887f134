"""What ``Engine.generate`` returns: ``Output`` (one finished request) and ``StreamDelta``
(one streamed piece), shaped like SGLang's ``/generate`` response.

``meta_info`` keys (as SGLang's native API): ``id``, ``prompt_tokens``,
``completion_tokens``, ``cached_tokens``, ``finish_reason`` and, when logprobs were
requested, ``input_token_logprobs`` / ``output_token_logprobs`` (lists of
``[logprob, token_id, text | None]``) and ``input_top_logprobs`` /
``output_top_logprobs`` (per position, a list of such triples, or None).

Finish reasons (SGLang's JSON)::

    {"type": "stop", "matched": <token id: int> | <stop string: str>}
    {"type": "length", "length": <max_new_tokens>}
    {"type": "abort", "message": <why>}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence


def finish_stop(matched: int | str | None) -> dict[str, Any]:
    return {"type": "stop", "matched": matched}


def finish_length(length: int) -> dict[str, Any]:
    return {"type": "length", "length": length}


def finish_abort(message: str = "aborted") -> dict[str, Any]:
    return {"type": "abort", "message": message}


LogprobEntry = list  # [logprob: float, token_id: int, text: str | None]


def logprob_entries(
    logprobs: Sequence[float], token_ids: Sequence[int], decode: Callable[[int], str] | None = None
) -> list[LogprobEntry]:
    """``[[logprob, token_id, text|None], ...]``; ``decode`` (one id -> text) when
    ``return_text_in_logprobs``."""
    return [[float(lp), int(t), decode(int(t)) if decode else None] for lp, t in zip(logprobs, token_ids)]


def top_logprob_entries(
    top: Sequence[Sequence[tuple[float, int]] | None], decode: Callable[[int], str] | None = None
) -> list[list[LogprobEntry] | None]:
    """Per position, the ``(logprob, token_id)`` pairs from ``compute_logprobs`` as triples."""
    return [
        None if pairs is None else logprob_entries([p[0] for p in pairs], [p[1] for p in pairs], decode)
        for pairs in top
    ]


def build_meta_info(
    rid: str,
    *,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int,
    finish_reason: dict[str, Any] | None,
    input_token_logprobs: list[LogprobEntry] | None = None,
    output_token_logprobs: list[LogprobEntry] | None = None,
    input_top_logprobs: list[list[LogprobEntry] | None] | None = None,
    output_top_logprobs: list[list[LogprobEntry] | None] | None = None,
) -> dict[str, Any]:
    """``meta_info`` with SGLang's keys; logprob keys only when given (not None)."""
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": finish_reason,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "cached_tokens": cached_tokens,
    }
    optional = {
        "input_token_logprobs": input_token_logprobs,
        "output_token_logprobs": output_token_logprobs,
        "input_top_logprobs": input_top_logprobs,
        "output_top_logprobs": output_top_logprobs,
    }
    meta.update({k: v for k, v in optional.items() if v is not None})
    return meta


class _DictLike:
    """``obj["text"]``, ``"text" in obj``, ``obj.get``, ``keys()``, like SGLang's dict output."""

    _KEYS: tuple[str, ...] = ()

    def __getitem__(self, key: str) -> Any:
        if key not in self._KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self._KEYS

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self._KEYS else default

    def keys(self) -> tuple[str, ...]:
        return self._KEYS

    def __iter__(self) -> Iterator[str]:
        return iter(self._KEYS)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._KEYS}


@dataclass
class Output(_DictLike):
    """One finished request. ``out["text"]``, ``out["output_ids"]``, ``out["meta_info"]``
    work as on SGLang's ``Engine.generate`` dict; ``to_dict()`` is the JSON body."""

    rid: str
    text: str
    output_ids: list[int]
    meta_info: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("text", "output_ids", "meta_info")

    @property
    def finish_reason(self) -> dict[str, Any] | None:
        return self.meta_info.get("finish_reason")


@dataclass
class StreamDelta(_DictLike):
    """One streamed piece of a request: new ``text`` and ``token_ids`` since the last delta.

    ``retract``: how many trailing ids of the ids streamed so far (the earlier deltas'
    ``token_ids``, their retractions applied) to drop *before* appending this delta's
    ``token_ids``. Jump-forward re-tokenization can replace tokens that were already
    streamed; the text never changes that way (it only grows), so ``text`` deltas need
    no retraction. Applying every delta in order (`apply_ids`) gives, at the end, exactly
    the final ``Output.output_ids``. Usually 0.

    ``finished`` is True on the last delta of a request, which carries the full
    ``meta_info``; earlier deltas carry ``meta_info`` None (or progress, engine's choice).
    ``index`` is the sample's index among its prompt's ``n`` samples (0 when n == 1) and
    ``group_rid`` the rid the caller gave for the prompt (== ``rid`` when n == 1), so a
    caller maps a delta to its output without knowing how sample rids are spelled.
    """

    rid: str
    text: str
    token_ids: list[int]
    finished: bool = False
    meta_info: dict[str, Any] | None = None
    index: int = 0
    group_rid: str | None = None  # None: the same as rid
    retract: int = 0

    _KEYS = ("rid", "text", "token_ids", "finished", "meta_info", "index", "group_rid", "retract")

    def __post_init__(self) -> None:
        if self.group_rid is None:
            self.group_rid = self.rid

    def apply_ids(self, ids: list[int]) -> list[int]:
        """In place: drop ``retract`` trailing ids of ``ids`` (the ids streamed so far),
        append ``token_ids``; returns ``ids``."""
        if self.retract:
            if self.retract > len(ids):
                raise ValueError(f"retract {self.retract} exceeds the {len(ids)} ids streamed so far")
            del ids[len(ids) - self.retract:]
        ids.extend(self.token_ids)
        return ids
