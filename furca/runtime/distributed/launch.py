"""Rank 0's side of a tensor-parallel engine: it spawns the workers, joins the
rendezvous with them, loads its own shard, and watches them until it closes them.

`TensorParallelGroup` is created by `Engine` when ``tp_size > 1``:

- `start`: spawn the node's other ranks (``1 .. N/nnodes - 1``; ``multiprocessing``
  spawn, `worker.worker_main`), wait until each has started, join the process groups,
  load rank 0's shard;
- `make_runner`: rank 0's `TPModelRunner`; its KV capacity goes to every rank over the
  control group, then a barrier: returns once every rank has its pool (a local worker's
  own error message is raised as `TensorParallelError`);
- `watch`: a thread waits on the local workers' process sentinels; when one exits while the
  engine runs, the others are killed (so a collective in flight fails at once) and
  ``on_failure(TensorParallelError)`` is called (the engine's loop then closes);
- `info`: what ``Engine.get_server_info()["tensor_parallel"]`` shows;
- `close`: ``STOP`` to the workers, join them (``JOIN_TIMEOUT``), kill any left, leave
  the groups. Idempotent; after a failure it only kills and leaves.

`run_node` is the whole life of a node other than node 0 (``furca serve --node-rank K``):
it spawns that node's ranks and waits for them. Under torchrun (``RANK`` and
``WORLD_SIZE`` set) nothing is spawned: torchrun started every rank, rank 0 builds the
engine and meets the others at ``env://``, and every other rank runs `run_torchrun_rank`.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import threading
import time
from typing import Any, Callable

import torch

from furca.errors import ConfigError, TensorParallelError, UnsupportedModelError
from furca.runtime.distributed import group, step_wire
from furca.runtime.distributed.sharding import TPShard, check_divisible
from furca.runtime.distributed.worker import rank_device, set_cpu_threads, worker_main

logger = logging.getLogger("furca")

# a worker that dies before it starts is most often a script without a main guard: spawn
# runs the script again in the worker, which then tries to start an engine of its own
_SPAWN_HINT = (" (its error is on stderr; a script that creates Engine(tp_size > 1) must do so under "
               "`if __name__ == \"__main__\":`, since each rank's process imports the script again)")
START_TIMEOUT = 600.0  # seconds a worker may take to start, load its shard and size its pool
JOIN_TIMEOUT = 10.0  # seconds a worker gets to exit after STOP before it is killed


class TensorParallelGroup:
    def __init__(self, size: int, device: str, *, nnodes: int = 1, node_rank: int = 0,
                 dist_init_addr: str | None = None):
        if not isinstance(size, int) or size < 2:
            raise ConfigError(f"a tensor-parallel group needs tp_size >= 2, got {size!r}")
        self.size = size
        self.per_node = size // nnodes
        self.first_rank = node_rank * self.per_node  # ranks first_rank .. + per_node run on this node
        self.device = rank_device(device, 0)
        self.init_method = f"tcp://{dist_init_addr}" if dist_init_addr else group.free_init_address()
        env = group.torchrun_env()
        self.torchrun = env is not None  # torchrun started every rank: spawn none, meet at env://
        if env is not None:
            if env[1] != size:
                raise ConfigError(f"torchrun started {env[1]} processes (WORLD_SIZE) for tp_size={size}")
            self.per_node, self.first_rank, self.init_method = env[3], env[0] - env[2], "env://"
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self.ranks: list[int] = []  # the rank of each spawned process
        self.failure: TensorParallelError | None = None
        self.serving = False  # every rank has its pool and waits for steps (make_runner returned)
        self.closed = False
        self._lock = threading.Lock()

    # -- start-up ----------------------------------------------------------------------

    def spawn(self, model_path, load_args: dict, config) -> dict:
        """Start this node's worker processes (every rank of the node but rank 0); returns
        the load arguments every rank uses."""
        from furca.runtime.pull import resolve_model_path

        path = resolve_model_path(model_path)  # pulled once here, not by every rank
        if (path / "config.json").is_file():  # a model that does not split fails before any process starts
            from furca.runtime.loader.hf import read_json
            from furca.runtime.model_config import ModelConfig

            check_divisible(ModelConfig.from_hf_dict(read_json(path / "config.json")), self.size)
        load_args = {**load_args, "path": path, "device": str(rank_device(str(self.device), 0))}
        ctx = multiprocessing.get_context("spawn")
        for rank in range(max(self.first_rank, 1), self.first_rank + self.per_node * (not self.torchrun)):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker_main, name=f"furca-tp-rank{rank}", daemon=True,
                               args=(rank, self.size, self.init_method, load_args, config, child,
                                     rank - self.first_rank, self.per_node))
            proc.start()
            child.close()
            self.procs.append(proc)
            self.conns.append(parent)
            self.ranks.append(rank)
        return load_args

    def start(self, model_path, load_args: dict, config) -> Any:
        """Rank 0: spawn this node's workers, meet every rank, load rank 0's shard; returns
        rank 0's `LoadedModel`."""
        from furca.runtime.loader import load_model

        if load_args["quantization"] not in ("auto", "none"):  # before any process starts
            raise UnsupportedModelError(f"tensor parallelism runs float weights; quantization="
                                        f"{load_args['quantization']!r} is not supported with tp_size > 1")
        load_args = self.spawn(model_path, load_args, config)
        for i in range(len(self.procs)):
            self._expect(i, "started")
        set_cpu_threads(self.device, self.per_node)
        group.init_groups(0, self.size, self.init_method, self.device)
        return load_model(**load_args, tp=TPShard(0, self.size))

    def make_runner(self, loaded, config, context_length: int):
        """Rank 0's runner; returns once every rank has its KV pool of the same capacity
        (sent over the control group, so ranks on other nodes get it too)."""
        from furca.runtime.distributed.runner import TPModelRunner

        runner = TPModelRunner(loaded.model, loaded.config, config, context_length, self)
        try:
            group.broadcast_control(torch.tensor([runner.capacity, context_length], dtype=torch.int64))
            group.barrier_control()
        except Exception as e:  # a rank failed to load: its own message says why, when it is local
            raise self._start_error(e) from e
        self.serving = True
        return runner

    def _start_error(self, cause: Exception) -> TensorParallelError:
        """The error of a start-up that failed with ``cause``: the first local worker's own
        message (each sends one over its pipe before it exits), else ``cause``."""
        deadline = time.monotonic() + 5.0
        for rank, conn in zip(self.ranks, self.conns):
            try:
                if conn.poll(max(0.0, deadline - time.monotonic())):
                    msg = conn.recv()
                    if msg[0] == "error":
                        return TensorParallelError(f"tensor-parallel rank {rank} failed to start: {msg[1]}")
            except (EOFError, OSError):
                continue
        return TensorParallelError(f"a tensor-parallel rank failed to start: {type(cause).__name__}: {cause}")

    def _expect(self, i: int, what: str) -> None:
        conn, proc, rank = self.conns[i], self.procs[i], self.ranks[i]
        deadline = time.monotonic() + START_TIMEOUT
        while not conn.poll(0.1):
            if not proc.is_alive():
                raise TensorParallelError(f"tensor-parallel rank {rank} exited with code {proc.exitcode} "
                                          f"before it was {what}{_SPAWN_HINT}")
            if time.monotonic() > deadline:
                raise TensorParallelError(f"tensor-parallel rank {rank} was not {what} after {START_TIMEOUT:.0f} s")
        try:
            msg = conn.recv()
        except EOFError:
            raise TensorParallelError(f"tensor-parallel rank {rank} exited before it was {what}{_SPAWN_HINT}") from None
        if msg[0] == "error":
            raise TensorParallelError(f"tensor-parallel rank {rank} failed to start: {msg[1]}")
        if msg[0] != what:
            raise TensorParallelError(f"tensor-parallel rank {rank} sent {msg!r}, expected {what!r}")

    # -- running -------------------------------------------------------------------------

    def check_alive(self, wait: float = 0.0) -> None:
        """Raise the group's `TensorParallelError` if a worker has exited (waiting up to
        ``wait`` seconds for one to: a failed collective is seen before the exit)."""
        deadline = time.monotonic() + wait
        while self.failure is None:
            for rank, proc in zip(self.ranks, self.procs):
                if not proc.is_alive():
                    self.fail(TensorParallelError(f"tensor-parallel rank {rank} (pid {proc.pid}) exited with "
                                                  f"code {proc.exitcode}"))
                    break
            if self.failure is not None or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
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
        if not self.procs:  # every worker runs on other nodes: their failures surface in the collectives
            return

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

    def info(self) -> dict[str, Any]:
        """The group as ``get_server_info`` reports it: ranks, workers alive, and rank 0's
        model-group collectives (count, seconds inside them)."""
        return {"tp_size": self.size,
                "workers_alive": sum(p.is_alive() for p in self.procs) if self.procs else None,  # spawned here
                "collectives": group.stats.calls,
                "collective_seconds": round(group.stats.seconds, 6)}

    # -- shutdown ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every worker and leave the process groups; call only when no forward pass runs."""
        if self.closed:
            return
        self.closed = True
        if self.serving and self.failure is None and all(p.is_alive() for p in self.procs):
            try:
                step_wire.send_stop()
                deadline = time.monotonic() + JOIN_TIMEOUT
                for proc in self.procs:
                    proc.join(max(0.0, deadline - time.monotonic()))
            except Exception as e:  # noqa: BLE001 - a worker died meanwhile: it is killed below
                logger.warning("could not tell the tensor-parallel workers to stop: %s", e)
        self._kill()  # the rest (a failed start-up leaves workers waiting on a collective)
        group.destroy_groups()
        for conn in self.conns:
            conn.close()

    def _kill(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
        for proc in self.procs:
            proc.join(JOIN_TIMEOUT)


def run_node(model_path, config) -> int:
    """``furca serve --nnodes M --node-rank K`` with K > 0: start this node's ranks and
    wait for them (they exit on rank 0's ``STOP``, or when a collective fails); SIGTERM
    kills them. Returns 0 when every rank exited cleanly, else 1."""
    import signal

    from furca.runtime.engine import _resolve_device, resolve_dtypes

    device = _resolve_device(config.device)
    dtype, linear_dtype = resolve_dtypes(config.dtype, config.linear_dtype, device)
    tp = TensorParallelGroup(config.tp_size, device, nnodes=config.nnodes, node_rank=config.node_rank,
                             dist_init_addr=config.dist_init_addr)
    tp.spawn(model_path, dict(dtype=dtype, linear_dtype=linear_dtype, quantization=config.quantization,
                              quantization_group_size=config.quantization_group_size), config)
    logger.info("node %d: ranks %s started, meeting rank 0 at %s", config.node_rank, tp.ranks, tp.init_method)
    signal.signal(signal.SIGTERM, lambda *_: [p.kill() for p in tp.procs if p.is_alive()])
    for proc in tp.procs:
        proc.join()
    failed = [(rank, p.exitcode) for rank, p in zip(tp.ranks, tp.procs) if p.exitcode != 0]
    for rank, conn in zip(tp.ranks, tp.conns):
        while conn.poll(0):
            try:
                msg = conn.recv()
            except EOFError:
                break
            if msg[0] == "error":
                logger.error("tensor-parallel rank %d failed: %s", rank, msg[1])
    if failed:
        logger.error("node %d: ranks exited with errors: %s", config.node_rank,
                     ", ".join(f"rank {r} (code {c})" for r, c in failed))
    return 1 if failed else 0


def run_torchrun_rank(model_path, config) -> int:
    """A process torchrun started with ``RANK`` > 0: run that rank in this process until
    rank 0 stops it (exit status 0) or a collective fails (1)."""
    from furca.runtime.engine import _resolve_device, resolve_dtypes
    from furca.runtime.pull import resolve_model_path

    rank, world, local_rank, per_node = group.torchrun_env()
    if world != config.tp_size:
        raise ConfigError(f"torchrun started {world} processes (WORLD_SIZE) for tp_size={config.tp_size}")
    device = _resolve_device(config.device)
    dtype, linear_dtype = resolve_dtypes(config.dtype, config.linear_dtype, device)
    load_args = dict(path=resolve_model_path(model_path), device=device, dtype=dtype, linear_dtype=linear_dtype,
                     quantization=config.quantization, quantization_group_size=config.quantization_group_size)
    return worker_main(rank, world, "env://", load_args, config, None, local_rank, per_node)
