"""`ServerState`: the engine and what the HTTP layer keeps about it.

Admission (`admit`): a request is refused with 503 while the model loads or the
server drains (SIGTERM), and with 429 when more than ``max_running_requests +
max_queued_requests`` engine requests would be in flight. `start` compiles the
request's constraints off the event loop, submits it to the engine and returns an
`EngineStream`: an async iterator of ``(output index, StreamDelta)`` whose
``aclose()`` aborts whatever has not finished and releases the admission ticket.
Every handler closes its stream in a ``finally``, so a disconnect or an error never
leaves a request running.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path
from typing import Any

from furca.runtime.output import StreamDelta
from furca.runtime.sampling_params import SamplingParams
from furca.server.args import ServerArgs
from furca.server.chat_template import ChatRenderer
from furca.server.errors import APIError
from furca.server.grammar import Constraints
from furca.server.metrics import Metrics, RequestTimer

logger = logging.getLogger("furca.server")

MAX_SEQUENCES = 128  # OpenAI's bound on n: one request may always start this many
# Characters of a prompt one token may stand for, at most, over the longest vocabulary
# piece: normalizers (NFC) may join a few characters into one before tokenizing.
_NORMALIZE_SLACK = 4


class Ticket:
    """One admitted HTTP request holding `num` engine-request places; release is idempotent."""

    def __init__(self, state: "ServerState", num: int):
        self.state, self.num, self.released = state, num, False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.state.num_inflight -= self.num
            self.state.metrics.num_inflight.set(self.state.num_inflight)


class ServerState:
    def __init__(self, args: ServerArgs, metrics: Metrics | None = None):
        self.args = args
        self.metrics = metrics or Metrics()
        self.engine: Any = None
        self.ready = False
        self.load_error: BaseException | None = None
        self.draining = False
        self.num_inflight = 0
        # engine rids of the requests started and not yet closed; `request_rids` maps the
        # rid a client gave an HTTP request that started several (a batch completion's
        # ``{rid}-p{i}``) to them; `aborted`: those `abort` was asked to stop
        self.active_rids: set[str] = set()
        self.request_rids: dict[str, tuple[str, ...]] = {}
        self.aborted: set[str] = set()
        self.model_name = args.served_model_name or "default"
        self.created = int(time.time())
        self.renderer: ChatRenderer | None = None
        self.constraints: Constraints | None = None
        self.tool_tags = False  # whether `auto` tool calls can use structural tags
        self._max_token_chars: int | None = None  # check_text_length's bound, read once
        self.step_observer: Any = None  # registered with the engine while serving (app.py)

    # -- setup ---------------------------------------------------------------------------

    def attach(self, engine: Any) -> None:
        """Use `engine` (loaded) and its grammar backend (``engine.grammar_backend``; None:
        constrained requests are rejected by the engine)."""
        backend = engine.grammar_backend
        if backend is None:
            logger.warning("constrained decoding unavailable: the engine has no grammar backend")
        self.tool_tags = bool(backend is not None and getattr(backend, "supports_structural_tags", lambda: False)())
        if not self.tool_tags:
            logger.info("structural tags unavailable: tool_choice=auto parses free text for <tool_call> blocks")
        self.constraints = Constraints(engine, self.args.grammar_timeout, self.metrics, self.args.grammar_workers)
        self.renderer = ChatRenderer(engine.tokenizer, self.args.chat_template)
        if not self.args.served_model_name and getattr(engine, "model_path", None):
            self.model_name = str(engine.model_path).rstrip("/").split("/")[-1]
        self.engine = engine

    def shown_model_path(self) -> str | None:
        """The model's path as the API shows it: whole with ``expose_model_path``, else only
        its last component (the model id), so no directory of the server's disk shows."""
        path = getattr(self.engine, "model_path", None)
        if path is None:
            return None
        return str(path) if self.args.expose_model_path else Path(str(path)).name

    @property
    def tokenizer(self) -> Any:
        return self.require_engine().tokenizer

    @property
    def context_length(self) -> int:
        return int(self.require_engine().context_length)

    @property
    def engine_death(self) -> str | None:
        """Why the engine's scheduler died (``"Type: message"``), or None while it runs (or
        after a clean shutdown). A dead engine serves nothing: `require_engine` answers 503,
        /health says so, and `furca serve` exits non-zero (launch.py)."""
        error = getattr(self.engine, "error", None) if self.engine is not None else None
        return None if error is None else f"{type(error).__name__}: {error}"

    def require_engine(self) -> Any:
        death = self.engine_death
        if death is not None:
            raise APIError(503, f"the engine died: {death}; the server is exiting (a supervisor restarts it)")
        if self.engine is None or not self.ready:
            if self.load_error is not None:
                raise APIError(503, f"the model failed to load: {self.load_error}")
            raise APIError(503, "the server is starting: the model is not loaded yet",
                           headers={"Retry-After": "5"})
        return self.engine

    # -- admission -------------------------------------------------------------------------

    def admit(self, num: int) -> Ticket:
        self.require_engine()
        if self.draining:
            self.metrics.rejected.labels(status="503").inc()
            raise APIError(503, "the server is shutting down and takes no new requests")
        limit = self.max_inflight
        if limit is not None and num > limit:
            raise APIError(400, f"this request needs {num} sequences (n x prompts) but the server admits at most "
                                f"{limit} at once; lower n or split the batch", param="n")
        if limit is not None and self.num_inflight + num > limit:
            self.metrics.rejected.labels(status="429").inc()
            raise APIError(429, f"the server is overloaded: {self.num_inflight} requests in flight, "
                                f"at most {limit} (max_running_requests + max_queued_requests); retry later",
                           code="overloaded", headers={"Retry-After": "1"})
        self.num_inflight += num
        self.metrics.num_inflight.set(self.num_inflight)
        return Ticket(self, num)

    @property
    def max_inflight(self) -> int | None:
        q = self.args.max_queued_requests
        if q is None:
            return None
        return self.engine.config.max_running_requests + q

    # -- generation ------------------------------------------------------------------------

    def check_context(self, num_prompt: int, max_new_tokens: int | None, *, where: str = "messages") -> int:
        """-> max_new_tokens (filled in when None); 400 with both numbers when too long."""
        ctx = self.context_length
        room = min(ctx, int(self.engine.capacity)) - num_prompt
        if num_prompt >= ctx or room <= 0:
            raise APIError(400, f"This model's maximum context length is {ctx} tokens. However, your request "
                                f"has {num_prompt} input tokens. Please reduce the length of the {where}.",
                           param="messages" if where == "messages" else "prompt", code="context_length_exceeded")
        if max_new_tokens is None:
            return room
        if num_prompt + max_new_tokens > ctx:
            raise APIError(400, f"This model's maximum context length is {ctx} tokens. However, you requested "
                                f"{num_prompt + max_new_tokens} tokens ({num_prompt} in the {where}, "
                                f"{max_new_tokens} in the completion). Please reduce the length of the "
                                f"{where} or completion.", param="max_tokens", code="context_length_exceeded")
        return max_new_tokens

    def check_sequences(self, num: int, param: str = "n") -> None:
        """400 when one request would start more engine sequences (n x prompts) than
        ``max(128, max_running_requests)``: one request may fill the running batch, never
        the queue behind it. Checked before any work (tokenizing included)."""
        running = getattr(getattr(self.engine, "config", None), "max_running_requests", None)
        limit = max(MAX_SEQUENCES, running if isinstance(running, int) else 0)
        if num > limit:
            raise APIError(400, f"this request starts {num} sequences (n x prompts), but one request may start at "
                                f"most {limit} (the larger of 128 and --max-running-requests); lower n or split "
                                "the batch", param=param)

    def check_text_length(self, chars: int, where: str = "prompt") -> None:
        """The context-length 400, before tokenizing, for text of `chars` characters that
        has more tokens than the context holds whatever its content."""
        ctx = self.context_length
        per_token = self._token_chars_bound() if chars > ctx else 0
        if not per_token or chars // per_token < ctx:
            return
        raise APIError(400, f"This model's maximum context length is {ctx} tokens. However, your request has at "
                            f"least {chars // per_token} input tokens ({chars} characters). Please reduce the "
                            f"length of the {where}.", param="messages" if where == "messages" else "prompt",
                       code="context_length_exceeded")

    def _token_chars_bound(self) -> int:
        """An upper bound on the characters of prompt text one token covers: the longest
        vocabulary piece in characters (a byte-level piece has one character per byte, a
        sentencepiece piece one per character), times `_NORMALIZE_SLACK`; 0 when the
        tokenizer has no vocabulary to read (no early check)."""
        if self._max_token_chars is None:
            try:
                self._max_token_chars = max(len(piece) for piece in self.tokenizer.hf.get_vocab()) * _NORMALIZE_SLACK
            except Exception:  # noqa: BLE001 - no vocabulary to read
                self._max_token_chars = 0
        return self._max_token_chars

    async def start(self, input_ids: list[list[int]], params: list[SamplingParams], ticket: Ticket,
                    rids: list[str] | None = None, request_rid: str | None = None,
                    session_id: str | None = None) -> "EngineStream":
        """Submit one engine call (a prompt per entry; each expands to its params' n).
        ``rids``: one engine rid per prompt (default: fresh ones); ``request_rid``: the
        rid the client knows when it is none of them (a batch completion), so that
        `abort` of it stops them all. The rids are abortable from the moment this is
        called (while constraints compile too) until the stream closes. ``session_id``: the
        open session the call belongs to (its KV stays pinned between calls)."""
        engine = self.require_engine()
        rids = rids or [uuid.uuid4().hex for _ in input_ids]
        self._track(rids, request_rid)
        try:
            await self.constraints.precompile(params)
            batch = len(input_ids) > 1
            stream = await engine.async_generate(
                input_ids=input_ids if batch else input_ids[0],
                sampling_params=params if batch else params[0],
                rid=rids if batch else rids[0], stream=True,
                **({"session_id": session_id} if session_id is not None else {}))
        except BaseException:
            self._untrack(rids, request_rid)
            ticket.release()
            raise
        if self.aborted.intersection(rids):  # aborted before the engine had it
            for rid in rids:
                engine.abort(rid)
        self.metrics.prompt_tokens.inc(sum(len(ids) * p.n for ids, p in zip(input_ids, params)))
        return EngineStream(self, stream, rids, params, ticket, request_rid)

    # -- rids ------------------------------------------------------------------------------

    def _track(self, rids: list[str], request_rid: str | None) -> None:
        self.active_rids.update(rids)
        if request_rid is not None and [request_rid] != rids:
            self.request_rids[request_rid] = tuple(rids)

    def _untrack(self, rids: list[str], request_rid: str | None) -> None:
        self.active_rids.difference_update(rids)
        self.aborted.difference_update(rids)
        if request_rid is not None and self.request_rids.get(request_rid) == tuple(rids):
            del self.request_rids[request_rid]

    def abort(self, rid: str) -> bool:
        """Abort every engine request `rid` names (a request's own rid, or the rid of an
        HTTP request that started several); False when it names none in flight."""
        group = self.request_rids.get(rid) or ((rid,) if rid in self.active_rids else None)
        if group is None:
            return False
        self._abort(group)
        return True

    def abort_all(self) -> int:
        """Abort every engine request in flight (SGLang's ``abort_all``); returns how many."""
        rids = list(self.active_rids)
        self._abort(rids)
        return len(rids)

    def _abort(self, engine_rids) -> None:
        self.aborted.update(engine_rids)
        for engine_rid in engine_rids:
            self.engine.abort(engine_rid)


