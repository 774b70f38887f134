"""``load_model``: a model directory (HF format) or a ``.gguf`` file -> a ready model,
its config, tokenizer and generation defaults. ``path=None`` loads the default model
(pulled on first use, see ``furca.runtime.pull``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from furca.errors import ConfigError, ModelLoadError
from furca.runtime.model_config import ModelConfig, as_id_list
from furca.runtime.models import get_model_class
from furca.runtime.threads import in_short_lived_thread
from furca.runtime.tokenizer import Tokenizer

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}


@dataclass
class LoadedModel:
    model: torch.nn.Module  # forward(input_ids, positions, batch) -> fp32 logits
    config: ModelConfig
    tokenizer: Tokenizer
    generation_defaults: dict[str, Any]  # generation_config.json subset; eos_token_id -> list
    context_length: int
    model_path: Path

    @property
    def eos_token_ids(self) -> list[int]:
        return self.tokenizer.eos_token_ids


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if dtype in (torch.float32, torch.bfloat16, torch.float16):
            return dtype
    elif isinstance(dtype, str) and dtype.lower() in _DTYPES:
        return _DTYPES[dtype.lower()]
    raise ConfigError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")


def load_model(path: str | Path | None = None, *, dtype: str | torch.dtype = "float32",
               device: str | torch.device = "cpu", linear_dtype: str | torch.dtype | None = None,
               quantization: str = "none", quantization_group_size: int = 32, tp=None) -> LoadedModel:
    """Load weights, config and tokenizer. ``linear_dtype`` (None = ``dtype``): the linear
    layers' and LM head's dtype (see ``furca.runtime.models.llama``). ``quantization``:
    "none" (float weights: quantized files are dequantized), "int8" / "int4" (the
    projections quantized on load, int4 in groups of ``quantization_group_size``), "auto"
    (a GGUF file's or an AWQ / GPTQ checkpoint's own quantization kept; none for a float
    checkpoint); see docs/quantization.md. Raises
    ``ModelLoadError`` (missing path, unreadable files, missing tensors) or
    ``UnsupportedModelError`` (architecture). Runs in a short-lived thread, so the
    caller's thread keeps no OpenMP pool (``furca.runtime.threads``). ``tp`` (a
    ``furca.runtime.distributed.TPShard``): load only that tensor-parallel rank's part;
    ``LoadedModel.config`` stays the full model's."""
    plan = _plan(quantization, quantization_group_size)
    if plan.method == "fp8" and torch.device(device).type != "cuda":
        raise ConfigError("quantization='fp8' runs on CUDA only (Triton fp8 kernels, sm_89 or newer)")
    return in_short_lived_thread(lambda: _load_model(path, dtype, device, linear_dtype, plan, tp))


def _plan(quantization: str, group: int):
    from furca.runtime.quant.linear import METHODS, QuantPlan

    if quantization != "auto" and quantization not in METHODS:
        raise ConfigError(f"quantization must be auto or one of {', '.join(METHODS)}, got {quantization!r}")
    try:
        return QuantPlan(method="none" if quantization == "auto" else quantization, group=group,
                         keep_file=quantization == "auto")
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _load_model(path, dtype, device, linear_dtype, plan, tp) -> LoadedModel:
    from furca.runtime.pull import resolve_model_path

    torch_dtypes = (resolve_dtype(dtype), None if linear_dtype is None else resolve_dtype(linear_dtype))
    model_path = resolve_model_path(path)
    if model_path.is_file():
        if model_path.suffix.lower() != ".gguf":
            raise ModelLoadError(f"{model_path} is a file but not a .gguf; pass a model directory or a .gguf")
        return _load_gguf(model_path, torch_dtypes, plan, device, tp)
    if not (model_path / "config.json").exists():
        ggufs = sorted(model_path.glob("*.gguf"))
        if len(ggufs) == 1:  # a directory holding just a GGUF file
            return _load_gguf(ggufs[0], torch_dtypes, plan, device, tp)
        if ggufs:
            raise ModelLoadError(
                f"{model_path} has no config.json and several .gguf files "
                f"({', '.join(p.name for p in ggufs)}); pass one of them")
    return _load_hf_dir(model_path, torch_dtypes, plan, device, tp)


