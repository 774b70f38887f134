"""Token healing: a prompt that ends inside what would be one token is backed up to the
previous token boundary, and the first generated token(s) must spell the removed text.

Why: a prompt "The url is http:" tokenizes as ``[..., "http", ":"]`` while text like it
in training was ``[..., "http", "://"]``; conditioned on a lone ":" the model rarely
writes "//". Healing drops ":" from the prompt and lets the model pick a first token
that starts with ":" ("://"), then shows the caller only what follows the prompt.

Contract (the engine's request builder calls `TokenHealer.plan` per prompt):

- **When**: the last prompt token is backed up only when some vocabulary token strictly
  extends its bytes (starts with them and is longer). A prompt whose last token no
  token extends ends on a boundary the tokenizer would never merge across; it is left
  exactly as it is. The last ``MAX_HEAL_TOKENS`` tokens are backed up together when some
  token strictly extends their joined bytes too. Never backed up: special tokens, text
  that is not whole UTF-8 on its own, and the prompt's first token (one is always kept).
- **Prompt**: the request's prompt is the backed-up one, so the radix cache stores and
  matches it; ``meta_info["prompt_tokens"]`` counts it.
- **First tokens** (`HealingMatcher`): while removed bytes R are left, a token is allowed
  when its bytes start with R, or are a non-empty prefix of R (R then shrinks). With a
  grammar (regex, JSON, ...) a token that runs past R is allowed only if the grammar
  accepts its bytes beyond R; the grammar sees only the text after R.
- **Output** (`HealedOutputText`): the text excludes R; ``output_ids`` hold every
  generated token (the first one's text includes R).

Which requests heal (`wants_healing`): ``token_healing=True`` heals; False never;
None (unset) heals unconstrained text prompts, and leaves ``input_ids`` (the caller's
own tokens) and constrained requests (whose ``output_ids`` a caller may replay through
the grammar; healed, the first one also spells the removed text) as given. Prompt
logprobs (``logprob_start_len >= 0``) and ``max_new_tokens=0`` turn healing off: they
score or cache the prompt the caller sent.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from furca.runtime.detokenizer import OutputTextState
from furca.runtime.sampling_params import SamplingParams

MAX_HEAL_TOKENS = 2
_INDEXES: dict[str, "VocabIndex"] = {}  # by the tokenizer's serialisation (sha1)
_INDEX_LOCK = threading.Lock()


class VocabIndex:
    """Every token's bytes, sorted, for prefix queries (``token_bytes[t]`` is None for
    special and unknown tokens)."""

    def __init__(self, token_bytes: Sequence[bytes | None]):
        self.token_bytes = list(token_bytes)
        order = sorted((b, i) for i, b in enumerate(self.token_bytes) if b)
        self._keys = [b for b, _ in order]
        self._ids = np.array([i for _, i in order], dtype=np.int64)
        self._by_bytes = {b: i for b, i in order}  # one id per byte string

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> "VocabIndex":
        """From a tokenizers-backed (fast) tokenizer or furca's wrapper of one."""
        from furca.constrain.tokenizer import decode_vocab

        hf = getattr(tokenizer, "hf", tokenizer)
        backend = getattr(hf, "backend_tokenizer", None)
        if backend is None:
            raise TypeError("token healing needs a tokenizers-backed (fast) tokenizer")
        text = backend.to_str()
        key = hashlib.sha1(text.encode()).hexdigest()
        with _INDEX_LOCK:
            hit = _INDEXES.get(key)
        if hit is None:
            hit = cls(decode_vocab(json.loads(text))[0])  # ~1 s for a 50k vocabulary: once per process
            with _INDEX_LOCK:
                _INDEXES[key] = hit
        return hit

    def _range(self, prefix: bytes) -> tuple[int, int]:
        lo = bisect.bisect_left(self._keys, prefix)
        top = prefix.rstrip(b"\xff")
        if not top:
            return lo, len(self._keys)
        successor = top[:-1] + bytes([top[-1] + 1])
        return lo, bisect.bisect_left(self._keys, successor, lo)

    def is_extended(self, data: bytes) -> bool:
        """Whether some token's bytes start with ``data`` and are longer."""
        lo, hi = self._range(data)
        return hi > lo and self._keys[hi - 1] != data

    def starting_with(self, data: bytes) -> np.ndarray:
        """Ids of the tokens whose bytes start with ``data`` (``data`` itself included)."""
        lo, hi = self._range(data)
        return self._ids[lo:hi]

    def id_of(self, data: bytes) -> int | None:
        """A token whose bytes are ``data``, or None."""
        return self._by_bytes.get(data)

    def exactly(self, data: bytes) -> np.ndarray:
        """Ids of the tokens whose bytes are ``data``."""
        lo = bisect.bisect_left(self._keys, data)
        hi = bisect.bisect_right(self._keys, data, lo)
        return self._ids[lo:hi]


