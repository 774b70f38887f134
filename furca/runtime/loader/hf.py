"""Reading an HF-format model directory: config.json, generation_config.json and
safetensors weights (one file or sharded with ``model.safetensors.index.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import torch

from furca.errors import ModelLoadError

# generation_config.json keys the engine may use as request defaults
GENERATION_KEYS = (
    "do_sample", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
    "max_new_tokens", "bos_token_id", "eos_token_id", "pad_token_id",
)


def read_json(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ModelLoadError(f"{path.name} not found in {path.parent}") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"cannot read {path}: {e}") from e
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path} does not hold a JSON object")
    return data


def read_generation_config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "generation_config.json"
    if not path.exists():
        return {}
    data = read_json(path)
    return {k: data[k] for k in GENERATION_KEYS if data.get(k) is not None}


def safetensors_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelLoadError(f"{index} has no weight_map")
        files = [model_dir / name for name in dict.fromkeys(weight_map.values())]
    elif (model_dir / "model.safetensors").exists():
        files = [model_dir / "model.safetensors"]
    else:
        files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(
            f"no safetensors weights in {model_dir} (expected model.safetensors or "
            "model.safetensors.index.json; .bin checkpoints are not supported)"
        )
    for f in files:
        if not f.exists():
            raise ModelLoadError(f"weight shard {f.name} listed in the index is missing from {model_dir}")
    return files


def iter_safetensors(files: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` lazily, one tensor in memory at a time (CPU)."""
    from safetensors import safe_open

    for path in files:
        try:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                for name in f.keys():
                    yield name, f.get_tensor(name)
        except ModelLoadError:
            raise
        except Exception as e:  # OSError, safetensors' SafetensorError, ...
            raise ModelLoadError(f"cannot read weights from {path}: {e}") from e
