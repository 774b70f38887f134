"""Constraints compiled on a pool of their own, with a deadline the compile itself obeys.

The grammar backend is the engine's own (``engine.grammar_backend``: by default
`furca.runtime.grammar_backend.ConstrainBackend`; None when the engine has constrained
decoding off, and then the engine rejects constrained requests itself). The engine
compiles a request's constraint while building it, without a time limit, so
`Constraints.precompile` compiles first, through the backend's ``compile(params)``; the
engine's own ``create_matcher`` then hits the compiler's cache and only creates the
matcher.

Promises (tests/server/test_grammar_pool.py):
- compiles run on ``--grammar-workers`` threads of their own (``furca-grammar-N``), never
  on the event loop's default executor, so `/tokenize`, chat rendering and the other
  ``asyncio.to_thread`` work never queue behind them;
- a request's deadline is ``--grammar-timeout`` from its arrival: time queued behind a
  full pool counts; the backend gets the deadline (``compile(params, deadline=...,
  limit_s=...)``, when its ``compile`` takes one) and stops its work there, so the thread
  is free again; past it the request gets a 400 "did not compile within N s" and nothing
  lands in the compiler's cache. A backend whose ``compile`` takes no deadline still
  gets a 400 at the deadline (its thread finishes on its own);
- identical concurrent compiles (equal ``params.compile_key``) share one job: the later
  request waits for the earlier one's compile (and its deadline);
- while a compile runs, the interpreter switches threads every COMPILE_SWITCH_INTERVAL
  (1 ms) instead of CPython's 5 ms: a compile thread holds the GIL for whole intervals,
  and the event loop needs it several times per request, so with 5 ms /tokenize waited
  ~60 ms (p50) during an attack (bench/results/serving.md). Restored when the
  pool is idle.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from furca.errors import CompileError
from furca.runtime.sampling_params import SamplingParams

logger = logging.getLogger("furca.server")

COMPILE_SWITCH_INTERVAL = 0.001  # s: sys.setswitchinterval while a compile runs


class Constraints:
    """Compile the constraints of a request's params on a bounded pool, with a deadline."""

    def __init__(self, engine: Any, timeout: float, metrics: Any, workers: int = 2):
        self.engine, self.timeout, self.metrics = engine, float(timeout), metrics
        self.workers = max(1, int(workers))
        self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="furca-grammar")
        self._inflight: dict[Any, asyncio.Future] = {}  # compile_key -> the shared job (loop thread only)
        self._lock = threading.Lock()
        self.busy = 0      # jobs running on a pool thread now
        self._switch_interval = sys.getswitchinterval()
        self.started = 0   # jobs that began compiling (a job whose deadline passed in the queue never does)

    @property
    def available(self) -> bool:
        return self.engine.grammar_backend is not None

    @property
    def idle(self) -> bool:
        """No job queued or running (read on the event loop's thread)."""
        return not self._inflight and self.busy == 0

    async def precompile(self, params_list: list[SamplingParams]) -> None:
        """Compile every distinct constraint of params_list; CompileError (a 400) on a bad
        constraint or past the deadline (``self.timeout`` s from now, queueing included)."""
        backend = self.engine.grammar_backend
        todo = list({p.compile_key: p for p in params_list if p.has_constraint}.values())
        if backend is None or not todo:
            return  # the engine reports "not available" itself
        deadline = time.monotonic() + self.timeout
        # the runtime backend's compile(params); a custom backend may only make matchers
        compile_one = getattr(backend, "compile", None) or backend.create_matcher
        jobs = [(p, self._job(compile_one, p, deadline)) for p in todo]
        for p, job in jobs:
            try:
                await asyncio.wait_for(asyncio.shield(job), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise self._timeout_error(p) from None
            except CompileError as e:
                from furca.constrain.deadline import CompileTimeout  # loaded with the backend

                if isinstance(e, CompileTimeout):
                    raise self._timeout_error(p) from None
                raise

    def close(self) -> None:
        """Stop taking jobs (running compiles end at their deadline)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- internals ---------------------------------------------------------------------------

    def _timeout_error(self, p: SamplingParams) -> CompileError:
        return CompileError(f"the {p.constraint[0]} constraint did not compile within {self.timeout:g} s; "
                            "simplify it")

    def _job(self, compile_one: Callable, p: SamplingParams, deadline: float) -> asyncio.Future:
        key = p.compile_key
        job = self._inflight.get(key)
        if job is not None and not job.done():
            return job  # an identical compile is under way: share it
        job = asyncio.wrap_future(self._pool.submit(self._run, compile_one, p, deadline))
        self._inflight[key] = job

        def done(f: asyncio.Future, key=key) -> None:
            if self._inflight.get(key) is f:
                del self._inflight[key]
            if not f.cancelled():
                f.exception()  # retrieved: a job nobody awaits any more logs nothing

        job.add_done_callback(done)
        return job

    def _run(self, compile_one: Callable, p: SamplingParams, deadline: float) -> None:
        """On a pool thread: compile p unless its deadline passed while it was queued."""
        if time.monotonic() >= deadline:
            raise self._timeout_error(p)
        with self._lock:
            if self.busy == 0:
                self._switch_interval = sys.getswitchinterval()
                sys.setswitchinterval(min(self._switch_interval, COMPILE_SWITCH_INTERVAL))
            self.busy += 1
            self.started += 1
        start = time.perf_counter()
        try:
            if _takes_deadline(compile_one):
                compile_one(p, deadline=deadline, limit_s=self.timeout)
            else:
                compile_one(p)
        finally:
            with self._lock:
                self.busy -= 1
                if self.busy == 0:
                    sys.setswitchinterval(self._switch_interval)
        self.metrics.grammar_compile.observe(time.perf_counter() - start)


def _takes_deadline(fn: Callable) -> bool:
    try:
        return "deadline" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
