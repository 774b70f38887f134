"""apply_token_bitmask_ (Triton) vs its plain-torch reference, exactly; the reference vs
the constrained decoder's CPU path (furca.constrain.apply_token_bitmask_), exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kernel_cases import DEVICE, DTYPES, IS_INTERPRETED

from furca.constrain import apply_token_bitmask_ as constrain_apply_token_bitmask_
from furca.kernels.token_bitmask import apply_token_bitmask_, apply_token_bitmask_ref

LOGIT_DTYPES = ["fp32", "fp16"] if IS_INTERPRETED else ["fp32", "fp16", "bf16"]


def _random_bitmask(rows: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    words = torch.randint(-2**31, 2**31 - 1, (rows, (vocab + 31) // 32), generator=gen, dtype=torch.int64)
    words[0] = -1  # a row with everything allowed
    words[-1, : words.shape[1] // 2] = 0  # a row mostly disallowed
    return words.to(torch.int32)


@pytest.mark.parametrize("dtype", LOGIT_DTYPES)
@pytest.mark.parametrize("vocab", [128_001, 1, 33])
@pytest.mark.parametrize("indices", [None, [3, 0]])
def test_bitmask_matches_reference(dtype, vocab, indices):
    gen = torch.Generator().manual_seed(vocab)
    logits = torch.randn(4, vocab, generator=gen).to(DEVICE, DTYPES[dtype])
    bitmask = _random_bitmask(4, vocab, gen)  # on the CPU, as the scheduler fills it
    want = apply_token_bitmask_ref(logits.clone(), bitmask, indices)
    got = apply_token_bitmask_(logits, bitmask, indices)
    assert got is logits
    assert torch.equal(got, want)


def test_bitmask_strided_rows_numpy_mask_and_1d_logits():
    gen = torch.Generator().manual_seed(1)
    vocab = 1000
    wide = torch.randn(3, vocab + 24, generator=gen).to(DEVICE)
    logits = wide[:, :vocab]  # row stride != vocab
    bitmask = _random_bitmask(3, vocab, gen).numpy()
    want = apply_token_bitmask_ref(logits.clone(), bitmask)
    apply_token_bitmask_(logits, bitmask)
    assert torch.equal(logits, want)
    assert torch.equal(wide[:, vocab:], wide[:, vocab:].clone())  # untouched past the view
    row = torch.randn(vocab, generator=gen).to(DEVICE)
    want = apply_token_bitmask_ref(row.clone(), bitmask[1])
    assert torch.equal(apply_token_bitmask_(row, bitmask[1]), want)


def test_bitmask_narrower_than_vocab_masks_the_rest():
    """Logits wider than the tokenizer's mask (padded LM head): those columns are masked."""
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 200, generator=gen).to(DEVICE)
    bitmask = torch.full((2, 4), -1, dtype=torch.int32)  # 128 tokens
    apply_token_bitmask_(logits, bitmask, np.array([1]))
    assert torch.isinf(logits[1, 128:]).all() and torch.isfinite(logits[1, :128]).all()
    assert torch.isfinite(logits[0]).all()


@pytest.mark.parametrize("vocab", [128_001, 1, 33, 200])
@pytest.mark.parametrize("indices", [None, [3, 0], []])
@pytest.mark.parametrize("width", ["full", "narrow"])
def test_reference_matches_constrain(vocab, indices, width):
    """The kernel's reference and furca.constrain's CPU path are one semantics: same
    rows masked, same columns, a mask narrower than the logits masking the rest."""
    gen = torch.Generator().manual_seed(vocab + 7)
    logits = torch.randn(4, vocab, generator=gen)
    bitmask = _random_bitmask(4, vocab, gen)
    if width == "narrow":
        bitmask = bitmask[:, : max(1, bitmask.shape[1] // 2)].contiguous()
    want = constrain_apply_token_bitmask_(logits.clone(), bitmask, indices)
    assert torch.equal(apply_token_bitmask_ref(logits.clone(), bitmask, indices), want)
    assert torch.equal(apply_token_bitmask_ref(logits.clone(), bitmask.numpy(), indices), want)
    assert torch.equal(apply_token_bitmask_ref(logits[1].clone(), bitmask[1]),
                       constrain_apply_token_bitmask_(logits[1].clone(), bitmask[1]))
