"""The process of tensor-parallel rank ``1 .. N-1``: its shard of the model, its own KV
pool, and a loop that runs every forward pass rank 0 broadcasts.

Start-up: the worker sends ``("started",)`` over its pipe (``conn``, to the process that
spawned it) before the rendezvous, loads its shard, receives ``(capacity,
context_length)`` from rank 0 over the control group (rank 0's KV pool size, so slot
numbers agree), builds its pool and meets the other ranks at a barrier; if anything
fails it sends ``("error", text)`` over the pipe and exits 1. After that only the
control group carries work (`step_wire`). The worker exits on ``STOP``, when a
collective fails (exit 1), and when its parent process is gone (a daemon thread waits
on the parent's sentinel), so no rank outlives the engine. Under torchrun there is no
pipe and no parent to watch: rank 0's collectives are the only link.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from dataclasses import replace

import torch

logger = logging.getLogger("furca")


def _exit_with_parent() -> None:
    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is None:  # launched by torchrun: nothing to watch
        return

    def watch() -> None:
        parent.join()
        os._exit(1)

    threading.Thread(target=watch, name="furca-tp-parent-watch", daemon=True).start()


def rank_device(device: str, local_rank: int) -> torch.device:
    """Rank ``local_rank``'s device on its node: the next GPU after ``device``'s on CUDA."""
    base = torch.device(device)
    if base.type == "cuda":
        return torch.device("cuda", (base.index or 0) + local_rank)
    return base


def set_cpu_threads(device: torch.device, ranks_per_node: int) -> None:
    """Share the host's cores between the ranks of one node (CPU devices only)."""
    if device.type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks_per_node))


def worker_main(rank: int, size: int, init_method: str, load_args: dict, config, conn,
                local_rank: int | None = None, ranks_per_node: int | None = None) -> int:
    """Entry point of a spawned worker (``multiprocessing`` spawn; ``conn`` None under
    torchrun, which has no parent to report to). Returns 0 after ``STOP``."""
    from furca.runtime.distributed import group
    from furca.runtime.distributed.sharding import TPShard
    from furca.runtime.loader import load_model
    from furca.runtime.model_runner import ModelRunner

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # rank 0 decides when the workers stop
    if conn is None:  # torchrun's SIGTERM reaches every rank: rank 0 drains, then sends STOP
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _exit_with_parent()
    local_rank = rank if local_rank is None else local_rank
    try:
        device = rank_device(load_args["device"], local_rank)
        set_cpu_threads(device, ranks_per_node or size)
        if conn is not None:
            conn.send(("started",))
        group.init_groups(rank, size, init_method, device)
        loaded = load_model(**{**load_args, "device": device}, tp=TPShard(rank, size))
        capacity, context_length = group.broadcast_control(torch.zeros(2, dtype=torch.int64)).tolist()
        runner = ModelRunner(loaded.model, loaded.model.config,
                             replace(config, max_total_tokens=capacity, log_capacity=False), context_length)
        group.barrier_control()
    except BaseException as e:  # noqa: BLE001 - rank 0 reports it
        try:
            logger.error("tensor-parallel rank %d failed to start: %s: %s", rank, type(e).__name__, e)
            if conn is not None:
                conn.send(("error", f"{type(e).__name__}: {e}"))
        finally:
            os._exit(1)
    try:
        serve(runner)
    except BaseException:  # noqa: BLE001 - a failed collective: rank 0 sees the closed connection
        logger.exception("tensor-parallel rank %d failed", rank)
        os._exit(1)
    group.destroy_groups()
    return 0


def serve(runner) -> None:
    """Run each broadcast step on this rank's shard until ``STOP``."""
    from furca.runtime.batch_builder import StepInputs
    from furca.runtime.distributed import step_wire

    while True:
        step = step_wire.receive()
        if step is None:
            return
        batch = step.batch(runner.kv_cache, runner.attn_backend, runner.device)
        runner.forward(StepInputs(items=[], input_ids=step.input_ids.to(runner.device),
                                  positions=step.positions.to(runner.device), batch=batch))