def _load_hf_dir(model_dir: Path, dtypes: tuple[torch.dtype, torch.dtype | None], plan, device,
                 tp=None) -> LoadedModel:
    from dataclasses import replace

    from furca.runtime.loader.hf import iter_safetensors, read_generation_config, read_json, safetensors_files

    hf_config = read_json(model_dir / "config.json")
    config = ModelConfig.from_hf_dict(hf_config)
    gen = read_generation_config(model_dir)
    files = safetensors_files(model_dir)
    weights = iter_safetensors(files)
    from furca.runtime.quant.hf_formats import parse_quantization_config, separate_quantization_config

    spec = parse_quantization_config(hf_config if "quantization_config" in hf_config
                                     else separate_quantization_config(model_dir, read_json) or {})
    if spec is not None:  # an AWQ / GPTQ checkpoint: its projections arrive as QuantGroups
        from furca.runtime.quant.hf_formats import iter_quantized

        weights = iter_quantized(weights, spec)
    elif plan.keep_file:  # a float checkpoint has nothing of its own to keep
        plan = replace(plan, keep_file=False)
    model = _build(config, weights, dtypes, plan, device, tp)
    extra_eos = [*as_id_list(gen.get("eos_token_id")), *config.eos_token_ids]
    tokenizer = Tokenizer.from_pretrained(model_dir, extra_eos_token_ids=extra_eos)
    return _finish(model, config, tokenizer, gen, model_dir)


def _load_gguf(path: Path, dtypes: tuple[torch.dtype, torch.dtype | None], plan, device, tp=None) -> LoadedModel:
    from furca.runtime.loader.gguf import read_gguf

    gguf_model = read_gguf(path)
    config = ModelConfig.from_hf_dict(gguf_model.hf_config)
    if plan.keep_file:
        from collections import Counter

        kinds = Counter(gguf_model.tensor_types().values())
        logging.getLogger("furca").info("%s: weights kept as in the file (%s)", path.name,
                                        ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())))
    model = _build(config, gguf_model.tensors(keep_quantized=plan.keep_file), dtypes, plan, device, tp)
    gen = dict(gguf_model.generation_config)
    tokenizer = Tokenizer(gguf_model.hf_tokenizer,
                          extra_eos_token_ids=[*as_id_list(gen.get("eos_token_id")), *config.eos_token_ids])
    return _finish(model, config, tokenizer, gen, path)


def _build(config: ModelConfig, weights, dtypes: tuple[torch.dtype, torch.dtype | None], plan,
           device, tp=None) -> torch.nn.Module:
    if tp is not None:
        from furca.runtime.distributed.model import build_sharded

        return build_sharded(config, weights, dtypes, plan, device, tp)
    dtype, linear_dtype = dtypes
    model = get_model_class(config.architecture)(config, dtype=dtype, device=device, linear_dtype=linear_dtype,
                                                 quant=plan)
    model.load_weights(weights)
    return model.eval()


def _finish(model, config: ModelConfig, tokenizer: Tokenizer, gen: dict[str, Any], path: Path) -> LoadedModel:
    gen = dict(gen)
    gen["eos_token_id"] = list(tokenizer.eos_token_ids)
    if config.context_length < config.max_position_embeddings:
        logging.getLogger("furca").warning(
            "%s: context length capped at its sliding window, %d of %d positions (furca attends to the "
            "full context, exact only within the window)", path.name, config.context_length,
            config.max_position_embeddings)
    return LoadedModel(model=model, config=config, tokenizer=tokenizer, generation_defaults=gen,
                       context_length=config.context_length, model_path=path)


__all__ = ["LoadedModel", "load_model", "resolve_dtype"]
