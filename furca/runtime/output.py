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
    pairs: Sequence[Sequence], decode: Callable[[int], str] | None = None
) -> list[LogprobEntry]:
    """A request's ``[logprob, token_id]`` pairs (logprob None for an unscored first prompt
    token) as ``[[logprob, token_id, text|None], ...]``; ``decode`` (one id -> text) when
    ``return_text_in_logprobs``."""
    return [[lp, t, decode(t) if decode else None] for lp, t in pairs]


def top_logprob_entries(
    top: Sequence[Sequence[tuple[float, int]] | None], decode: Callable[[int], str] | None = None
) -> list[list[LogprobEntry] | None]:
    """Per position, the ``(logprob, token_id)`` pairs from ``compute_logprobs`` as triples."""
    return [None if pairs is None else logprob_entries(pairs, decode) for pairs in top]


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

    Logprobs (``return_logprob`` only; None otherwise): ``output_token_logprobs`` holds the
    entries (``[logprob, token_id, text|None]``, meta_info's format) that became known
    since the previous delta, ``output_top_logprobs`` their top alternatives (when
    ``top_logprobs_num > 0``), after dropping ``logprob_retract`` entries streamed before
    (jump-forward re-tokenization deletes the entries of the tokens it drops). Applying
    every delta in order (`apply_logprobs`) gives exactly the final meta_info's
    ``output_token_logprobs`` / ``output_top_logprobs``. While logprobs were asked for,
    a delta is sent only when every id streamed so far has its entry (forced tokens are
    scored a pass after they are appended; their ids and text wait for it), so after
    each delta the ids and the entries streamed have the same length.
    ``input_token_logprobs`` / ``input_top_logprobs`` (the prompt's, when asked) ride on
    the first delta of the request only.

    ``settled``: how many leading output ids (and their logprob entries) no later delta
    takes back; None means all of them. Only constrained requests with jump-forward leave
    some unsettled (the last few, which re-tokenization may still replace); a consumer that
    cannot retract (an OpenAI stream) sends entries up to ``settled``.
    """

    rid: str
    text: str
    token_ids: list[int]
    finished: bool = False
    meta_info: dict[str, Any] | None = None
    index: int = 0
    group_rid: str | None = None  # None: the same as rid
    retract: int = 0
    output_token_logprobs: list[LogprobEntry] | None = None
    output_top_logprobs: list[list[LogprobEntry] | None] | None = None
    logprob_retract: int = 0
    input_token_logprobs: list[LogprobEntry] | None = None
    input_top_logprobs: list[list[LogprobEntry] | None] | None = None
    settled: int | None = None

    _KEYS = ("rid", "text", "token_ids", "finished", "meta_info", "index", "group_rid", "retract",
             "output_token_logprobs", "output_top_logprobs", "logprob_retract", "input_token_logprobs",
             "input_top_logprobs", "settled")

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

    def apply_logprobs(self, entries: list, tops: list | None = None) -> list:
        """In place: drop ``logprob_retract`` trailing entries of ``entries`` (and of
        ``tops``, the top alternatives, when given), append this delta's segments; returns
        ``entries``. A no-op for a delta without logprobs."""
        k = self.logprob_retract
        if k > len(entries) or (tops is not None and k > len(tops)):
            raise ValueError(f"logprob_retract {k} exceeds the {len(entries)} entries streamed so far")
        for target, segment in ((entries, self.output_token_logprobs), (tops, self.output_top_logprobs)):
            if target is None:
                continue
            if k:
                del target[len(target) - k:]
            target.extend(segment or [])
        return entries


@dataclass
class LogprobCursor:
    """How far a request's stream has delivered its output logprob entries (the engine
    keeps one per request; `take` builds each delta's segment).

    ``sent``: entries the consumer holds (retractions applied); ``low_water``: the lowest
    index entries were deleted from since the last delta (None: none), so the entries from
    there on may differ from what was sent; ``input_sent``: the prompt's logprobs went out.
    """

    sent: int = 0
    low_water: int | None = None
    input_sent: bool = False

    def deleted_from(self, index: int) -> None:
        """Entries ``index`` and later were deleted (or replaced)."""
        self.low_water = index if self.low_water is None else min(self.low_water, index)

    def take(self, num_entries: int) -> tuple[int, int]:
        """The next delta, ``num_entries`` being known now: ``(retract, start)``, meaning
        drop ``retract`` entries sent before, then send ``entries[start:num_entries]``."""
        start = self.sent if self.low_water is None else min(self.low_water, self.sent)
        start = min(start, num_entries)
        retract = self.sent - start
        self.sent, self.low_water = num_entries, None
        return retract, start
