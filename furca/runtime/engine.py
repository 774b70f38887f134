"""`Engine`: the in-process runtime. One scheduler thread runs the model (see
`engine_loop.py`); every public method is thread-safe, and `async_generate` never blocks
its asyncio loop.

Callers validate and build their requests on their own thread (`request_builder.py`),
then queue them. Results travel back through each request's `emit` callback: a
`queue.Queue` for `generate`, `loop.call_soon_threadsafe` into an `asyncio.Queue` for
`async_generate`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import weakref
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

import torch

from furca.errors import ConfigError
from furca.runtime.cache_manager import CacheManager
from furca.runtime.config import EngineConfig
from furca.runtime.engine_loop import SchedulerLoop
from furca.runtime.faults import ENV_VAR as FAULTS_ENV_VAR
from furca.runtime.faults import FaultInjector
from furca.runtime.model_runner import ModelRunner
from furca.runtime.output import StreamDelta
from furca.runtime.request import Req
from furca.runtime.request_builder import Limits, build_requests
from furca.runtime.scheduler import Scheduler
from furca.runtime.step_stats import StepLog, StepStats
from furca.runtime.threads import in_short_lived_thread

logger = logging.getLogger("furca")


class _Results:
    """What one `generate` call has received so far, in input order: the final `Output`
    of each request (``outputs``) and whether it has finished (``done``). The sync and
    async loops of `Engine` differ only in how they wait for the next item."""

    def __init__(self, n: int):
        self.outputs: list[Any] = [None] * n
        self.done = [False] * n
        self._left = n

    @property
    def complete(self) -> bool:
        return self._left == 0

    def take(self, i: int, obj: Any) -> Any:
        """Record request ``i``'s `Output` or `StreamDelta`; re-raise an engine error."""
        if isinstance(obj, BaseException):
            raise obj
        final = obj.finished if isinstance(obj, StreamDelta) else True  # an Output is final
        if final and not self.done[i]:
            self.done[i] = True
            self._left -= 1
        self.outputs[i] = obj
        return obj


def resolve_dtypes(dtype: str, linear_dtype: str, device: str) -> tuple[str, str]:
    """The model's (dtype, linear_dtype) from the config's, where either may be "auto":
    dtype bfloat16 on CUDA and float32 elsewhere; linear_dtype bfloat16 over an automatic
    float32 on a CPU with native bf16 dot products (about 2x faster linears there), else
    dtype. An explicit dtype is honoured throughout unless linear_dtype is explicit too."""
    from furca.runtime.cpu_features import has_native_bf16

    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
        if linear_dtype == "auto" and dtype == "float32" and device.startswith("cpu") and has_native_bf16():
            linear_dtype = "bfloat16"
    return dtype, (dtype if linear_dtype == "auto" else linear_dtype)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _stop(loop: SchedulerLoop, tp) -> None:
    """Stop the scheduler thread, then (no forward pass running any more) the workers."""
    loop.stop()
    if tp is not None:
        tp.close()


def _resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


