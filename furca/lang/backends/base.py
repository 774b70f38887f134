"""The seam between the interpreter and a model: immutable requests in, results out.

A backend never sees the interpreter's state. For each ``gen`` it gets a
`GenerateRequest` (the text so far, the chat messages so far, the resolved
`GenParams`); for each ``select`` a `SelectRequest`. Everything in them is frozen, so
a backend may hand them to other threads, log them or replay them.

Errors: a backend raises `BackendCapabilityError` for what it cannot do (naming the
alternative), `BackendRequestError` for a failed call (with the server's message), and
lets `FurcaError`s from an in-process engine through unchanged.

Sessions (optional): a backend with ``open_session() -> str | None`` (None: no sessions
there) and ``close_session(session_id)`` gets one session per program run
(`furca.lang.program_session`), its id in each `GenerateRequest`, so the run's KV stays
pinned between its calls (docs/runtime.md "Sessions").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, runtime_checkable

from furca.lang.chat import ChatFormat, History
from furca.lang.choices import ChoicesDecision
from furca.lang.ir import GenParams


@dataclass(frozen=True)
class GenerateRequest:
    """One ``gen``. ``text`` is the whole prompt (roles rendered by the backend's
    `ChatFormat`); ``messages`` the completed chat messages and ``open_role`` /
    ``open_content`` the role being written when the gen sits inside one (for backends
    that take messages)."""

    text: str
    params: GenParams
    messages: History = ()
    open_role: str | None = None
    open_content: str = ""
    session_id: str | None = None  # the program run's session (furca.lang.program_session), if any


@dataclass(frozen=True)
class SelectRequest:
    """One ``select``: score ``text + choice`` for every choice and let ``choices_method``
    decide (see `furca.lang.choices`)."""

    text: str
    choices: tuple[str, ...]
    choices_method: Any
    temperature: float = 0.0
    messages: History = ()
    open_role: str | None = None
    open_content: str = ""


@dataclass(frozen=True)
class GenerateResult:
    """``text`` and ``meta_info`` of the first sample; ``samples`` holds all texts when
    ``n > 1`` (``meta_infos`` their meta_info)."""

    text: str
    meta_info: dict[str, Any] = field(default_factory=dict)
    samples: tuple[str, ...] = ()
    meta_infos: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class StreamChunk:
    """New text since the previous chunk; ``meta_info`` when the backend has it (always
    on the last chunk)."""

    text: str
    meta_info: dict[str, Any] | None = None


@runtime_checkable
class Backend(Protocol):
    def chat_format(self) -> ChatFormat:
        """How roles render into text (see `furca.lang.chat`)."""

    def generate(self, request: GenerateRequest) -> GenerateResult: ...

    def generate_stream(self, request: GenerateRequest) -> Iterator[StreamChunk]: ...

    def select(self, request: SelectRequest) -> ChoicesDecision: ...

    def cache_prefix(self, text: str) -> None:
        """Compute and cache ``text``'s KV (a no-op where the backend has no cache)."""

    def flush_cache(self) -> bool: ...

    def get_server_info(self) -> dict[str, Any]: ...

