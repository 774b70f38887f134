"""``@function``: a prompt program, and how it runs (one, streamed, or a batch)."""

from __future__ import annotations

import inspect
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator

from furca.lang import config
from furca.lang.backends import Backend, as_backend
from furca.lang.errors import ProgramError
from furca.lang.interpreter import Executor
from furca.lang.ir import RUN_DEFAULTS, GenParams
from furca.lang.state import ProgramState

logger = logging.getLogger("furca.lang")

# a constant prefix shorter than this (characters) is not worth a cache call (as SGLang)
MIN_PRECACHE_CHARS = 64


def _defaults(max_new_tokens=128, stop=(), stop_token_ids=(), temperature=1.0, top_p=1.0, top_k=-1, min_p=0.0,
              frequency_penalty=0.0, presence_penalty=0.0, ignore_eos=False, return_logprob=None,
              logprob_start_len=None, top_logprobs_num=None, return_text_in_logprobs=None) -> GenParams:
    return GenParams(
        max_new_tokens=max_new_tokens, stop=stop, stop_token_ids=stop_token_ids, temperature=temperature,
        top_p=top_p, top_k=top_k, min_p=min_p, frequency_penalty=frequency_penalty,
        presence_penalty=presence_penalty, ignore_eos=ignore_eos, return_logprob=return_logprob,
        logprob_start_len=logprob_start_len, top_logprobs_num=top_logprobs_num,
        return_text_in_logprobs=return_text_in_logprobs,
    ).merged_over(RUN_DEFAULTS)


_SAMPLING_KEYS = tuple(inspect.signature(_defaults).parameters)


