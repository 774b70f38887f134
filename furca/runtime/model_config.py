"""The model hyper-parameters furca's runtime needs, read from an HF ``config.json``.

``ModelConfig.from_hf_dict`` accepts both transformers 4 configs (``rope_theta`` +
``rope_scaling``) and transformers 5 ones (``rope_parameters``). Only the Llama family
is implemented (see ``SUPPORTED_ARCHITECTURES``); anything else raises
``UnsupportedModelError`` naming the architecture.

Sliding-window attention (Mistral's ``sliding_window``, Qwen's ``use_sliding_window``)
is not implemented: furca always attends to the full context, which is exact only for
sequences no longer than the window. So a window shorter than the model's positions
caps ``context_length`` at the window (Mistral-7B-v0.1: 4,096 of 32,768): a longer
prompt is a ``ContextLengthError``, never a silently different answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from furca.errors import ModelLoadError, UnsupportedModelError

SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
)
_MODEL_TYPE_TO_ARCH = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
# rope types implemented by models/rope.py ("default" is stored as rope_scaling=None)
SUPPORTED_ROPE_TYPES = ("linear", "llama3")
# furca's own rope type (no transformers equivalent): explicit per-frequency divisors,
# ``{"rope_type": "freq_factors", "freq_factors": [head_dim // 2 floats]}``; inverse
# frequency i is base_inv_freq[i] / freq_factors[i]. The GGUF loader builds it from
# llama.cpp's ``rope_freqs.weight`` (how llama3 scaling is stored in Llama-3.x GGUFs).
FREQ_FACTORS_ROPE_TYPE = "freq_factors"


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    rope_scaling: dict[str, Any] | None = field(default=None, hash=False)
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # bias on q/k/v projections (always on for Qwen2)
    o_proj_bias: bool = False  # bias on the output projection (Llama/Qwen3 attention_bias)
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3: per-head RMSNorm on q and k before RoPE
    sliding_window: int | None = None  # recorded, ignored (see module docstring)
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModelError(
                f"architecture {self.architecture!r} is not supported; "
                f"furca implements {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        for name in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ModelLoadError(f"model config: {name} must be a positive int, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ModelLoadError(
                f"model config: num_attention_heads ({self.num_attention_heads}) must be a "
                f"multiple of num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.head_dim % 2:
            raise ModelLoadError(f"model config: head_dim must be even for RoPE, got {self.head_dim}")
        if not (self.rms_norm_eps > 0 and self.rope_theta > 0):
            raise ModelLoadError(
                f"model config: rms_norm_eps ({self.rms_norm_eps}) and rope_theta "
                f"({self.rope_theta}) must be positive"
            )
        if self.rope_scaling is not None:
            rope_type = self.rope_scaling.get("rope_type")
            if rope_type == FREQ_FACTORS_ROPE_TYPE:
                _check_freq_factors(self.rope_scaling.get("freq_factors"), self.head_dim)
            elif rope_type not in SUPPORTED_ROPE_TYPES:
                raise UnsupportedModelError(
                    f"rope scaling type {rope_type!r} is not supported "
                    f"(supported: default, {', '.join(SUPPORTED_ROPE_TYPES)})"
                )
            elif "factor" not in self.rope_scaling:
                raise ModelLoadError(f"model config: rope_scaling {self.rope_scaling} has no 'factor'")

    @property
    def context_length(self) -> int:
        """Tokens a sequence may hold: the model's positions, capped at its sliding
        window (see the module docstring)."""
        if self.sliding_window is not None:
            return min(self.max_position_embeddings, self.sliding_window)
        return self.max_position_embeddings

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        """Build from the parsed ``config.json`` of a transformers checkpoint."""
        archs = d.get("architectures") or []
        arch = archs[0] if archs else _MODEL_TYPE_TO_ARCH.get(d.get("model_type", ""), None)
        if arch is None:
            raise UnsupportedModelError(
                f"config.json names no architecture (model_type={d.get('model_type')!r}); "
                f"furca implements {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        if arch not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModelError(
                f"architecture {arch!r} is not supported; furca implements "
                f"{', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        act = d.get("hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise UnsupportedModelError(f"{arch} with hidden_act={act!r} is not supported (only silu)")
        if d.get("partial_rotary_factor", 1.0) != 1.0:
            raise UnsupportedModelError(f"{arch} with partial_rotary_factor != 1 is not supported")
        try:
            hidden = int(d["hidden_size"])
            num_heads = int(d["num_attention_heads"])
            head_dim = d.get("head_dim") or hidden // num_heads
            rope_theta, rope_scaling = _rope_from_hf(d)
            attention_bias = bool(d.get("attention_bias", False))
            window = d.get("sliding_window")
            if arch.startswith("Qwen") and not d.get("use_sliding_window", False):
                window = None
            return cls(
                architecture=arch,
                vocab_size=int(d["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(d["intermediate_size"]),
                num_hidden_layers=int(d["num_hidden_layers"]),
                num_attention_heads=num_heads,
                num_key_value_heads=int(d.get("num_key_value_heads") or num_heads),
                head_dim=int(head_dim),
                rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
                rope_theta=rope_theta,
                rope_scaling=rope_scaling,
                max_position_embeddings=int(d.get("max_position_embeddings", 2048)),
                tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
                attention_bias=True if arch == "Qwen2ForCausalLM" else attention_bias,
                o_proj_bias=False if arch == "Qwen2ForCausalLM" else attention_bias,
                mlp_bias=bool(d.get("mlp_bias", False)),
                qk_norm=arch == "Qwen3ForCausalLM",
                sliding_window=int(window) if window else None,
                bos_token_id=d.get("bos_token_id"),
                eos_token_ids=tuple(as_id_list(d.get("eos_token_id"))),
            )
        except KeyError as e:
            raise ModelLoadError(f"model config ({arch}) is missing the key {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            raise ModelLoadError(f"model config ({arch}) has an invalid value: {e}") from None


def as_id_list(value: Any) -> list[int]:
    """``None``, an int, or a list of ints (as in ``eos_token_id``) -> list of ints."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(value)]


def _check_freq_factors(factors: Any, head_dim: int) -> None:
    n = head_dim // 2
    if not isinstance(factors, (list, tuple)) or len(factors) != n:
        got = f"{len(factors)} values" if isinstance(factors, (list, tuple)) else repr(factors)
        raise ModelLoadError(
            f"model config: rope_scaling 'freq_factors' must hold head_dim / 2 = {n} numbers, got {got}")
    for f in factors:
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not (math.isfinite(f) and f > 0):
            raise ModelLoadError(
                f"model config: rope_scaling 'freq_factors' must be positive finite numbers, got {f!r}")


def _rope_from_hf(d: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, rope_scaling or None for plain RoPE), from either config style."""
    params = d.get("rope_parameters")
    if isinstance(params, dict) and params:
        theta = float(params.get("rope_theta", d.get("rope_theta", 10000.0)))
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    else:
        theta = float(d.get("rope_theta", 10000.0))
        scaling = dict(d.get("rope_scaling") or {})
    if "type" in scaling and "rope_type" not in scaling:
        scaling["rope_type"] = scaling.pop("type")
    scaling.pop("type", None)
    if scaling.get("rope_type", "default") == "default":
        return theta, None
    return theta, scaling
