"""The Llama family in one implementation: Llama 2/3 (and SmolLM2), Mistral, Qwen2
(q/k/v bias) and Qwen3 (per-head q/k RMSNorm). Grouped-query attention throughout.

Flattened layout: every tensor has one row per new token of the batch (``T`` rows,
see ``ForwardBatch``); attention is the backend's business.

Two dtypes: ``dtype`` for activations, norms, embeddings and the LM head, and
``linear_dtype`` (default: the same) for the decoder layers' linear projections, whose
weights are stored in it and whose products are computed in it (inputs cast to it,
outputs cast back); the KV cache is the runner's (by default in ``linear_dtype``). bf16
projections in an fp32 model halve the bytes a decode step reads and run on a CPU's
bf16 dot-product units (``docs/runtime.md``, "CPU: bf16 linears and one OpenMP pool").
The head stays in ``dtype``: bf16 logits are rounded to steps of 1/8 at
magnitudes 16-32, which turned a greedy margin of 0.08 into a tie. Parameters are created
uninitialised and filled by ``load_weights`` from HF-named checkpoint tensors; q/k/v
and gate/up are fused at load time (``qkv_proj``, ``gate_up_proj``).

On CPU, an fp32 model's residual adds, RMSNorms and SiLU are numba glue (``cpu_glue``:
one call each instead of a dozen dispatched torch ops, and no casts around the
projections: the glue writes their dtype); each layer returns ``(delta, residual)`` and
the next norm adds them. ``glue_dtype`` is None where the torch ops run instead. A
small decode batch of a quantized fp32 model runs all its layers as one compiled call
on torch's OpenMP team instead (``cpu_step``; which models, in its docstring).

Quantized weights (``quant``, a ``furca.runtime.quant.QuantPlan``): the projections are
``QuantLinear`` modules computing from packed weights, filled shard by shard from
``QuantGroups`` (a file's own codes) or float tensors the plan quantizes; an embedding
that arrives quantized (a GGUF file's Q8_0 ``token_embd``) becomes a ``QuantTable``,
which is the tied LM head too (its logits fp32). See docs/quantization.md.
"""

from __future__ import annotations

from typing import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from furca.errors import ModelLoadError
from furca.runtime import batch_invariant
from furca.runtime.forward_batch import ForwardBatch
from furca.runtime.model_config import ModelConfig
from furca.runtime.models import cpu_glue, cpu_step
from furca.runtime.models.rope import RotaryEmbedding, apply_rope
from furca.runtime.quant.groups import QuantGroups
from furca.runtime.quant.linear import QuantLinear, QuantPlan, QuantTable, float_weight

# checkpoint shard -> (fused parameter, index of the shard inside it)
_STACKED = {
    "q_proj": ("qkv_proj", 0),
    "k_proj": ("qkv_proj", 1),
    "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
}
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
# tables a quantized checkpoint may keep quantized (QuantTable): the embedding (also the tied head), the head
_TABLES = {"model.embed_tokens.weight": "embed", "lm_head.weight": "head"}


