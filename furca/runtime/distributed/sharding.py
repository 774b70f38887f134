"""Which part of each checkpoint tensor a tensor-parallel rank holds.

``TPShard(rank, size)`` names a rank. ``local_config`` is the `ModelConfig` of one rank's
model (attention heads, KV heads, MLP width and vocabulary divided by ``size``);
``shard_weights`` cuts the HF-named full tensors of a checkpoint down to that rank's
part, so the unchanged ``load_weights`` fills the smaller model:

========================  ===========================  =================================
tensor                    split                        why
========================  ===========================  =================================
q_proj, k_proj, v_proj    rows (output heads)          column-parallel: each rank owns
gate_proj, up_proj        rows (MLP channels)          whole heads / channels
o_proj, down_proj         columns (input)              row-parallel: partial sums, then
                                                       an all-reduce (bias on rank 0)
embed_tokens, lm_head     rows (vocabulary)            vocab-parallel, padded to
                                                       ``ceil(vocab / size)`` rows
norms (incl. q/k norms)   replicated
========================  ===========================  =================================

KV heads: with ``num_key_value_heads >= size`` each rank gets
``num_key_value_heads / size`` of them; with fewer, each rank holds one KV head,
replicated over the ``size / num_key_value_heads`` ranks whose query heads use it (query
head ``h`` reads KV head ``h // (heads / kv_heads)``, so rank ``r`` needs KV head
``r // (size / kv_heads)``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Iterator

import torch

from furca.errors import ConfigError, UnsupportedModelError
from furca.runtime.model_config import ModelConfig

_COLUMN_Q = ("q_proj",)
_COLUMN_KV = ("k_proj", "v_proj")
_COLUMN_MLP = ("gate_proj", "up_proj")
_ROW = ("o_proj", "down_proj")
_VOCAB = ("model.embed_tokens.weight", "lm_head.weight")


@dataclass(frozen=True)
class TPShard:
    rank: int
    size: int

    def __post_init__(self) -> None:
        for name in ("rank", "size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"tensor-parallel {name} must be an int >= 0, got {value!r}")
        if not 0 <= self.rank < self.size:
            raise ConfigError(f"tensor-parallel rank {self.rank} is not in [0, {self.size})")


def check_divisible(config: ModelConfig, size: int) -> None:
    """``UnsupportedModelError`` unless the model's heads and MLP split evenly over ``size`` ranks."""
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    problems = []
    if heads % size:
        problems.append(f"num_attention_heads {heads}")
    if (kv >= size and kv % size) or (kv < size and size % kv):
        problems.append(f"num_key_value_heads {kv} (must divide by, or divide, tp_size)")
    if config.intermediate_size % size:
        problems.append(f"intermediate_size {config.intermediate_size}")
    if problems:
        raise UnsupportedModelError(f"tp_size={size} does not split this model: {', '.join(problems)} "
                                    f"not divisible by {size}")


def vocab_shard_rows(vocab_size: int, size: int) -> int:
    return -(-vocab_size // size)


def vocab_range(vocab_size: int, shard: TPShard) -> tuple[int, int]:
    """The token ids ``[lo, hi)`` rank ``shard.rank`` holds (the last rank's may be short)."""
    rows = vocab_shard_rows(vocab_size, shard.size)
    lo = min(shard.rank * rows, vocab_size)
    return lo, min(lo + rows, vocab_size)


def local_kv_heads(config: ModelConfig, size: int) -> int:
    return max(config.num_key_value_heads // size, 1)


def kv_head_range(config: ModelConfig, shard: TPShard) -> tuple[int, int]:
    kv = config.num_key_value_heads
    if kv >= shard.size:
        n = kv // shard.size
        return shard.rank * n, (shard.rank + 1) * n
    head = shard.rank // (shard.size // kv)
    return head, head + 1


def local_config(config: ModelConfig, size: int) -> ModelConfig:
    """The config of one rank's model (same for every rank)."""
    check_divisible(config, size)
    return replace(config, num_attention_heads=config.num_attention_heads // size,
                   num_key_value_heads=local_kv_heads(config, size),
                   intermediate_size=config.intermediate_size // size,
                   vocab_size=vocab_shard_rows(config.vocab_size, size))


def _rows(t: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    return t[lo:hi].contiguous()


def shard_tensor(name: str, tensor: torch.Tensor, config: ModelConfig, shard: TPShard) -> torch.Tensor:
    """Rank ``shard.rank``'s part of the full checkpoint tensor ``name`` (see the module's table)."""
    size, rank = shard.size, shard.rank
    parts = name.split(".")
    module = parts[-2] if len(parts) >= 2 else ""
    leaf = parts[-1]
    d = config.head_dim
    if module in _COLUMN_Q:
        n = config.num_attention_heads // size
        return _rows(tensor, rank * n * d, (rank + 1) * n * d)
    if module in _COLUMN_KV:
        lo, hi = kv_head_range(config, shard)
        return _rows(tensor, lo * d, hi * d)
    if module in _COLUMN_MLP:
        n = config.intermediate_size // size
        return _rows(tensor, rank * n, (rank + 1) * n)
    if module in _ROW:
        if leaf == "bias":  # added once: rank 0 holds it, the others add zeros
            return tensor.clone() if rank == 0 else torch.zeros_like(tensor)
        n = tensor.shape[1] // size
        return tensor[:, rank * n:(rank + 1) * n].contiguous()
    if name in _VOCAB:
        lo, hi = vocab_range(config.vocab_size, shard)
        rows = vocab_shard_rows(config.vocab_size, size)
        out = tensor.new_zeros((rows, *tensor.shape[1:]))
        out[:hi - lo] = tensor[lo:hi]
        return out
    return tensor


def shard_weights(weights: Iterable[tuple[str, object]], config: ModelConfig,
                  shard: TPShard) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, rank's part)`` for each ``(name, full tensor)``. Quantized tensors are
    refused: tensor parallelism runs float weights."""
    for name, tensor in weights:
        if not isinstance(tensor, torch.Tensor):
            raise UnsupportedModelError(
                f"tensor parallelism needs float weights, but {name!r} arrives quantized "
                f"({type(tensor).__name__}); load with quantization='none' to dequantize it")
        yield name, shard_tensor(name, tensor, config, shard)
