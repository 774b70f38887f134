"""Tensor parallelism over torch.distributed (``Engine(tp_size=N)``, ``furca serve --tp N``).

N processes, one per rank, each holding 1/N of every layer; rank 0 is the engine's own
process, whose scheduler decides every step. Modules:

- ``group``: the process groups (gloo on CPU, NCCL on CUDA; a gloo control group) and
  the collectives;
- ``sharding``: which part of each checkpoint tensor a rank holds (``TPShard``);
- ``model``: one rank's model (``TensorParallelLlama``: row-parallel all-reduces,
  vocab-parallel embedding and LM head);
- ``step_wire``: what rank 0 broadcasts each step;
- ``runner``: rank 0's ``TPModelRunner`` (the scheduler's seam, unchanged);
- ``launch``: spawning, start-up handshake, liveness watch and shutdown of the workers;
- ``worker``: the workers' process.

See docs/scale.md.
"""

from furca.runtime.distributed.sharding import TPShard

__all__ = ["TPShard"]
