"""Model implementations and the registry mapping an HF architecture name to its class.

Every model class has the same surface: ``cls(config, dtype=, device=)``,
``load_weights(iterable of (hf_name, tensor))`` and
``forward(input_ids, positions, batch) -> fp32 logits [len(batch.logits_indices), vocab]``.
"""

from __future__ import annotations

from furca.errors import UnsupportedModelError
from furca.runtime.models.llama import LlamaForCausalLM

MODEL_REGISTRY: dict[str, type] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,
    "Qwen3ForCausalLM": LlamaForCausalLM,
}


def get_model_class(architecture: str) -> type:
    try:
        return MODEL_REGISTRY[architecture]
    except KeyError:
        raise UnsupportedModelError(
            f"architecture {architecture!r} is not supported; furca implements "
            f"{', '.join(MODEL_REGISTRY)}"
        ) from None


__all__ = ["MODEL_REGISTRY", "LlamaForCausalLM", "get_model_class"]