@dataclass(frozen=True)
class HealPlan:
    """``kept_ids``: the prompt less its last token(s); ``prefix``: the removed tokens'
    bytes (whole UTF-8), which the first generated tokens must spell."""

    kept_ids: tuple[int, ...]
    prefix: bytes

    @property
    def text(self) -> str:
        return self.prefix.decode("utf-8")


def plan_healing(ids: Sequence[int], index: VocabIndex, max_tokens: int = MAX_HEAL_TOKENS) -> HealPlan | None:
    """The back-up of ``ids`` (see the module docstring, "When"), or None."""
    best = None
    for k in range(1, max_tokens + 1):
        if len(ids) - k < 1:
            break
        parts = [index.token_bytes[t] if 0 <= t < len(index.token_bytes) else None for t in ids[-k:]]
        if any(not p for p in parts):
            break
        data = b"".join(parts)
        if not index.is_extended(data):
            break
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        best = HealPlan(tuple(ids[:-k]), data)
    return best


def wants_healing(params: SamplingParams, is_text: bool) -> bool:
    """Whether a request heals (see the module docstring, "Which requests heal")."""
    if params.return_logprob and params.logprob_start_len >= 0:
        return False
    if params.max_new_tokens == 0:
        return False
    if params.token_healing is None:
        return is_text and not params.has_constraint
    return params.token_healing


def for_text_prompt(params: SamplingParams) -> SamplingParams:
    """``params`` of a text prompt that its front end tokenizes itself and passes on as
    ids (the native API): an unset ``token_healing`` resolved as for a text prompt."""
    if params.token_healing is None and wants_healing(params, is_text=True):
        return params.replace(token_healing=True)
    return params


class HealingMatcher:
    """The scheduler's grammar hook while the removed bytes are being re-spelled (see the
    module docstring, "First tokens"), over an optional grammar matcher ``inner``.

    ``on_done(num_tokens)`` is called once, when a token completes the prefix: the caller
    hands the request over to ``inner`` (or to no hook) from the next step on, and keeps
    the healing tokens out of jump-forward's re-tokenizing (they spell text the grammar
    never saw)."""

    def __init__(self, index: VocabIndex, prefix: bytes, inner: Any = None,
                 on_done: Callable[[int], None] | None = None):
        if not prefix:
            raise ValueError("an empty healing prefix")
        self.index = index
        self.inner = inner
        self.left = prefix  # bytes still to spell
        self.on_done = on_done
        self.num_tokens = 0

    def allowed(self) -> np.ndarray:
        """Ids allowed next while healing."""
        idx, left = self.index, self.left
        over = idx.starting_with(left)
        if self.inner is not None:
            inner_ok = np.zeros(len(idx.token_bytes), dtype=bool)
            allowed = self.inner.get_allowed_tokens()
            inner_ok[allowed[allowed < len(inner_ok)]] = True
            keep = [t for t in over.tolist() if self._grammar_takes(idx.token_bytes[t][len(left):], inner_ok)]
            over = np.asarray(keep, dtype=np.int64)
        short = [idx.exactly(left[:n]) for n in range(1, len(left))]
        return np.concatenate([over] + short) if short else over

    def _grammar_takes(self, rest: bytes, inner_ok: np.ndarray) -> bool:
        """Whether the grammar accepts ``rest`` from where it is: a rest that is a token's
        bytes is read off the grammar's own mask (``inner_ok``), others are stepped."""
        if not rest:
            return True
        t = self.index.id_of(rest)
        if t is not None:
            return bool(inner_ok[t])
        return self.inner.fork().accept_string(rest)

    def fill_bitmask(self, bitmask, row: int) -> None:
        ids = self.allowed()
        words = np.zeros(bitmask.shape[1], dtype=np.uint32)
        np.bitwise_or.at(words, ids >> 5, (np.uint32(1) << (ids & 31).astype(np.uint32)))
        packed = words.view(np.int32)
        bitmask[row] = torch.from_numpy(packed) if isinstance(bitmask, torch.Tensor) else packed

    def accept_token(self, token_id: int) -> bool:
        data = self.index.token_bytes[token_id] if 0 <= token_id < len(self.index.token_bytes) else None
        left = self.left
        if not data:
            return False
        if data.startswith(left):
            rest = data[len(left):]
            if rest and self.inner is not None and not self.inner.accept_string(rest):
                return False
            self.left = b""
        elif left.startswith(data):
            self.left = left[len(data):]
        else:
            return False
        self.num_tokens += 1
        if not self.left and self.on_done is not None:
            self.on_done(self.num_tokens)
        return True

    def is_terminated(self) -> bool:
        return False

    def jump_forward(self) -> str:
        return ""


