"""Small helpers shared by the runtime benchmarks (not part of the package)."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    return {
        "date": _dt.date.today().isoformat(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def save(name: str, record: dict) -> Path:
    """Append one JSON line to bench/results/<name>.jsonl and return its path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.jsonl"
    with path.open("a") as f:
        f.write(json.dumps({**machine(), **record}) + "\n")
    return path


def few_shot_prefix(tokenizer, target_tokens: int) -> str:
    """Deterministic arithmetic few-shot text of about `target_tokens` tokens."""
    lines, i = [], 0
    text = "Answer each question with a number.\n"
    while len(tokenizer.encode(text)) < target_tokens:
        a, b = (i * 37) % 97 + 3, (i * 53) % 89 + 5
        lines.append(f"Q: What is {a} plus {b}? A: {a + b}\n")
        text = "Answer each question with a number.\n" + "".join(lines)
        i += 1
    return text
