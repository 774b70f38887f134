"""Executing program nodes against a backend.

Each program state owns an `Executor`: a worker thread that takes nodes from a queue
and runs them in order, so ``s += gen(...)`` returns at once and ``s["name"]`` waits
for the value. Forked states have their own executors, so their gens reach the
backend together (and share the prefix the fork cached first).

Node handlers are looked up in ``_HANDLERS`` by node type.
"""

from __future__ import annotations

import logging
import queue
import threading
import uuid
from dataclasses import replace
from typing import Any, Callable

from furca.lang.backends.base import Backend, GenerateRequest, SelectRequest
from furca.lang.chat import Message
from furca.lang.choices import token_length_normalized
from furca.lang.errors import ProgramError, ProgramFailedError, VariableNotSetError
from furca.lang.program_session import ProgramSession
from furca.lang.ir import (
    DTYPE_REGEX, DTYPE_STOPS, Argument, CommitPrefix, ConcatStates, Expr, Gen, GenParams, RoleBegin, RoleEnd,
    Select, Seq, Text, Variable, VarScopeBegin, VarScopeEnd, as_expr,
)

logger = logging.getLogger("furca.lang")

_DONE = object()


def _to_int(text: str) -> int:
    return int(text.strip())


def _to_float(text: str) -> float:
    return float(text.strip())


def _to_bool(text: str) -> bool:
    value = text.strip()
    if value not in ("True", "False"):
        raise ValueError(f"expected True or False, got {value!r}")
    return value == "True"


def _to_str(text: str) -> str:
    value = text.strip()
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


_CONVERT: dict[str, Callable[[str], Any]] = {"int": _to_int, "float": _to_float, "bool": _to_bool, "str": _to_str}


def resolve_params(node: Gen, defaults: GenParams) -> GenParams:
    """The gen's params over the run's defaults, with its dtype turned into a regex."""
    params = node.params.merged_over(defaults)
    if node.dtype is not None:
        stops = params.stop or ()
        stops += tuple(s for s in DTYPE_STOPS.get(node.dtype, ()) if s not in stops)
        params = replace(params, regex=DTYPE_REGEX[node.dtype], json_schema=None, ebnf=None, stop=stops)
    return params


def convert_value(node: Gen, text: str) -> Any:
    """A dtype gen's text as its type; a gen with a pydantic schema as the model instance."""
    try:
        if node.dtype is not None:
            return _CONVERT[node.dtype](text)
        if node.schema_class is not None:
            return node.schema_class.model_validate_json(text)
    except (ValueError, TypeError) as e:  # pydantic's ValidationError is a ValueError
        kind = node.dtype or node.schema_class.__name__
        raise ProgramError(
            f"gen {node.name!r}: the output {text!r} is not a valid {kind} ({e}); "
            f"raise max_tokens if it was cut off"
        ) from e
    return text