class Function:
    """A prompt program: ``func(s, *args)`` writes to the state ``s``."""

    def __init__(self, func: Callable[..., Any], num_api_spec_tokens: int | None = None,
                 bind_arguments: dict[str, Any] | None = None):
        self.func = func
        self.num_api_spec_tokens = num_api_spec_tokens  # accepted for SGLang compatibility; unused
        self.bind_arguments = dict(bind_arguments or {})
        spec = inspect.getfullargspec(func)
        if not spec.args:
            raise ProgramError(f"{func.__name__}: a prompt program's first argument is the state, e.g. def f(s, ...)")
        self.arg_names = spec.args[1:]
        self.arg_defaults = spec.defaults or ()
        self.__name__ = getattr(func, "__name__", "program")
        self.__doc__ = func.__doc__

    def bind(self, **kwargs: Any) -> "Function":
        unknown = [k for k in kwargs if k not in self.arg_names]
        if unknown:
            raise ProgramError(f"{self.__name__} has no argument(s) {unknown}; it takes {self.arg_names}")
        return Function(self.func, self.num_api_spec_tokens, {**self.bind_arguments, **kwargs})

    # -- running ---------------------------------------------------------------------------

    def run(self, *args: Any, stream: bool = False, backend: Any = None, **kwargs: Any) -> ProgramState:
        """Run once. ``kwargs`` are the program's arguments plus the default sampling
        parameters for its gens (``max_new_tokens``, ``temperature``, ``stop``, ...).
        Returns the state; with ``stream=True`` at once (read it with ``text_iter``),
        otherwise when the program has finished (re-raising its error, if any)."""
        sampling = {k: kwargs.pop(k) for k in list(kwargs) if k in _SAMPLING_KEYS}
        state = self._start(_resolve_backend(backend), args, kwargs, _defaults(**sampling), stream)
        if not stream and state.executor.error_ is not None:
            raise state.executor.error_
        return state

    def run_batch(self, batch_kwargs: list[Any], *, backend: Any = None, num_threads: int | str = "auto",
                  progress_bar: bool = True, generator_style: bool = False, order: str = "prefix", **sampling: Any):
        """Run once per item of ``batch_kwargs`` (dicts of arguments, or tuples in the
        argument order) on a pool of threads. Returns the states in input order (a
        failed program's state re-raises its error when read; ``state.error()`` shows
        it), or with ``generator_style=True`` yields them in order as they finish.

        Cache-aware order (``order="prefix"``, `furca.lang.prefix_tree`): each item is
        traced with its own arguments (the program's Python body runs once more per item,
        on placeholders, until it reads a generated value), the programs are submitted in
        the depth-first order of their prefix tree, and the shared prefixes are computed
        once before any program starts. ``order="input"``: no tracing, submitted as given."""
        if order not in ("prefix", "input"):
            raise ProgramError(f"run_batch order must be 'prefix' or 'input', got {order!r}")
        unknown = [k for k in sampling if k not in _SAMPLING_KEYS]
        if unknown:
            raise ProgramError(f"run_batch got unknown keyword(s) {unknown}; sampling keys: {list(_SAMPLING_KEYS)}")
        items = [self._as_kwargs(item) for item in batch_kwargs]
        be = _resolve_backend(backend)
        defaults = _defaults(**sampling)
        planned = order == "prefix" and len(items) > 1
        submit_order = self.plan_batch(items, be) if planned else list(range(len(items)))
        if num_threads == "auto":
            num_threads = max(96, (os.cpu_count() or 1) * 16)
        num_threads = max(1, min(int(num_threads), max(1, len(items))))
        iterator = self._batch_iter(be, items, submit_order, defaults, num_threads, progress_bar)
        return iterator if generator_style else list(iterator)

    def plan_batch(self, items: list[dict], backend: Any = None, warm: bool = True) -> list[int]:
        """The submission order of ``items`` (argument dicts): the DFS of their traced
        prefixes' tree. With ``warm``, computes the shared prefixes in the backend first
        (together: the engine computes what they share once)."""
        from furca.lang.prefix_tree import plan_batch
        from furca.lang.tracer import trace_program

        be = _resolve_backend(backend)
        plan = plan_batch([trace_program(self, kwargs, be).constant_prefix for kwargs in items], MIN_PRECACHE_CHARS)
        if warm and plan.warm:
            try:
                with ThreadPoolExecutor(min(len(plan.warm), 32), thread_name_prefix="furca-warm") as pool:
                    list(pool.map(be.cache_prefix, plan.warm))
            except Exception:  # noqa: BLE001 - warming is an optimisation only
                logger.debug("warming %s's shared prefixes failed", self.__name__, exc_info=True)
        return list(plan.order)

    def _batch_iter(self, backend: Backend, items: list[dict], order: list[int], defaults: GenParams,
                    num_threads: int, progress_bar: bool) -> Iterator[ProgramState]:
        bar = None
        if progress_bar:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(items), desc=self.__name__)
        lock = threading.Lock()

        def one(kwargs: dict) -> ProgramState:
            try:
                return self._start(backend, (), kwargs, defaults, False)
            finally:
                if bar is not None:
                    with lock:
                        bar.update()

        try:
            with ThreadPoolExecutor(num_threads, thread_name_prefix="furca-batch") as pool:
                futures = {i: pool.submit(one, items[i]) for i in order}
                for future in (futures[i] for i in range(len(items))):
                    state = future.result()
                    if state.executor.error_ is not None:
                        logger.warning("%s failed: %r", self.__name__, state.executor.error_)
                    yield state
        finally:
            if bar is not None:
                bar.close()

    def _as_kwargs(self, item: Any) -> dict[str, Any]:
        if isinstance(item, dict):
            return dict(item)
        if isinstance(item, (list, tuple)):
            required = len(self.arg_names) - len(self.arg_defaults)
            if not required <= len(item) <= len(self.arg_names):
                raise ProgramError(f"{self.__name__} takes {self.arg_names}; got {len(item)} values: {item!r}")
            return dict(zip(self.arg_names, item))
        raise ProgramError(f"run_batch items must be dicts or tuples of arguments, got {type(item).__name__}")

    def _start(self, backend: Backend, args: tuple, kwargs: dict, defaults: GenParams, stream: bool) -> ProgramState:
        kwargs = {**kwargs, **self.bind_arguments}
        state = ProgramState(Executor(backend, defaults, stream=stream))

        def body() -> None:
            try:
                state.ret_value = self.func(state, *args, **kwargs)
            except BaseException as e:  # noqa: BLE001 - the state carries it to the reader
                state.executor.fail(e)
            finally:
                state.executor.end()
            state.executor.sync()

        if stream:
            threading.Thread(target=body, name=f"furca-{self.__name__}", daemon=True).start()
        else:
            body()
        return state

    # -- tracing and caching -----------------------------------------------------------------

    def trace(self, *, backend: Any = None, **kwargs: Any):
        """The program's graph, run on placeholder arguments (see `furca.lang.tracer`)."""
        from furca.lang.tracer import trace_program

        be = backend if backend is not None else config.default_backend
        return trace_program(self, kwargs, None if be is None else as_backend(be))

    def cache(self, backend: Any = None) -> str:
        """Cache the program's constant prefix in the backend; returns the prefix (``""``
        when it is too short to be worth it or tracing found none)."""
        be = _resolve_backend(backend)
        try:
            prefix = self.trace(backend=be).constant_prefix
        except Exception:  # noqa: BLE001 - precaching is an optimisation only
            logger.debug("tracing %s for its prefix failed", self.__name__, exc_info=True)
            return ""
        if len(prefix) > MIN_PRECACHE_CHARS:
            be.cache_prefix(prefix)
            return prefix
        return ""

    def __call__(self, *args: Any, **kwargs: Any):
        from furca.lang.tracer import current_tracer

        tracer = current_tracer()
        if tracer is not None:  # a program called from a program being traced
            return tracer.call(self, args, kwargs)
        return self.run(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<furca.function {self.__name__}({', '.join(self.arg_names)})>"


def _resolve_backend(backend: Any) -> Backend:
    return as_backend(backend if backend is not None else config.default_backend)
