"""`ProgramState` (the ``s`` a program writes to) and `ProgramStateGroup` (what
``s.fork(n)`` returns). Both only submit nodes to their `Executor` and read back."""

from __future__ import annotations

import asyncio
from contextlib import contextmanager
from typing import Any, AsyncIterator, Iterator

from furca.lang.errors import ProgramError
from furca.lang.interpreter import Executor
from furca.lang.writer import ForkGroup, RoleWriter
from furca.lang.ir import ConcatStates


class ProgramState(RoleWriter):
    def __init__(self, executor: Executor):
        self.executor = executor
        self.ret_value: Any = None

    # SGLang's name for the executor, for code that reaches into it
    @property
    def stream_executor(self) -> Executor:
        return self.executor

    # -- writing ---------------------------------------------------------------------------

    def __iadd__(self, other: Any) -> "ProgramState":
        self.executor.submit(other)
        return self

    def _write(self, node: Any) -> None:
        self.executor.submit(node)

    def fork(self, size: int = 1, position_ids_offset: Any = None) -> "ProgramStateGroup":
        """``size`` copies of this state (text, messages, variables); the text so far is
        cached in the backend first so the branches share its KV."""
        if int(size) < 1:
            raise ProgramError(f"fork size must be >= 1, got {size}")
        return ProgramStateGroup([ProgramState(e) for e in self.executor.fork(size)], self)

    @contextmanager
    def copy(self, position_ids_offset: Any = None):
        """A one-branch fork, joined (variables gathered) when the block ends."""
        group = self.fork(1)
        try:
            yield group[0]
        finally:
            group.join()

    # -- reading ---------------------------------------------------------------------------

    def text(self) -> str:
        self.executor.sync()
        return self.executor.text_

    def messages(self) -> list[dict[str, str]]:
        self.executor.sync()
        return [m.to_dict() for m in self.executor.messages_]

    def sync(self) -> None:
        self.executor.sync()

    def error(self) -> BaseException | None:
        self.executor.sync()
        return self.executor.error_

    def get_var(self, name: str) -> Any:
        return self.executor.get_var(name)

    def set_var(self, name: str, value: Any) -> None:
        self.executor.variables[name] = value

    def get_meta_info(self, name: str, timeout: float | None = None) -> Any:
        return self.executor.get_meta_info(name, timeout)

    def __getitem__(self, name: str) -> Any:
        return self.get_var(name)

    def __setitem__(self, name: str, value: Any) -> None:
        self.set_var(name, value)

    def __contains__(self, name: str) -> bool:
        return name in self.executor.variables

    def __repr__(self) -> str:
        return f"ProgramState({self.text()!r})"

    def __del__(self) -> None:  # a state nobody holds stops its worker thread
        executor = getattr(self, "executor", None)
        if executor is not None:
            executor.end()

    # -- streaming ---------------------------------------------------------------------------

    def text_iter(self, var_name: str | None = None) -> Iterator[str]:
        """With ``run(stream=True)``: the text (or one variable) as it grows. Otherwise
        one piece: the whole text or the variable's value."""
        ex = self.executor
        if not ex.stream:
            yield self.text() if var_name is None else self.get_var(var_name)
            return
        for piece in self._pieces(var_name, lambda event: event.wait()):
            yield piece

    async def text_async_iter(self, var_name: str | None = None, return_meta_data: bool = False) -> AsyncIterator[Any]:
        """The asyncio twin of `text_iter`; ``return_meta_data`` yields ``(text, meta_info)``."""
        ex = self.executor
        loop = asyncio.get_running_loop()
        if not ex.stream:
            value = await loop.run_in_executor(None, lambda: self.text() if var_name is None else self.get_var(var_name))
            yield (value, self.get_meta_info(var_name)) if return_meta_data and var_name else value
            return
        for step in self._async_steps(var_name):
            if isinstance(step, _Wait):
                await loop.run_in_executor(None, step.event.wait)
            elif return_meta_data and var_name is not None:
                yield step, ex.meta_info.get(var_name)
            else:
                yield step

    def _pieces(self, var_name: str | None, wait) -> Iterator[str]:
        for step in self._async_steps(var_name):
            if isinstance(step, _Wait):
                wait(step.event)
            else:
                yield step

    def _async_steps(self, var_name: str | None) -> Iterator[Any]:
        """Text pieces interleaved with `_Wait` markers; the caller waits (blocking or
        not) on the marker's event before asking for the next step."""
        ex = self.executor
        prev = 0
        if var_name is None:
            while True:
                finished = ex.is_finished  # read before the text, so the last piece is never missed
                out = ex.text_[prev:]
                prev += len(out)
                if out:
                    yield out
                if finished:
                    ex.raise_if_failed()
                    return
                yield _Wait(ex.text_event)
                ex.text_event.clear()
        while var_name not in ex.stream_var_events:  # the program may not have reached it yet
            if ex.is_finished:
                ex.raise_if_failed()
                raise ProgramError(f"the program has no gen or select named {var_name!r} to stream")
            yield _Wait(ex.text_event)
            ex.text_event.clear()
        event, done = ex.stream_var_events[var_name], ex.events[var_name]
        while True:
            finished = done.is_set()
            value = ex.variables.get(var_name, "")
            out = value[prev:] if isinstance(value, str) else ""
            prev += len(out)
            if out:
                yield out
            if finished:
                ex.raise_if_failed()
                return
            yield _Wait(event)
            event.clear()


class _Wait:
    __slots__ = ("event",)

    def __init__(self, event):
        self.event = event


class ProgramStateGroup(ForkGroup):
    """The branches of a fork of a running program (see `ForkGroup`)."""

    def __init__(self, states: list[ProgramState], src_state: ProgramState | None = None):
        super().__init__(states)
        self.src_state = src_state

    def join(self, mode: str = "gather_variable") -> None:
        """``gather_variable``: each variable the branches set becomes a list (one value
        per branch) in the parent, and so does its meta info. ``concate_and_append``:
        the text each branch added is appended to the parent, in order."""
        if self.src_state is None:
            raise ProgramError("this group has no parent state to join into")
        if mode == "gather_variable":
            parent = self.src_state.executor
            before = set(parent.variables)
            for state in self.states:
                child = state.executor
                child.sync()
                child.raise_if_failed()
                for name in child.variables.keys() - before:
                    parent.variables.setdefault(name, []).append(child.variables[name])
                    parent.meta_info.setdefault(name, []).append(child.meta_info.get(name))
        elif mode == "concate_and_append":
            self.src_state += ConcatStates(tuple(self.states))
            self.src_state.executor.sync()
            self.src_state.executor.raise_if_failed()
        else:
            raise ProgramError(f"join mode must be 'gather_variable' or 'concate_and_append', got {mode!r}")
        for state in self.states:
            state.executor.end()