class Executor:
    def __init__(self, backend: Backend, defaults: GenParams, *, stream: bool = False, chat=None,
                 session: ProgramSession | None = None):
        self.sid = uuid.uuid4().hex
        self.backend = backend
        # the run's session on the backend (its KV pinned between gens), shared with forks
        self.session = (session or ProgramSession(backend)).acquire()
        self.defaults = defaults
        self.stream = stream
        self.chat = chat if chat is not None else backend.chat_format()
        self.variables: dict[str, Any] = {}
        self.events: dict[str, threading.Event] = {}
        self.meta_info: dict[str, Any] = {}
        self.text_ = ""
        self.messages_: list[Message] = []
        self.role: str | None = None
        self.role_begin_pos: int | None = None
        self.fork_start_pos: int | None = None
        self.error_: BaseException | None = None
        self.is_finished = False
        # streaming: set whenever text (or a variable) grows
        self.text_event = threading.Event()
        self.stream_var_events: dict[str, threading.Event] = {}
        self._queue: queue.Queue = queue.Queue()
        self._ended = False
        self._worker = threading.Thread(target=self._run, name=f"furca-program-{self.sid[:8]}", daemon=True)
        self._worker.start()

    # -- submitting and waiting -------------------------------------------------------

    def submit(self, expr: Any) -> None:
        expr = as_expr(expr)
        self._register(expr)
        self._queue.put(expr)

    def _register(self, expr: Expr) -> None:
        if isinstance(expr, Seq):
            for item in expr.items:
                self._register(item)
        elif isinstance(expr, (Gen, Select, VarScopeBegin)) and expr.name is not None:
            self.events[expr.name] = threading.Event()
            self.stream_var_events[expr.name] = threading.Event()
            self.text_event.set()  # wakes a text_iter(name) waiting for the name to appear

    def sync(self) -> None:
        self._queue.join()

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self._queue.put(_DONE)

    def raise_if_failed(self) -> None:
        if self.error_ is not None:
            raise ProgramFailedError(f"the program failed: {type(self.error_).__name__}: {self.error_}") from self.error_

    def fail(self, error: BaseException) -> None:
        """Record the program's first error and wake everyone waiting on a variable."""
        if self.error_ is None:
            self.error_ = error
        for event in (*self.events.values(), *self.stream_var_events.values()):
            event.set()

    def get_var(self, name: str) -> Any:
        event = self.events.get(name)
        if event is not None:
            event.wait()
        if name in self.variables:
            return self.variables[name]
        self.raise_if_failed()
        known = sorted(k for k in self.variables if isinstance(k, str))
        raise VariableNotSetError(
            f"variable {name!r} was never set by a gen, select or var_scope in this program; "
            f"set so far: {known or 'none'}"
        )

    def get_meta_info(self, name: str, timeout: float | None = None) -> Any:
        event = self.events.get(name)
        if event is not None and not event.wait(timeout):
            raise TimeoutError(f"variable {name!r} not ready after {timeout}s")
        return self.meta_info.get(name)

    # -- the worker ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            expr = self._queue.get()
            if expr is _DONE:
                self.session.release()  # before task_done: a run's sync() sees its session closed
                self._queue.task_done()
                break
            if self.error_ is None:
                try:
                    self.execute(expr)
                except BaseException as e:  # noqa: BLE001 - reported to the program's reader
                    logger.debug("program node failed", exc_info=True)
                    self.fail(e)
            else:  # after a failure nodes are skipped; their readers must not wait forever
                self.fail(self.error_)
            self._queue.task_done()
            self.text_event.set()
        self.is_finished = True
        self.text_event.set()

    def execute(self, expr: Expr) -> None:
        try:
            handler = _HANDLERS[type(expr)]
        except KeyError:
            raise ProgramError(f"cannot execute a {type(expr).__name__} node") from None
        handler(self, expr)

    # -- handlers -----------------------------------------------------------------------

    def _fill(self, text: str) -> None:
        self.text_ += text

    def _exec_seq(self, expr: Seq) -> None:
        for item in expr.items:
            self.execute(item)

    def _exec_text(self, expr: Text) -> None:
        self._fill(str(expr.value))

    def _request_fields(self) -> dict[str, Any]:
        open_content = self.text_[self.role_begin_pos:] if self.role is not None else ""
        return {"text": self.text_, "messages": tuple(self.messages_), "open_role": self.role,
                "open_content": open_content}

    def _set_var(self, name: str | None, value: Any, meta: Any) -> None:
        if name is None:
            return
        self.variables[name] = value
        self.meta_info[name] = meta
        self.events[name].set()
        self.stream_var_events[name].set()

    def _exec_gen(self, expr: Gen) -> None:
        params = resolve_params(expr, self.defaults)
        if params.token_healing is None and self.role is not None and len(self.text_) == self.role_begin_pos:
            # the prompt ends with the chat template's own marker, tokenized as the model saw
            # it in training: backing up its last token ("\n" after "assistant") would let
            # the answer start with a merged "\n\n" instead
            params = replace(params, token_healing=False)
        request = GenerateRequest(params=params, session_id=self.session.session_id(), **self._request_fields())
        if self.stream and (request.params.n or 1) == 1:
            self._stream_gen(expr, request)
            return
        result = self.backend.generate(request)
        self._fill(result.text)
        if len(result.samples) > 1:
            self._set_var(expr.name, [convert_value(expr, t) for t in result.samples], list(result.meta_infos))
        else:
            self._set_var(expr.name, convert_value(expr, result.text), result.meta_info)

    def _stream_gen(self, expr: Gen, request: GenerateRequest) -> None:
        name = expr.name
        pieces: list[str] = []
        meta = None
        if name is not None:
            self.variables[name] = ""
        for chunk in self.backend.generate_stream(request):
            pieces.append(chunk.text)
            self.text_ += chunk.text
            if chunk.meta_info is not None:
                meta = chunk.meta_info
            if name is not None:
                self.variables[name] = "".join(pieces)
                self.meta_info[name] = meta
                self.stream_var_events[name].set()
            self.text_event.set()
        self._set_var(name, convert_value(expr, "".join(pieces)), meta)

    def _exec_select(self, expr: Select) -> None:
        request = SelectRequest(choices=expr.choices, choices_method=expr.choices_method or token_length_normalized,
                                temperature=expr.temperature, **self._request_fields())
        decision = self.backend.select(request)
        self._fill(decision.decision)
        self._set_var(expr.name, decision.decision, decision.meta_info)

    def _exec_role_begin(self, expr: RoleBegin) -> None:
        if self.role is not None:
            raise ProgramError(f"roles cannot nest: {expr.role!r} began inside {self.role!r}; end {self.role!r} first")
        prefix, _ = self.chat.markers(tuple(self.messages_), expr.role)
        self._fill(prefix)
        self.role = expr.role
        self.role_begin_pos = len(self.text_)

    def _exec_role_end(self, expr: RoleEnd) -> None:
        if self.role != expr.role:
            raise ProgramError(f"{expr.role!r} ended but the open role is {self.role!r}")
        content = self.text_[self.role_begin_pos:].lstrip()
        _, suffix = self.chat.markers(tuple(self.messages_), expr.role)
        self._fill(suffix)
        self.messages_.append(Message(expr.role, content))
        self.role = None
        self.role_begin_pos = None

    def _exec_var_scope_begin(self, expr: VarScopeBegin) -> None:
        self.variables[expr.name] = len(self.text_)

    def _exec_var_scope_end(self, expr: VarScopeEnd) -> None:
        start = self.variables.get(expr.name)
        if not isinstance(start, int) or expr.name not in self.events:
            raise ProgramError(f"var_scope {expr.name!r} ended without beginning")
        self._set_var(expr.name, self.text_[start:], None)

    def _exec_commit_prefix(self, expr: CommitPrefix) -> None:
        if self.text_:
            self.backend.cache_prefix(self.text_)

    def _exec_concat(self, expr: ConcatStates) -> None:
        for state in expr.states:
            child = state.executor
            child.sync()
            child.raise_if_failed()
            self._fill(child.text_[child.fork_start_pos:])

    def _exec_unresolved(self, expr: Expr) -> None:
        raise ProgramError(f"{expr!r} only exists while tracing; it cannot run")

    # -- forking -------------------------------------------------------------------------

    def fork(self, size: int) -> list["Executor"]:
        if size > 1:
            self.submit(CommitPrefix())  # runs after the queued nodes, so it sees the whole text
        self.sync()
        self.raise_if_failed()
        children = []
        for _ in range(int(size)):
            child = Executor(self.backend, self.defaults, stream=self.stream, chat=self.chat, session=self.session)
            child.variables = dict(self.variables)
            child.meta_info = dict(self.meta_info)
            child.text_ = self.text_
            child.messages_ = list(self.messages_)
            child.role = self.role
            child.role_begin_pos = self.role_begin_pos
            child.fork_start_pos = len(self.text_)
            children.append(child)
        return children


_HANDLERS: dict[type, Callable[[Executor, Any], None]] = {
    Seq: Executor._exec_seq,
    Text: Executor._exec_text,
    Gen: Executor._exec_gen,
    Select: Executor._exec_select,
    RoleBegin: Executor._exec_role_begin,
    RoleEnd: Executor._exec_role_end,
    VarScopeBegin: Executor._exec_var_scope_begin,
    VarScopeEnd: Executor._exec_var_scope_end,
    CommitPrefix: Executor._exec_commit_prefix,
    ConcatStates: Executor._exec_concat,
    Argument: Executor._exec_unresolved,
    Variable: Executor._exec_unresolved,
}

__all__ = ["Executor", "convert_value", "resolve_params"]
