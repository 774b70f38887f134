"""`TPModelRunner`: rank 0's `ModelRunner` under tensor parallelism.

The scheduler sees the same seam as with one process (a `StepInputs` in, fp32 logits
out). Before each forward pass the runner checks the workers are alive and broadcasts
the step (`step_wire`); the pass itself runs rank 0's shard, whose collectives meet the
workers' (`model.TensorParallelLlama`). Any exception inside a step leaves the ranks out
of step with each other, so it becomes a `TensorParallelError` (fatal to the scheduler,
see `isolation.is_fatal`) and the workers are killed.

Sizes: the KV pool holds this rank's KV heads only (``model.config``, the local
config); ``vocab_size`` and ``model_config`` are the full model's.
"""

from __future__ import annotations

from furca.errors import TensorParallelError
from furca.runtime.distributed import step_wire
from furca.runtime.model_runner import ModelRunner


class TPModelRunner(ModelRunner):
    def __init__(self, model, model_config, config, context_length: int, tp_group):
        super().__init__(model, model.config, config, context_length)
        self.model_config = model_config
        self.vocab_size = int(model_config.vocab_size)
        self.tp_group = tp_group
        self.tp_size = tp_group.size

    def forward(self, step):
        self.tp_group.check_alive()
        try:
            step_wire.send_step(step.input_ids, step.positions, step.batch)
            return super().forward(step)
        except Exception as e:  # noqa: BLE001 - every rank must stop: they are out of step
            try:
                self.tp_group.check_alive(wait=1.0)  # a dead rank, if that is the cause, is the clearer error
            except TensorParallelError as dead:
                raise dead from e
            error = e if isinstance(e, TensorParallelError) else TensorParallelError(
                f"a tensor-parallel forward pass failed: {type(e).__name__}: {e}")
            raise self.tp_group.fail(error) from e
