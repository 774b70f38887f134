"""One rank's part of a Llama-family model and the collectives that join the parts.

`TensorParallelLlama` is `LlamaForCausalLM` built on `sharding.local_config` (its
heads, KV heads, MLP channels and vocabulary divided by the number of ranks) and loaded
from `sharding.shard_weights`. What makes the parts one model:

- q/k/v and gate/up are column-parallel: each rank computes its own heads and channels,
  no communication;
- o_proj and down_proj are row-parallel: each rank's product is a partial sum of the
  full one, and a forward hook all-reduces it (so the residual stream is replicated);
- the embedding is vocab-parallel: each rank looks up the ids in its row range, zeros
  the others, and the all-reduce assembles the rows;
- the LM head is vocab-parallel: each rank scores its vocabulary range; rank 0 gathers
  the ranges into the full fp32 logits, the other ranks return None.

Every rank must run the same forward passes in the same order (rank 0's scheduler
decides them and `step_wire` carries them to the workers).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from furca.errors import UnsupportedModelError
from furca.runtime.distributed import group
from furca.runtime.distributed.sharding import TPShard, local_config, shard_weights, vocab_range
from furca.runtime.model_config import ModelConfig
from furca.runtime.models.llama import LlamaForCausalLM, linear


def _reduce_output(_module, _inputs, output):
    return group.all_reduce(output)


class TensorParallelLlama(LlamaForCausalLM):
    """``forward(input_ids, positions, batch)``: fp32 logits on rank 0, None elsewhere.
    ``self.config`` is the rank's local config; ``full_config`` the checkpoint's."""

    def __init__(self, config: ModelConfig, shard: TPShard, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", linear_dtype: torch.dtype | None = None, quant=None):
        if quant is not None and quant.active:
            what = f"quantization={quant.method!r}" if quant.method != "none" else "a quantized file kept as is"
            raise UnsupportedModelError(f"tensor parallelism runs float weights; {what} is not supported with "
                                        "tp_size > 1 (quantization='none' dequantizes a quantized file)")
        super().__init__(local_config(config, shard.size), dtype=dtype, device=device, linear_dtype=linear_dtype)
        self.full_config = config
        self.shard = shard
        self.vocab_lo, self.vocab_hi = vocab_range(config.vocab_size, shard)
        for layer in self.model.layers:
            layer.self_attn.o_proj.register_forward_hook(_reduce_output)
            layer.mlp.down_proj.register_forward_hook(_reduce_output)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        outside = (input_ids < self.vocab_lo) | (input_ids >= self.vocab_hi)
        local = (input_ids - self.vocab_lo).masked_fill_(outside, 0)
        h = F.embedding(local, self.model.embed_tokens.weight)
        h.masked_fill_(outside.unsqueeze(-1), 0)
        return group.all_reduce(h)

    def head(self, h: torch.Tensor) -> torch.Tensor | None:
        head = self.model.embed_tokens if self.lm_head is None else self.lm_head
        return group.gather_columns(linear(h, head.weight).float(), self.full_config.vocab_size)

    def load_weights(self, weights) -> None:
        super().load_weights(shard_weights(weights, self.full_config, self.shard))


def build_sharded(config: ModelConfig, weights, dtypes, plan, device, shard: TPShard) -> TensorParallelLlama:
    """The loader's ``_build`` for one rank: the rank's model, filled from the full tensors."""
    dtype, linear_dtype = dtypes
    model = TensorParallelLlama(config, shard, dtype=dtype, device=device, linear_dtype=linear_dtype, quant=plan)
    model.load_weights(weights)
    return model.eval()
