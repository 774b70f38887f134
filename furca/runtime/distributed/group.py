"""The process groups of a tensor-parallel engine and the collectives its model calls.

Two groups over the same ranks, created by `init_groups`:

- the *model* group (the default group of torch.distributed): gloo on CPU, NCCL on
  CUDA; the model's all-reduces and the logits gather run on it, with
  ``COLLECTIVE_TIMEOUT`` as a backstop (a dead peer is noticed at once: gloo reports the
  closed connection);
- the *control* group: gloo on the host, where rank 0 broadcasts each step's inputs.
  Its timeout is unbounded, because a worker waits on it for the next step for as long
  as the engine idles.

The rendezvous is torch's: ``init_method`` ``tcp://HOST:PORT`` (what `Engine(tp_size=N)`
passes to the processes it spawns) or ``env://`` (torchrun's ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``).
"""

from __future__ import annotations

import datetime
import socket
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from furca.errors import ConfigError

COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=300)
_IDLE_TIMEOUT = datetime.timedelta(days=3650)  # the control group: workers wait for work indefinitely

_control = None  # the control group of this process, once `init_groups` ran


@dataclass
class CollectiveStats:
    """This process's model-group collectives since `init_groups`: how many, and the wall
    time spent inside them (rank 0: its transfer time plus the wait for the slowest rank)."""
    calls: int = 0
    seconds: float = 0.0


stats = CollectiveStats()


def free_init_address(host: str = "127.0.0.1") -> str:
    """A ``tcp://`` rendezvous address on a free port of ``host``."""
    with socket.socket() as s:
        s.bind((host, 0))
        return f"tcp://{host}:{s.getsockname()[1]}"


def torchrun_env() -> tuple[int, int, int, int] | None:
    """``(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE)`` when torchrun started this
    process, else None."""
    import os

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        return (rank, world, int(os.environ.get("LOCAL_RANK", rank)),
                int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    except ValueError:
        raise ConfigError("RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE must be ints") from None


def init_groups(rank: int, size: int, init_method: str, device: torch.device) -> None:
    """Join the rendezvous as ``rank`` of ``size``: the model group (gloo, or NCCL on
    CUDA) and the control group. One tensor-parallel group per process."""
    global _control, stats
    if dist.is_initialized():
        raise ConfigError("this process already belongs to a torch.distributed group: one tensor-parallel "
                          "engine per process")
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL builds this rank's communicator on the current device
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=size,
                            timeout=COLLECTIVE_TIMEOUT)
    _control = dist.new_group(backend="gloo", timeout=_IDLE_TIMEOUT)
    stats = CollectiveStats()


def destroy_groups() -> None:
    global _control
    if dist.is_initialized():
        dist.destroy_process_group()
    _control = None


def broadcast_control(t: torch.Tensor) -> torch.Tensor:
    """Broadcast host tensor ``t`` from rank 0 over the control group (in place)."""
    dist.broadcast(t, 0, group=_control)
    return t


def barrier_control() -> None:
    """Wait until every rank reaches this point (control group)."""
    dist.barrier(group=_control)


def all_reduce(t: torch.Tensor) -> torch.Tensor:
    """Sum ``t`` over the ranks in place; half-precision host tensors are summed in fp32."""
    began = time.perf_counter()
    if t.device.type == "cpu" and t.dtype != torch.float32:
        full = t.float()
        dist.all_reduce(full)
        t.copy_(full)
    else:
        dist.all_reduce(t)
    _count(began)
    return t


def _count(began: float) -> None:
    stats.calls += 1
    stats.seconds += time.perf_counter() - began


def gather_columns(t: torch.Tensor, width: int) -> torch.Tensor | None:
    """Rank 0: every rank's ``t`` (same shape) joined along the last dimension and cut
    to ``width`` columns; the other ranks: None."""
    t = t.contiguous()
    began = time.perf_counter()
    if dist.get_rank() == 0:
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.gather(t, parts, dst=0)
        _count(began)
        return torch.cat(parts, dim=-1)[..., :width]
    dist.gather(t, None, dst=0)
    _count(began)
    return None
