"""Reference decoding for the engine tests (a plain module, not conftest, so the import
does not depend on which conftest.py pytest loaded last)."""

from __future__ import annotations

import torch


def reference_greedy(hf_model, ids: list[int], max_new_tokens: int) -> tuple[list[int], list[float]]:
    """Greedy continuation by transformers with no KV cache (full recompute per token) and
    each step's top-2 logit margin (near-ties below 1e-4 may flip with batch shape)."""
    seq, out, margins = list(ids), [], []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = hf_model(torch.tensor([seq])).logits[0, -1].float()
            top = logits.topk(2)
            margins.append(float(top.values[0] - top.values[1]))
            out.append(int(top.indices[0]))
            seq.append(out[-1])
    return out, margins


def assert_greedy_match(got: list[int], ref: list[int], margins: list[float], tie: float = 1e-4) -> None:
    """``got`` equals ``ref`` up to the first near-tie step of the reference."""
    for i, (g, r) in enumerate(zip(got, ref)):
        if margins[i] < tie:
            return
        assert g == r, f"token {i}: got {g}, reference {r} (margin {margins[i]:.2e}); got {got}, ref {ref}"
    assert len(got) == len(ref), f"got {len(got)} tokens, reference {len(ref)}"
