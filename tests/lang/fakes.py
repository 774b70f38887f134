"""A scripted backend: the interpreter's mechanics without a model."""

from __future__ import annotations

import threading
from typing import Any, Callable

from furca.lang.backends.base import GenerateRequest, GenerateResult, SelectRequest, StreamChunk
from furca.lang.chat import CHATML_TEMPLATE, PlainChatFormat, TemplateChatFormat, jinja_renderer
from furca.lang.choices import decide


class FakeBackend:
    """``reply(request) -> text`` answers each gen (default: ``"<gen N>"``);
    ``scores[choice]`` gives each select option's token logprobs."""

    def __init__(self, reply: Callable[[GenerateRequest], str] | None = None,
                 scores: dict[str, list[float]] | None = None, messages_api: bool = False):
        self.reply = reply or (lambda req: f"<gen {len(self.requests)}>")
        self.scores = scores or {}
        self.requests: list[Any] = []
        self.cached: list[str] = []
        self.lock = threading.Lock()
        self._chat = PlainChatFormat() if messages_api else TemplateChatFormat(jinja_renderer(CHATML_TEMPLATE))

    def chat_format(self):
        return self._chat

    def _record(self, req) -> None:
        with self.lock:
            self.requests.append(req)

    def _answer(self, req) -> str:
        with self.lock:
            text = self.reply(req)
            self.requests.append(req)
        return text

    def generate(self, request: GenerateRequest) -> GenerateResult:
        n = request.params.n or 1
        text = self._answer(request)
        meta = {"prompt_tokens": len(request.text), "completion_tokens": len(text), "cached_tokens": 0}
        if n > 1:
            return GenerateResult(text, meta, tuple(f"{text}#{i}" for i in range(n)), (meta,) * n)
        return GenerateResult(text, meta)

    def generate_stream(self, request: GenerateRequest):
        text = self._answer(request)
        for i, ch in enumerate(text):
            yield StreamChunk(ch, {"completion_tokens": i + 1} if i == len(text) - 1 else None)

    def select(self, request: SelectRequest):
        self._record(request)
        entries = [[[lp, i, None] for i, lp in enumerate(self.scores.get(c, [-1.0]))] for c in request.choices]
        uncond = None
        if request.choices_method.requires_unconditional_logprobs:
            uncond = [[[None if i == 0 else -1.0, i, None] for i in range(len(e))] for e in entries]
        return decide(request.choices_method, request.choices, entries, uncond)

    def cache_prefix(self, text: str) -> None:
        with self.lock:
            self.cached.append(text)

    def flush_cache(self) -> bool:
        return True

    def get_server_info(self) -> dict:
        return {"fake": True}
