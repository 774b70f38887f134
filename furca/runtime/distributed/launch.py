"""Rank 0's side of a tensor-parallel engine: it spawns the workers, joins the
rendezvous with them, loads its own shard, and watches them until it closes them.

`TensorParallelGroup` is created by `Engine` when ``tp_size > 1``:

- `start`: spawn ranks ``1 .. N-1`` (``multiprocessing`` spawn, `worker.worker_main`),
  wait until each has started, join the process groups, load rank 0's shard;
- `make_runner`: rank 0's `TPModelRunner` (its KV pool sizes every rank's), then wait
  until every worker has its pool (``("ready",)``; a worker's error is raised here as
  `TensorParallelError`);
- `watch`: a thread waits on the workers' process sentinels; when one exits while the
  engine runs, the others are killed (so a collective in flight fails at once) and
  ``on_failure(TensorParallelError)`` is called (the engine's loop then closes);
- `close`: ``STOP`` to the workers, join them (``JOIN_TIMEOUT``), kill any left, leave
  the groups. Idempotent; after a failure it only kills and leaves.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import threading
import time
from typing import Any, Callable

import torch

from furca.errors import ConfigError, TensorParallelError
from furca.runtime.distributed import group, step_wire
from furca.runtime.distributed.sharding import TPShard
from furca.runtime.distributed.worker import rank_device, set_cpu_threads, worker_main

logger = logging.getLogger("furca")

START_TIMEOUT = 600.0  # seconds a worker may take to start, load its shard and size its pool
JOIN_TIMEOUT = 10.0  # seconds a worker gets to exit after STOP before it is killed


class TensorParallelGroup:
    def __init__(self, size: int, device: str, init_method: str | None = None):
        if not isinstance(size, int) or size < 2:
            raise ConfigError(f"a tensor-parallel group needs tp_size >= 2, got {size!r}")
        self.size = size
        self.device = rank_device(device, 0)
        self.init_method = init_method or group.free_init_address()
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self.failure: TensorParallelError | None = None
        self.closed = False
        self._lock = threading.Lock()

    # -- start-up ----------------------------------------------------------------------

    def start(self, model_path, load_args: dict, config) -> Any:
        """Spawn the workers and load rank 0's shard; returns rank 0's `LoadedModel`."""
        from furca.runtime.loader import load_model
        from furca.runtime.pull import resolve_model_path

        path = resolve_model_path(model_path)  # pulled once here, not by every rank
        load_args = {**load_args, "path": path, "device": str(self.device)}
        ctx = multiprocessing.get_context("spawn")
        for rank in range(1, self.size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker_main, name=f"furca-tp-rank{rank}", daemon=True,
                               args=(rank, self.size, self.init_method, load_args, config, child))
            proc.start()
            child.close()
            self.procs.append(proc)
            self.conns.append(parent)
        for rank in range(1, self.size):
            self._expect(rank, "started")
        set_cpu_threads(self.device, self.size)
        group.init_groups(0, self.size, self.init_method, self.device)
        return load_model(**load_args, tp=TPShard(0, self.size))

    def make_runner(self, loaded, config, context_length: int):
        """Rank 0's runner; returns once every worker has its KV pool of the same capacity."""
        from furca.runtime.distributed.runner import TPModelRunner

        runner = TPModelRunner(loaded.model, loaded.config, config, context_length, self)
        for conn in self.conns:
            conn.send((runner.capacity, context_length))
        for rank in range(1, self.size):
            self._expect(rank, "ready")
        return runner

    def _expect(self, rank: int, what: str) -> None:
        conn, proc = self.conns[rank - 1], self.procs[rank - 1]
        deadline = time.monotonic() + START_TIMEOUT
        while not conn.poll(0.1):
            if not proc.is_alive():
                raise TensorParallelError(f"tensor-parallel rank {rank} exited with code {proc.exitcode} "
                                          f"before it was {what}")
            if time.monotonic() > deadline:
                raise TensorParallelError(f"tensor-parallel rank {rank} was not {what} after {START_TIMEOUT:.0f} s")
        try:
            msg = conn.recv()
        except EOFError:
            raise TensorParallelError(f"tensor-parallel rank {rank} exited before it was {what}") from None
        if msg[0] == "error":
            raise TensorParallelError(f"tensor-parallel rank {rank} failed to start: {msg[1]}")
        if msg[0] != what:
            raise TensorParallelError(f"tensor-parallel rank {rank} sent {msg!r}, expected {what!r}")

    # -- running -------------------------------------------------------------------------

    def check_alive(self) -> None:
        """Raise the group's `TensorParallelError` if a worker has exited."""
        if self.failure is None:
            for rank, proc in enumerate(self.procs, start=1):
                if not proc.is_alive():
                    self.fail(TensorParallelError(f"tensor-parallel rank {rank} (pid {proc.pid}) exited with "
                                                  f"code {proc.exitcode}"))
                    break
        if self.failure is not None:
            raise self.failure

    def fail(self, error: TensorParallelError) -> TensorParallelError:
        """Record the group's first failure and kill every worker; returns that failure."""
        with self._lock:
            if self.failure is None:
                self.failure = error
                logger.error("%s; stopping every rank", error)
        self._kill()
        return self.failure

    def watch(self, on_failure: Callable[[BaseException], None]) -> None:
        """Call ``on_failure(error)`` (once, from a daemon thread) when a worker exits before `close`."""
        def run() -> None:
            sentinels = [p.sentinel for p in self.procs]
            while not self.closed:
                if multiprocessing.connection.wait(sentinels, timeout=0.5) and not self.closed:
                    try:
                        self.check_alive()
                    except TensorParallelError as e:
                        on_failure(e)
                        return

        threading.Thread(target=run, name="furca-tp-watch", daemon=True).start()

    # -- shutdown ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every worker and leave the process groups; call only when no forward pass runs."""
        if self.closed:
            return
        self.closed = True
        if self.failure is None and all(p.is_alive() for p in self.procs) and torch.distributed.is_initialized():
            try:
                step_wire.send_stop()
            except Exception as e:  # noqa: BLE001 - a worker died meanwhile: it is killed below
                logger.warning("could not tell the tensor-parallel workers to stop: %s", e)
        deadline = time.monotonic() + JOIN_TIMEOUT
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        self._kill()
        group.destroy_groups()
        for conn in self.conns:
            conn.close()

    def _kill(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
        for proc in self.procs:
            proc.join(JOIN_TIMEOUT)