class HealedOutputText(OutputTextState):
    """`OutputTextState` whose text leaves out the healing prefix ``prefix_text``: the
    decoded output starts with it (the `HealingMatcher` sees to that); stop strings and
    stop regexes are matched over the text after it."""

    def __init__(self, tokenizer: Any, params: SamplingParams, *, prefix_text: str, **kwargs: Any):
        super().__init__(tokenizer, params, **kwargs)
        self._prefix = prefix_text
        self._raw = ""  # decoded text while the prefix is not passed yet

    @property
    def can_append_forced(self) -> bool:
        return self._prefix is None and super().can_append_forced

    def _take(self, text: str) -> None:
        self._raw += text
        if len(self._raw) >= len(self._prefix):
            raw, prefix = self._raw, self._prefix
            self._text = raw[len(prefix):] if raw.startswith(prefix) else raw
            self._prefix, self._raw = None, ""

    def append(self, token_id: int) -> tuple[str, dict | None]:
        if self._prefix is None:
            return super().append(token_id)
        if self.finish_reason is not None:
            raise RuntimeError(f"append after the request finished ({self.finish_reason})")
        self.num_tokens += 1
        reason = self.checker.check_token(token_id, self.num_tokens)
        if reason is None or self.no_stop_trim:
            self._take(self.detokenizer.add(token_id))
        if reason is not None:
            self._take(self.detokenizer.flush())
            return self._end(reason, len(self._text))
        return ("", None) if self._prefix is not None else self._visible()

    def finish(self, reason: dict) -> str:
        if self._prefix is not None and self.finish_reason is None:
            self._take(self.detokenizer.flush())
            self._prefix = None
        return super().finish(reason)


class TokenHealer:
    """Per engine: plans healing for prompts and builds the request parts that carry it.
    The vocabulary index is built on first use (~1 s for a 50k vocabulary, mostly parsing
    the tokenizer JSON; once per process and tokenizer)."""

    def __init__(self, tokenizer: Any, max_tokens: int = MAX_HEAL_TOKENS):
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self._index: VocabIndex | None = None
        self._lock = threading.Lock()

    @property
    def index(self) -> VocabIndex:
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._index = VocabIndex.from_tokenizer(self.tokenizer)
        return self._index

    def plan(self, ids: Sequence[int], params: SamplingParams, is_text: bool) -> HealPlan | None:
        if not wants_healing(params, is_text):
            return None
        return plan_healing(ids, self.index, self.max_tokens)

    def matcher(self, plan: HealPlan, inner: Any, on_done: Callable[[int], None]) -> HealingMatcher:
        return HealingMatcher(self.index, plan.prefix, inner, on_done)


_HEALERS: "weakref.WeakKeyDictionary[Any, TokenHealer]" = weakref.WeakKeyDictionary()
_HEALERS_LOCK = threading.Lock()


def healer_for(tokenizer: Any) -> TokenHealer | None:
    """The `TokenHealer` of ``tokenizer`` (one per tokenizer object, so engines sharing a
    tokenizer share its index), or None when it is not tokenizers-backed (no healing)."""
    hf = getattr(tokenizer, "hf", tokenizer)
    if getattr(hf, "backend_tokenizer", None) is None:
        return None
    with _HEALERS_LOCK:
        healer = _HEALERS.get(tokenizer)
        if healer is None:
            healer = _HEALERS[tokenizer] = TokenHealer(tokenizer)
        return healer