class EngineStream:
    """Async iterator of ``(index, StreamDelta)``, index in the engine's output order (a
    prompt's n samples adjacent). ``aclose()`` aborts what has not finished."""

    def __init__(self, state: ServerState, stream: Any, rids: list[str], params: list[SamplingParams],
                 ticket: Ticket, request_rid: str | None = None):
        self.state, self.stream, self.group_rids, self.ticket = state, stream, rids, ticket
        self.request_rid = request_rid
        # (prompt's rid, sample index) -> output index; StreamDelta carries both
        expected = [(rid, j) for rid, p in zip(rids, params) for j in range(p.n)]
        self.index = {key: i for i, key in enumerate(expected)}
        self.finished = [False] * len(expected)
        start = time.perf_counter()
        self.timers = [RequestTimer(state.metrics, start) for _ in expected]
        self.closed = False

    @property
    def num_outputs(self) -> int:
        return len(self.finished)

    def __aiter__(self) -> "EngineStream":
        return self

    async def __anext__(self) -> tuple[int, StreamDelta]:
        if self.closed:
            raise StopAsyncIteration
        try:
            delta = await self.stream.__anext__()
        except BaseException:  # the end, an engine error, or a cancellation (client gone)
            await self.aclose()
            raise
        i = self.index[(delta.group_rid, delta.index)]
        self.timers[i].on_tokens(len(delta.token_ids) - delta.retract)  # net new tokens
        if delta.finished:
            self.finished[i] = True
            self.timers[i].on_finish(delta.meta_info or {})
        return i, delta

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            await self.stream.aclose()
        finally:
            if not all(self.finished) and self.state.engine is not None:
                for rid in self.group_rids:
                    self.state.engine.abort(rid)
            self.state._untrack(self.group_rids, self.request_rid)
            self.ticket.release()

    async def collect(self) -> list[dict[str, Any]]:
        """Run to the end: per output, ``{"text", "output_ids", "meta_info"}``."""
        outs = [{"text": "", "output_ids": [], "meta_info": {}} for _ in range(self.num_outputs)]
        try:
            async for i, delta in self:
                outs[i]["text"] += delta.text
                delta.apply_ids(outs[i]["output_ids"])
                if delta.finished:
                    outs[i]["meta_info"] = delta.meta_info or {}
        finally:
            await self.aclose()
        return outs


async def drain(state: ServerState, grace: float) -> None:
    """SIGTERM: refuse new requests, wait up to `grace` s for in-flight ones, abort the rest."""
    state.draining = True
    logger.info("draining: %d requests in flight, grace period %.1f s", state.num_inflight, grace)
    deadline = time.monotonic() + grace
    while state.num_inflight > 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if state.active_rids and state.engine is not None:
        logger.info("grace period over: aborting %d requests", len(state.active_rids))
        for rid in list(state.active_rids):
            state.engine.abort(rid)
        deadline = time.monotonic() + 5.0
        while state.num_inflight > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