def _param(*shape: int, dtype: torch.dtype, device: torch.device | str) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape, dtype=dtype, device=device), requires_grad=False)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, dtype: torch.dtype, device):
        super().__init__()
        self.weight = _param(dim, dtype=dtype, device=device)
        self.eps = eps
        self._weight_array: tuple[int, object] | None = None  # (data_ptr, numpy view) for cpu_glue

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # fp32 statistics, cast back before the weight, exactly as HF does
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)

    def add_forward(self, delta: torch.Tensor, residual: torch.Tensor | None,
                    glue_dtype: torch.dtype | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``residual + delta`` (``delta`` alone when ``residual`` is None) and its norm.
        ``glue_dtype``: one ``cpu_glue`` call, the residual updated in place and the norm
        returned in that dtype (the next projection's)."""
        if glue_dtype is not None:
            if self._weight_array is None or self._weight_array[0] != self.weight.data_ptr():
                self._weight_array = (self.weight.data_ptr(), self.weight.detach().numpy())
            if residual is None:
                residual, delta = delta.contiguous(), None
            return cpu_glue.add_rms_norm(delta, residual, self._weight_array[1], self.eps, glue_dtype), residual
        residual = delta if residual is None else residual + delta
        return self.forward(residual), residual


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` in the weight's dtype, returned in ``x``'s (batch-invariant tiles
    inside ``batch_invariant.mode(True)``: deterministic engines)."""
    if batch_invariant.enabled():
        return batch_invariant.linear(x, weight, bias)
    if x.dtype == weight.dtype:
        return F.linear(x, weight, bias)
    return F.linear(x.to(weight.dtype), weight, bias).to(x.dtype)


class Linear(nn.Module):
    """A bias-optional linear layer without initialisation (weights come from disk)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype, device):
        super().__init__()
        self.weight = _param(out_features, in_features, dtype=dtype, device=device)
        self.bias = _param(out_features, dtype=dtype, device=device) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


def projection(in_features: int, shard_sizes: tuple[int, ...], bias: bool, linear_dtype, device,
               quant: QuantPlan | None, dtype) -> nn.Module:
    """A (possibly fused) projection: ``Linear``, or ``QuantLinear`` under an active plan."""
    if quant is not None and quant.active:
        return QuantLinear(in_features, shard_sizes, bias, quant, linear_dtype, dtype, device)
    return Linear(in_features, sum(shard_sizes), bias, linear_dtype, device)


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_id: int, rope: RotaryEmbedding, dtype, linear_dtype, device,
                 quant: QuantPlan | None = None):
        super().__init__()
        self.layer_id = layer_id
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.scaling = self.head_dim ** -0.5
        self.shard_sizes = (self.q_size, self.kv_size, self.kv_size)
        self.qkv_proj = projection(config.hidden_size, self.shard_sizes, config.attention_bias, linear_dtype,
                                   device, quant, dtype)
        self.o_proj = projection(self.q_size, (config.hidden_size,), config.o_proj_bias, linear_dtype, device,
                                 quant, dtype)
        if config.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps, dtype, device)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps, dtype, device)
        else:
            self.q_norm = self.k_norm = None
        self.rope = [rope]  # a list, so the shared module is not registered once per layer

    def forward(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor],
                batch: ForwardBatch, glue_dtype: torch.dtype | None = None) -> torch.Tensor:
        num_tokens = x.shape[0]
        kv_stored = False
        if glue_dtype is not None and self.q_norm is None:  # one glue call: split, rotate, k/v stored in the pool
            cache = batch.kv_cache
            kv_stored = cache.dtype in cpu_glue.DTYPES and cache.device.type == "cpu"
            store = (*cache.arrays(self.layer_id), batch.out_cache_loc) if kv_stored else None
            q, k, v = cpu_glue.rope_qkv(self.qkv_proj(x), *cos_sin, self.num_heads, self.num_kv_heads,
                                        cache.dtype if kv_stored else torch.float32, store)
        else:
            q, k, v = self._rotated_qkv(self.qkv_proj(x).to(cos_sin[0].dtype), num_tokens, cos_sin)
        out = batch.attn_backend.forward(q, k, v, self.layer_id, batch, self.scaling, kv_stored=kv_stored)
        return self.o_proj(out.reshape(num_tokens, self.q_size).to(x.dtype))  # in x's dtype, as qkv_proj

    def _rotated_qkv(self, qkv: torch.Tensor, num_tokens: int, cos_sin: tuple[torch.Tensor, torch.Tensor]):
        """q (T, H, D), k, v (T, KV, D) from the projection's rows, q and k normed (Qwen3) and rotated."""
        num_qk_heads = self.num_heads + self.num_kv_heads
        qkv = qkv.view(num_tokens, num_qk_heads + self.num_kv_heads, self.head_dim)
        qk, v = qkv[:, :num_qk_heads], qkv[:, num_qk_heads:]  # (T, H + KV, D), (T, KV, D)
        if self.q_norm is not None:
            qk = torch.cat((self.q_norm(qk[:, :self.num_heads]), self.k_norm(qk[:, self.num_heads:])), dim=1)
        qk = apply_rope(qk, *cos_sin)  # q and k heads rotated together: one pass
        return qk[:, :self.num_heads], qk[:, self.num_heads:], v


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig, linear_dtype, device, quant: QuantPlan | None = None, dtype=None):
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.shard_sizes = (config.intermediate_size, config.intermediate_size)
        self.gate_up_proj = projection(config.hidden_size, self.shard_sizes, config.mlp_bias, linear_dtype, device,
                                       quant, dtype or linear_dtype)
        self.down_proj = projection(config.intermediate_size, (config.hidden_size,), config.mlp_bias, linear_dtype,
                                    device, quant, dtype or linear_dtype)

    def forward(self, x: torch.Tensor, glue_dtype: torch.dtype | None = None) -> torch.Tensor:
        if glue_dtype is not None:
            return self.down_proj(cpu_glue.silu_mul(self.gate_up_proj(x), glue_dtype))
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer_id: int, rope: RotaryEmbedding, dtype, linear_dtype, device,
                 quant: QuantPlan | None = None):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype, device)
        self.self_attn = LlamaAttention(config, layer_id, rope, dtype, linear_dtype, device, quant)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype, device)
        self.mlp = LlamaMLP(config, linear_dtype, device, quant, dtype)

    def forward(self, h: torch.Tensor, residual: torch.Tensor | None, cos_sin: tuple[torch.Tensor, torch.Tensor],
                batch: ForwardBatch, glue_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(delta, residual)``: this layer's input is ``residual + h`` (``h`` alone for
        the first layer), its output ``residual' + delta``; the sum is taken by the next
        norm (one glue call with ``glue_dtype``, see ``cpu_glue``)."""
        x, residual = self.input_layernorm.add_forward(h, residual, glue_dtype)
        h = self.self_attn(x, cos_sin, batch, glue_dtype)
        x, residual = self.post_attention_layernorm.add_forward(h, residual, glue_dtype)
        return self.mlp(x, glue_dtype), residual


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig, rope: RotaryEmbedding, dtype, linear_dtype, device,
                 quant: QuantPlan | None = None):
        super().__init__()
        self.embed_tokens = nn.Module()
        self.embed_tokens.weight = _param(config.vocab_size, config.hidden_size, dtype=dtype, device=device)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(config, i, rope, dtype, linear_dtype, device, quant)
            for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype, device)


class LlamaForCausalLM(nn.Module):
    """``forward(input_ids (T,), positions (T,), batch) -> fp32 logits (N, vocab)`` for the
    ``N = len(batch.logits_indices)`` selected rows. Inference only (no autograd).

    ``dtype``: activations, norms, embeddings, LM head; ``linear_dtype`` (None =
    ``dtype``): the decoder layers' linear projections; ``quant``: what is quantized
    (None: nothing)."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", linear_dtype: torch.dtype | None = None,
                 quant: QuantPlan | None = None):
        super().__init__()
        self.config = config
        self.dtype = dtype
        self.device = device
        self.quant = quant if quant is not None and quant.active else None
        self.linear_dtype = linear_dtype = linear_dtype or dtype
        self.rotary_emb = RotaryEmbedding(config.head_dim, config.rope_theta, config.rope_scaling,
                                          min(config.max_position_embeddings, 4096), device)
        self.model = LlamaModel(config, self.rotary_emb, dtype, linear_dtype, device, self.quant)
        # the projections' input dtype where numba glue joins them (fp32 CPU models), else None
        self.glue_dtype = (linear_dtype if torch.device(device).type == "cpu" and dtype == torch.float32
                           and linear_dtype in cpu_glue.DTYPES and cpu_glue.available() else None)
        self.cpu_step = None  # cpu_step.CpuStep: a small decode batch's layers in one compiled call (set at load)
        if config.tie_word_embeddings:
            self.lm_head = None
        else:
            self.lm_head = nn.Module()
            self.lm_head.weight = _param(config.vocab_size, config.hidden_size, dtype=dtype, device=device)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        table = self.model.embed_tokens
        if isinstance(table, QuantTable):
            return table.embedding(input_ids).to(self.dtype)
        return F.embedding(input_ids, table.weight)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """fp32 logits of the final hidden rows."""
        head = self.model.embed_tokens if self.lm_head is None else self.lm_head
        if isinstance(head, QuantTable):
            return head.logits(h)
        return linear(h, head.weight).float()

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        max_position = max(batch.seq_lens_cpu) - 1 if batch.seq_lens_cpu else None
        h = self.embed(input_ids)  # (T, hidden)
        cos_sin = self.rotary_emb.cos_sin(positions, h.dtype, max_position)  # once for all layers
        glue_dtype = self.glue_dtype
        if self.cpu_step is not None and self.cpu_step.applies(batch, h):  # every layer in one team call
            h, residual = self.cpu_step.run(h, cos_sin, batch)
        else:
            residual = None
            for layer in self.model.layers:
                h, residual = layer(h, residual, cos_sin, batch, glue_dtype)
        rows = batch.logits_indices  # (N,): the norm and the head are per row
        h, _ = self.model.norm.add_forward(h[rows], residual[rows], glue_dtype and self.dtype)
        return self.head(h)

    # ---------------------------------------------------------------- weights
    def checkpoint_keys(self) -> list[str]:
        """The HF tensor names a checkpoint must provide (unfused, tied head omitted)."""
        names = [name for name, _ in self.named_parameters()]
        names += [f"{name}.weight" for name, m in self.named_modules() if isinstance(m, (QuantLinear, QuantTable))]
        keys = []
        for name in names:
            for fused, shards in (("qkv_proj", ("q_proj", "k_proj", "v_proj")),
                                  ("gate_up_proj", ("gate_proj", "up_proj"))):
                if f".{fused}." in name:
                    keys.extend(name.replace(fused, s) for s in shards)
                    break
            else:
                keys.append(name)
        return keys

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor | QuantGroups]]) -> None:
        """Copy HF-named tensors into the parameters (casting to the model dtype); a
        ``QuantGroups`` goes to its ``QuantLinear`` / becomes a ``QuantTable``, or is
        dequantized where the model keeps that weight in float. Raises ``ModelLoadError``
        naming the first tensor that is missing or has the wrong shape; tensors the model
        does not use are ignored."""
        params = dict(self.named_parameters())
        seen: set[str] = set()
        for name, tensor in weights:
            if name.endswith(_IGNORED_SUFFIXES) or (self.lm_head is None and name == "lm_head.weight"):
                continue
            target, dst, index = name, None, 0
            parts = name.split(".")
            if len(parts) >= 2 and parts[-2] in _STACKED:
                fused, index = _STACKED[parts[-2]]
                target = ".".join(parts[:-2] + [fused, parts[-1]])
            module_name, _, leaf = target.rpartition(".")
            module = self._module_or_none(module_name)
            if isinstance(module, QuantLinear) and leaf == "weight":
                module.load_shard(index, tensor, name)
                seen.add(name)
                continue
            if isinstance(tensor, QuantGroups) and name in _TABLES and self.quant is not None:
                self._set_table(_TABLES[name], tensor, name)
                seen.add(name)
                continue
            if isinstance(tensor, QuantGroups):
                tensor = float_weight(tensor)
            if target != name and target in params:
                sizes = self.get_submodule(".".join(parts[:-2])).shard_sizes
                start = sum(sizes[:index])
                dst = params[target].data[start:start + sizes[index]]
            elif target == name and target in params:
                dst = params[target].data
            if dst is None:
                continue
            if tuple(dst.shape) != tuple(tensor.shape):
                raise ModelLoadError(
                    f"tensor {name!r} has shape {tuple(tensor.shape)}, the model config expects "
                    f"{tuple(dst.shape)}"
                )
            dst.copy_(tensor)
            seen.add(name)
        missing = [k for k in self.checkpoint_keys() if k not in seen]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise ModelLoadError(f"checkpoint is missing tensor {missing[0]!r}{more}")
        self.cpu_step = cpu_step.plan(self)

    def _module_or_none(self, name: str) -> nn.Module | None:
        try:
            return self.get_submodule(name)
        except AttributeError:
            return None

    def _set_table(self, where: str, weight: QuantGroups, name: str) -> None:
        """The quantized embedding or LM head replaces its float parameter."""
        table = QuantTable(self.config.vocab_size, self.config.hidden_size, weight, self.device)
        if where == "embed":
            self.model.embed_tokens = table
        else:
            self.lm_head = table
