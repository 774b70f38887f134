"""`LocalBackend`: programs on furca's in-process `Engine`.

The only module of ``furca.lang`` that touches ``furca.runtime`` (lazily, when it has to
create an engine). It tokenizes prompts itself, so ``select`` knows exactly which
tokens belong to each option.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Iterator

from furca.lang.backends.base import GenerateRequest, GenerateResult, SelectRequest, StreamChunk
from furca.lang.chat import CHATML_TEMPLATE, ChatFormat, TemplateChatFormat, jinja_renderer
from furca.lang.choices import ChoicesDecision, decide
from furca.lang.ir import GenParams

logger = logging.getLogger("furca.lang")

def _common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def engine_params(params: GenParams) -> dict[str, Any]:
    """``GenParams`` as the engine's ``sampling_params`` dict (every key, stop_regex included,
    is the engine's own; the engine validates them). Token healing is on unless the
    program turns it off (the engine leaves input_ids unhealed by default)."""
    d = params.to_dict()
    d.setdefault("token_healing", True)
    return d


class LocalBackend:
    """``LocalBackend(engine=None, **engine_kwargs)``: wraps ``engine`` or, when None,
    creates ``furca.Engine(**engine_kwargs)`` (the default model unless ``model=``)."""

    _by_engine: "weakref.WeakKeyDictionary[Any, LocalBackend]" = weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    def __init__(self, engine: Any = None, **engine_kwargs: Any):
        if engine is None:
            from furca.runtime.engine import Engine

            engine = Engine(**engine_kwargs)
        elif engine_kwargs:
            raise TypeError("give an engine or engine options, not both")
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self._chat: ChatFormat | None = None

    @classmethod
    def for_engine(cls, engine: Any) -> "LocalBackend":
        """One backend per engine, so its chat-marker cache is shared."""
        with cls._lock:
            backend = cls._by_engine.get(engine)
            if backend is None:
                backend = cls._by_engine[engine] = cls(engine)
            return backend

    # -- text and tokens ----------------------------------------------------------------

    def chat_format(self) -> ChatFormat:
        if self._chat is None:
            tok = self.tokenizer
            if getattr(tok, "chat_template", None):
                render = lambda messages, gen: tok.apply_chat_template(messages, add_generation_prompt=gen)  # noqa: E731
            else:
                logger.warning("the model has no chat template; roles are rendered as ChatML")
                render = jinja_renderer(CHATML_TEMPLATE)
            self._chat = TemplateChatFormat(render)
        return self._chat

    def encode(self, text: str) -> list[int]:
        """Token ids of a prompt: the tokenizer's BOS is added unless the text (e.g. a
        chat template's output) already starts with it."""
        tok = self.tokenizer
        bos = getattr(getattr(tok, "hf", None), "bos_token", None)
        add_special = not (bos and text.startswith(bos))
        return tok.encode(text, add_special_tokens=add_special)

    # -- Backend ------------------------------------------------------------------------

    def generate(self, request: GenerateRequest) -> GenerateResult:
        out = self.engine.generate(input_ids=self.encode(request.text), sampling_params=engine_params(request.params),
                                   session_id=request.session_id)
        if isinstance(out, list):
            return GenerateResult(out[0].text, out[0].meta_info, tuple(o.text for o in out),
                                  tuple(o.meta_info for o in out))
        return GenerateResult(out.text, out.meta_info)

    def generate_stream(self, request: GenerateRequest) -> Iterator[StreamChunk]:
        deltas = self.engine.generate(input_ids=self.encode(request.text),
                                      sampling_params=engine_params(request.params), stream=True,
                                      session_id=request.session_id)
        for delta in deltas:
            yield StreamChunk(delta.text, delta.meta_info if delta.finished else None)

    def select(self, request: SelectRequest) -> ChoicesDecision:
        prefix_ids = self.encode(request.text) if request.text else []
        fulls = [self.encode(request.text + choice) for choice in request.choices]
        # score each option from the first token where it departs from the prefix's tokens
        # (a token that merges the prefix's end with the option's start is the option's)
        starts = [min(_common_prefix_len(prefix_ids, ids), len(ids) - 1) for ids in fulls]
        params = [{"max_new_tokens": 0, "temperature": 0.0, "return_logprob": True, "logprob_start_len": s,
                   "return_text_in_logprobs": True} for s in starts]
        outs = self.engine.generate(input_ids=fulls, sampling_params=params)
        entries = [list(o.meta_info["input_token_logprobs"]) for o in outs]
        unconditional = None
        if getattr(request.choices_method, "requires_unconditional_logprobs", False):
            alone = [[e[1] for e in option] for option in entries]
            alone_outs = self.engine.generate(input_ids=alone, sampling_params={
                "max_new_tokens": 0, "return_logprob": True, "logprob_start_len": 0, "return_text_in_logprobs": True})
            # a one-token option comes back as its one [None, id, text] entry
            unconditional = [list(o.meta_info["input_token_logprobs"]) for o in alone_outs]
        decision = decide(request.choices_method, request.choices, entries, unconditional)
        # per option: the options are submitted together, so the engine computes their
        # shared prefix once and the others find it cached
        usage = {"prompt_tokens": [o.meta_info.get("prompt_tokens") for o in outs],
                 "cached_tokens": [o.meta_info.get("cached_tokens") for o in outs]}
        return ChoicesDecision(decision.decision, {**(decision.meta_info or {}), **usage})

    def cache_prefix(self, text: str) -> None:
        if text:
            self.engine.generate(input_ids=self.encode(text), sampling_params={"max_new_tokens": 0})

    def open_session(self) -> str:
        """A session of the engine for one program run (furca.lang.program_session)."""
        return self.engine.open_session()

    def close_session(self, session_id: str) -> None:
        self.engine.close_session(session_id)

    def flush_cache(self) -> bool:
        return bool(self.engine.flush_cache())

    def get_server_info(self) -> dict[str, Any]:
        return self.engine.get_server_info()

    def shutdown(self) -> None:
        self.engine.shutdown()

    def __repr__(self) -> str:
        return f"LocalBackend({getattr(self.engine, 'model_path', None)!s})"
