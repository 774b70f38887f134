"""The scheduler thread and the state it shares with callers.

`SchedulerLoop` owns the condition variable and the inbox of typed messages
(`messages.py`: new requests, aborts, commands). Callers append and notify; the thread
drains the inbox between steps, handles each message in arrival order (`_dispatch`),
and sleeps on the condition when there is no work (no busy-wait). The thread holds the loop,
not the `Engine`, so an engine nobody references is collected and its thread stopped.
If the thread dies (only on an error that may have corrupted shared state: a request's
own failure is isolated inside the step, see `isolation.py`), ``error`` holds the crash
and every pending request and command receives `EngineClosedError` ("the engine died:
...") whose `__cause__` is the crash.

Step observers (`add_observer`) are called on the thread after every step that ran a
forward pass, with the scheduler's `StepStats`; one that raises is logged once and
removed (it can never stop the scheduler).

At interpreter exit an `atexit` hook stops every live loop and joins its thread (bounded
by ``EXIT_JOIN_TIMEOUT``): a daemon thread left inside a forward pass while the
interpreter tears down kills the process ("terminate called without an active
exception", exit code 134). Only daemon threads can still wait for a result then; they
are not woken (their tracebacks would be torn half-way through the teardown).
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from concurrent.futures import Future
from typing import Any, Callable

from furca.errors import EngineClosedError, InvalidRequestError
from furca.runtime.memory import MemoryAccountingError
from furca.runtime.messages import AbortRequest, Message, NewRequest, RunCommand
from furca.runtime.output import Output, StreamDelta
from furca.runtime.request import Req
from furca.runtime.scheduler import Scheduler

logger = logging.getLogger("furca")

EXIT_JOIN_TIMEOUT = 30.0  # seconds interpreter exit waits for each scheduler thread's step
_live_loops: "weakref.WeakSet[SchedulerLoop]" = weakref.WeakSet()  # alive while their thread runs


@atexit.register
def _stop_live_loops() -> None:
    """Stop every engine nobody shut down, so no scheduler thread runs during teardown."""
    loops = list(_live_loops)
    for loop in loops:
        loop.at_exit = True
        loop.stop(join=False)
    for loop in loops:
        loop.join(EXIT_JOIN_TIMEOUT)
        if loop.thread.is_alive():
            logger.warning("furca scheduler thread still running at exit after %.0f s", EXIT_JOIN_TIMEOUT)


def _is_final(obj: Any) -> bool:
    return isinstance(obj, (Output, BaseException)) or (isinstance(obj, StreamDelta) and obj.finished)


class SchedulerLoop:
    def __init__(self, scheduler: Scheduler, check_memory: bool):
        self.scheduler = scheduler
        self.check_memory = check_memory
        self.cond = threading.Condition()
        self.inbox: list[Message] = []
        self.active_rids: set[str] = set()
        self.stopping = False
        self.closed = False
        self.at_exit = False  # stopped by the interpreter's exit: nobody is told
        self.error: BaseException | None = None
        # replaced whole (never mutated), so the thread reads it without the lock
        self.observers: tuple[Callable[[Any], None], ...] = ()
        self.thread = threading.Thread(target=self.run, name="furca-scheduler", daemon=True)
        _live_loops.add(self)

    # -- caller side (any thread) --------------------------------------------------------

    def raise_if_closed(self) -> None:
        if self.closed or self.stopping:
            msg = f"the engine died: {self.error!r}" if self.error else "the engine is shut down"
            raise EngineClosedError(msg) from self.error

    def submit(self, reqs: list[Req]) -> None:
        """Queue `reqs` atomically; rids must not be in flight."""
        for req in reqs:
            req.emit = self._tracking(req.rid, req.emit)
        with self.cond:
            self.raise_if_closed()
            busy = [r.rid for r in reqs if r.rid in self.active_rids or r.group_rid in self.active_rids]
            if busy:
                raise InvalidRequestError(f"rid {busy[0]!r} is already in flight; use a new rid")
            self.active_rids.update(r.rid for r in reqs)
            self.inbox.extend(NewRequest(r) for r in reqs)
            self.cond.notify()

    def abort(self, rid: str) -> None:
        with self.cond:
            if not self.closed:
                self.inbox.append(AbortRequest(rid))
                self.cond.notify()

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the scheduler thread between steps; return its result."""
        fut: Future = Future()
        with self.cond:
            self.raise_if_closed()
            self.inbox.append(RunCommand(fn, fut))
            self.cond.notify()
        return fut.result()

    def add_observer(self, fn: Callable[[Any], None]) -> None:
        with self.cond:
            self.observers = (*self.observers, fn)

    def remove_observer(self, fn: Callable[[Any], None]) -> None:
        """Remove `fn` (each registration of it); unknown observers are ignored."""
        with self.cond:
            self.observers = tuple(o for o in self.observers if o is not fn)

    def _notify(self, stats: Any) -> None:
        for fn in self.observers:
            try:
                fn(stats)
            except Exception:  # noqa: BLE001 - an observer never stops the scheduler
                logger.exception("step observer %r raised; it is removed", fn)
                self.remove_observer(fn)

    def stop(self, join: bool = True) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify()
        if join:
            self.join()

    def fail(self, error: BaseException) -> None:
        """End the thread as a fatal error inside a step would: ``error`` becomes the
        crash every pending request and later call is told about (any thread)."""
        with self.cond:
            if self.closed or self.stopping:
                return
            self.error = error
            self.stopping = True
            self.cond.notify()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end (never from the thread itself, nor before it started)."""
        if threading.current_thread() is not self.thread and self.thread.is_alive():
            self.thread.join(timeout)

    def _tracking(self, rid: str, emit: Callable[[Any], None]) -> Callable[[Any], None]:
        def tracked(obj: Any) -> None:
            if _is_final(obj):
                with self.cond:
                    self.active_rids.discard(rid)
            emit(obj)

        return tracked

    # -- the scheduler thread -------------------------------------------------------------

    def _has_input(self) -> bool:
        return bool(self.inbox or self.stopping)

    def _dispatch(self, msg: Message) -> None:
        """Handle one message on the scheduler thread."""
        if isinstance(msg, NewRequest):
            self.scheduler.add_request(msg.req)
        elif isinstance(msg, AbortRequest):
            self.scheduler.abort(msg.rid)
        elif isinstance(msg, RunCommand):
            try:
                msg.future.set_result(msg.fn())
            except Exception as e:  # reported to the caller; the engine goes on
                msg.future.set_exception(e)
        else:
            raise TypeError(f"unknown scheduler message {msg!r}")

    def run(self) -> None:
        sched = self.scheduler
        try:
            while True:
                with self.cond:
                    while not (self._has_input() or sched.has_work()):
                        # idle: wake when a session's lease expires, to release its pin
                        if not self.cond.wait(sched.cache.leases.next_deadline_in()):
                            sched.cache.leases.expire()
                    if self.stopping:
                        break
                    inbox, self.inbox = self.inbox, []
                for msg in inbox:
                    self._dispatch(msg)
                if sched.has_work():
                    if not sched.step():
                        raise MemoryAccountingError(
                            f"the scheduler cannot make progress ({len(sched.waiting)} waiting, nothing runs)"
                        )
                    if self.observers and sched.last_step is not None:
                        self._notify(sched.last_step)
                    if not sched.has_work() and self.check_memory:
                        sched.check_memory(idle=True)
        except BaseException as e:  # noqa: BLE001 - every crash must reach the callers
            self.error = e
            logger.exception("the furca scheduler thread died (every pending request fails)")
        finally:
            self._close()

    def _close(self) -> None:
        self.scheduler.post.masks.close()
        with self.cond:
            self.closed = True
            inbox, self.inbox = self.inbox, []
        if self.at_exit and self.error is None:
            return  # interpreter exit: whoever still waits is a daemon thread about to vanish
        msg = f"the engine died: {self.error!r}" if self.error else "the engine was shut down"
        err = EngineClosedError(msg)
        err.__cause__ = self.error
        for msg in inbox:
            if isinstance(msg, NewRequest):
                msg.req.emit(err)
        self.scheduler.fail_all(err)
        for msg in inbox:
            if isinstance(msg, RunCommand):
                msg.future.set_exception(err)