class Engine:
    """``Engine(model=None, *, grammar_backend=None, **config)``.

    ``model``: None (the default model, pulled on first use), a model directory or
    ``.gguf`` path, or an already loaded ``LoadedModel``. ``config``: the fields of
    ``EngineConfig``. ``grammar_backend``: an object with ``create_matcher(params) ->
    GrammarHook`` that compiles a request's constraint; None (the default) installs
    `ConstrainBackend` over furca.constrain (regex, json_schema, ebnf, choices,
    json_object, structural_tag); False turns constrained decoding off (constrained
    requests are rejected, and ``engine.grammar_backend`` is None).
    """

    def __init__(self, model: Any = None, *, grammar_backend: Any = None, **config: Any):
        self.config = EngineConfig.from_kwargs(**config)
        self._tp = None  # a TensorParallelGroup when tp_size > 1 (furca/runtime/distributed)
        try:
            in_short_lived_thread(lambda: self._set_up(model, grammar_backend))
        except BaseException:
            if self._tp is not None:
                self._tp.close()
            raise
        self._loop = SchedulerLoop(self.scheduler, self.config.check_memory)
        if self._tp is not None:
            self._tp.watch(self._loop.fail)
        faults = FaultInjector.from_env()  # tests only: FURCA_FAULT_INJECT
        if faults is not None:
            logger.warning("fault injection is on (%s=%s): %r", FAULTS_ENV_VAR, os.environ[FAULTS_ENV_VAR], faults)
            self.scheduler.set_faults(faults)
        if self.config.decode_log_interval:
            self._loop.add_observer(StepLog(self.config.decode_log_interval, logger))
        self._loop.thread.start()
        # an engine nobody references stops its thread (the thread holds the loop, not self)
        self._finalizer = weakref.finalize(self, _stop, self._loop, self._tp)

    def _set_up(self, model: Any, grammar_backend: Any) -> None:
        """Load the model, size the KV pool, build the scheduler (off the caller's thread)."""
        loaded = self._load(model)
        self.loaded = loaded
        self.tokenizer = loaded.tokenizer
        self.model_config = loaded.config
        self.model_path = getattr(loaded, "model_path", None)
        self.generation_defaults = dict(getattr(loaded, "generation_defaults", {}) or {})
        self.grammar_backend = None if grammar_backend is False else grammar_backend
        ctx = int(loaded.context_length)
        if self.config.context_length is not None:
            if self.config.context_length > ctx:
                raise ConfigError(f"context_length {self.config.context_length} exceeds the model's {ctx}")
            ctx = self.config.context_length
        self.context_length = ctx
        self.eos_token_ids = list(self.tokenizer.eos_token_ids)
        if self.config.random_seed is not None:  # the generator unseeded requests draw from
            torch.manual_seed(self.config.random_seed)
        if self._tp is None:
            runner = ModelRunner(loaded.model, loaded.config, self.config, ctx)
        else:
            runner = self._tp.make_runner(loaded, self.config, ctx)
        cache = CacheManager(runner.capacity, self.config.max_running_requests, ctx, runner.device,
                             radix=not self.config.disable_radix_cache, pinned_share=self.config.pinned_share,
                             session_ttl=self.config.session_ttl)
        self.scheduler = Scheduler(runner, cache, self.config, self.tokenizer, self.eos_token_ids)
        self.capacity = runner.capacity  # KV pool, tokens
        self.vocab_size = runner.vocab_size  # logits width: token ids and bitmask width
        if grammar_backend is None:  # the default; its tokenizer tables are built lazily
            from furca.runtime.grammar_backend import default_grammar_backend

            self.grammar_backend = default_grammar_backend(self.tokenizer, self.vocab_size, self.eos_token_ids)
        self._limits = Limits(ctx, runner.capacity, runner.vocab_size)
        self._device = runner.device

    def _load(self, model: Any):
        if model is not None and hasattr(model, "model") and hasattr(model, "tokenizer"):
            if self.config.tp_size > 1:
                raise ConfigError("tp_size > 1 loads the model in every rank: pass a model path, not a LoadedModel")
            return model
        from furca.runtime.loader import load_model

        device = _resolve_device(self.config.device)
        dtype, linear_dtype = resolve_dtypes(self.config.dtype, self.config.linear_dtype, device)
        if linear_dtype != dtype:
            logger.info("linear projections (and by default the KV cache) in %s, the rest in %s; "
                        "dtype='float32' runs all in fp32", linear_dtype, dtype)
        load_args = dict(dtype=dtype, linear_dtype=linear_dtype, quantization=self.config.quantization,
                         quantization_group_size=self.config.quantization_group_size)
        if self.config.tp_size > 1:
            from furca.runtime.distributed.launch import TensorParallelGroup

            c = self.config
            if c.node_rank > 0:
                raise ConfigError("node_rank > 0 runs no engine, only that node's ranks: start it with "
                                  "`furca serve --nnodes N --node-rank K ...`")
            self._tp = TensorParallelGroup(c.tp_size, device, nnodes=c.nnodes, node_rank=0,
                                           dist_init_addr=c.dist_init_addr)
            return self._tp.start(None if model is None else Path(model), load_args, self.config)
        return load_model(None if model is None else Path(model), device=device, **load_args)

    # -- public API ------------------------------------------------------------------------

    def generate(self, prompt=None, *, input_ids=None, sampling_params=None, rid=None, stream: bool = False,
                 session_id: str | None = None):
        """`Output` (one prompt, n == 1) or a list in input order (a prompt's n samples
        adjacent); with ``stream=True`` an iterator of `StreamDelta` (the last one of each
        request has ``finished=True`` and its ``meta_info``; a delta's ``retract`` takes back
        ids streamed before it: accumulate ids with `StreamDelta.apply_ids`). ``session_id``
        (from `open_session`): the call belongs to that session, whose pin moves to what it
        cached; an id not open raises `SessionError`."""
        results: queue.Queue = queue.Queue()
        reqs, as_list = self._prepare(prompt, input_ids, sampling_params, rid, stream,
                                      lambda i: lambda obj: results.put((i, obj)), session_id)
        if stream:
            return self._stream(results, reqs)
        got = _Results(len(reqs))
        try:
            while not got.complete:
                got.take(*results.get())
        finally:
            if not got.complete:
                self._abort_unfinished(reqs, got.done)
        return got.outputs if as_list else got.outputs[0]

    def _stream(self, results: queue.Queue, reqs: list[Req]) -> Iterator[StreamDelta]:
        got = _Results(len(reqs))
        try:
            while not got.complete:
                yield got.take(*results.get())
        finally:
            if not got.complete:
                self._abort_unfinished(reqs, got.done)

    async def async_generate(self, prompt=None, *, input_ids=None, sampling_params=None, rid=None,
                             stream: bool = False, session_id: str | None = None):
        """Asyncio twin of `generate`. With ``stream=True``, ``await`` it to get an async
        iterator of `StreamDelta`. Cancelling the awaiting task aborts the requests."""
        loop = asyncio.get_running_loop()
        results: asyncio.Queue = asyncio.Queue()

        def make_emit(i: int):
            def emit(obj: Any) -> None:
                try:
                    loop.call_soon_threadsafe(results.put_nowait, (i, obj))
                except RuntimeError:  # the loop is closed: nobody is listening any more
                    pass
            return emit

        # tokenizing and validating a big batch takes a while: off the event loop
        prepared = loop.run_in_executor(
            None, lambda: self._prepare(prompt, input_ids, sampling_params, rid, stream, make_emit, session_id))
        try:
            reqs, as_list = await asyncio.shield(prepared)
        except asyncio.CancelledError:
            prepared.add_done_callback(self._abort_prepared)
            raise
        if stream:
            return self._astream(results, reqs)
        got = _Results(len(reqs))
        try:
            while not got.complete:
                got.take(*await results.get())
        finally:
            if not got.complete:
                self._abort_unfinished(reqs, got.done)
        return got.outputs if as_list else got.outputs[0]

    async def _astream(self, results: asyncio.Queue, reqs: list[Req]) -> AsyncIterator[StreamDelta]:
        got = _Results(len(reqs))
        try:
            while not got.complete:
                yield got.take(*await results.get())
        finally:
            if not got.complete:
                self._abort_unfinished(reqs, got.done)

    def abort(self, rid: str) -> None:
        """Abort a request (or all samples of an n > 1 request) mid-flight or waiting; its
        caller gets finish_reason ``{"type": "abort"}``. Unknown rids are ignored."""
        self._loop.abort(rid)

    def flush_cache(self) -> bool:
        """Drop the radix cache; only when no request is queued or running. Returns
        whether it flushed."""
        return self._loop.call(self.scheduler.flush_cache)

    def open_session(self, session_id: str | None = None, *, timeout: float | None = None) -> str:
        """Open a session (furca/radix/leases.py): its calls' KV stays pinned in the radix
        cache between them, within ``pinned_share`` of the pool, until `close_session` or
        ``timeout`` seconds (default ``session_ttl``) pass without a call. Returns its id (a
        fresh one unless ``session_id`` is given); `SessionError` for an id already open."""
        self._loop.raise_if_closed()
        return self.scheduler.cache.leases.open(session_id, timeout)

    def touch_session(self, session_id: str) -> None:
        """Refresh ``session_id``'s lease, as a call of it does; `SessionError` when the id
        is not open."""
        self.scheduler.cache.leases.touch(session_id)

    def close_session(self, session_id: str) -> None:
        """Close a session and release its pinned KV (it stays cached, evictable).
        `SessionError` when the id is not open (never opened, closed or expired)."""
        self._loop.call(lambda: self.scheduler.cache.leases.close(session_id))

    def get_server_info(self) -> dict[str, Any]:
        """Capacity and usage of the KV pool, cache hit rate, queue lengths, config."""
        return self._loop.call(self._info)

    def check_memory(self, idle: bool = True) -> dict[str, int]:
        """Run the strict KV accounting check on the scheduler thread (tests). Raises
        MemoryAccountingError on a leak. ``idle`` also requires no request and no lock."""
        def run():
            self.scheduler.check_memory(idle=idle)
            return self.scheduler.cache.counts()
        return self._loop.call(run)

    def add_step_observer(self, fn: Callable[[StepStats], None]) -> None:
        """Call ``fn(stats)`` on the scheduler thread after every step that ran a forward pass
        (`StepStats`: the batch's prefill / decode requests and tokens, running and waiting
        requests and KV use after it, the requests admitted in it with their cached tokens).
        ``fn`` must be quick and must not block or call back into the engine and wait; if it
        raises, the error is logged once and ``fn`` is removed. It runs after the step has
        delivered its results, before any later command (``get_server_info``) or step."""
        self._loop.add_observer(fn)

    def remove_step_observer(self, fn: Callable[[StepStats], None]) -> None:
        """Stop calling ``fn``; takes effect before the next step. Unknown observers are ignored."""
        self._loop.remove_observer(fn)

    def effective_config(self) -> dict[str, Any]:
        """Every `EngineConfig` field with what it resolved to: the dtypes, device and
        attention backend in use instead of "auto", the context length and KV pool size
        (``max_total_tokens`` in tokens, ``kv_cache_bytes`` in bytes) in effect."""
        from furca.runtime.quant.linear import quantization_summary

        runner = self.scheduler.runner
        out = {k: getattr(self.config, k) for k in self.config.__dataclass_fields__}
        linear = getattr(runner.model, "linear_dtype", None)
        out.update(
            dtype=_dtype_name(runner.dtype),
            linear_dtype=_dtype_name(linear if isinstance(linear, torch.dtype) else runner.dtype),
            kv_cache_dtype="fp8_e4m3" if runner.kv_dtype == torch.float8_e4m3fn else _dtype_name(runner.kv_dtype),
            quantization=quantization_summary(runner.model),
            device=str(runner.device),
            attention_backend=type(runner.attn_backend).__name__.removesuffix("AttentionBackend").lower(),
            context_length=self.context_length,
            max_total_tokens=self.capacity,
            kv_cache_bytes=self.capacity * runner.bytes_per_token,
        )
        return out

    def shutdown(self) -> None:
        """Stop the scheduler thread (and the tensor-parallel workers); pending requests get
        EngineClosedError. Idempotent."""
        _stop(self._loop, self._tp)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    @property
    def is_closed(self) -> bool:
        return self._loop.closed

    @property
    def error(self) -> BaseException | None:
        """The exception that killed the scheduler thread (the engine died: it is closed and
        every call raises EngineClosedError), or None while it runs or after `shutdown`."""
        return self._loop.error

    def set_fault_injector(self, injector: FaultInjector | None) -> None:
        """Tests only: install a `FaultInjector` (faults.py), or None to remove it; takes
        effect before the next step."""
        self._loop.call(lambda: self.scheduler.set_faults(injector))

    # -- internals ---------------------------------------------------------------------------

    def _prepare(self, prompt, input_ids, sampling_params, rid, stream, make_emit, session_id=None):
        self._loop.raise_if_closed()
        if session_id is not None:
            self.touch_session(session_id)
        reqs, as_list = build_requests(
            tokenizer=self.tokenizer, prompt=prompt, input_ids=input_ids, sampling_params=sampling_params,
            rid=rid, stream=stream, limits=self._limits, eos_ids=self.eos_token_ids,
            model_defaults=self.generation_defaults, grammar_backend=self.grammar_backend,
            device=self._device, make_emit=make_emit,
        )
        for req in reqs:
            req.session_id = session_id
        self._loop.submit(reqs)
        return reqs, as_list

    def _abort_prepared(self, prepared) -> None:
        if not prepared.cancelled() and prepared.exception() is None:
            for req in prepared.result()[0]:
                self.abort(req.rid)

    def _abort_unfinished(self, reqs: list[Req], done: list) -> None:
        for req, d in zip(reqs, done):
            if not d:
                self.abort(req.rid)

    def _info(self) -> dict[str, Any]:
        s = self.scheduler
        stats = dict(s.stats)
        prompt = stats["prompt_tokens"]
        counts = s.cache.counts()
        return {
            "model_path": str(self.model_path) if self.model_path is not None else None,
            "context_length": self.context_length,
            "max_total_tokens": counts["capacity"],
            "used_tokens": s.cache.used_tokens(),
            "cached_tokens_in_tree": counts["tree"],
            **counts,
            "num_running": len(s.running),
            "num_waiting": len(s.waiting),
            "cache_hit_rate": stats["cached_tokens"] / prompt if prompt else 0.0,
            "sessions": s.cache.leases.info(),
            "tensor_parallel": self._tp.info() if self._tp is not None else None,
            "new_token_ratio": s.new_token_ratio,
            "stats": stats,
            "config": {k: getattr(self.config, k) for k in self.config.__dataclass_fields__},
            "effective_config": self.effective_config(),
        }
