"""Test helpers: quantize a weight to ``bits`` per group and write it in the AWQ and
GPTQ layouts as AutoAWQ and AutoGPTQ / GPTQModel do (word by word, code by code), so
furca's unpacking (furca/runtime/quant/hf_formats.py) is checked against an independent
packer. Also writes a whole quantized checkpoint directory from a float one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

AWQ_PACK_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # AutoAWQ gemm: code i of a word is column order[i]


def quantize(w: torch.Tensor, group: int, bits: int = 4, sym: bool = False, g_idx: torch.Tensor | None = None,
             scale_dtype: torch.dtype = torch.float16):
    """Min/max round-to-nearest per group (GPTQ's quantizer): w (N, K) fp32 ->
    q (N, K) int64, z (N, G) int64, s (N, G) ``scale_dtype``. ``g_idx[k]``: the group of
    column k (default k // group)."""
    n, k = w.shape
    g_idx = torch.arange(k) // group if g_idx is None else g_idx.to(torch.int64)
    n_groups, maxq = k // group, 2 ** bits - 1
    q = torch.empty(n, k, dtype=torch.int64)
    z = torch.empty(n, n_groups, dtype=torch.int64)
    s = torch.empty(n, n_groups, dtype=scale_dtype)
    for g in range(n_groups):
        cols = (g_idx == g).nonzero().view(-1)
        x = w[:, cols]
        lo, hi = x.min(1).values.clamp(max=0), x.max(1).values.clamp(min=0)
        if sym:
            hi = torch.maximum(-lo, hi)
            lo = -hi
        scale = ((hi - lo) / maxq).clamp(min=1e-4).to(scale_dtype)
        zero = torch.full((n,), (maxq + 1) // 2) if sym else torch.round(-lo / scale.float()).clamp(0, maxq).long()
        q[:, cols] = (torch.round(x / scale.float()[:, None]) + zero[:, None]).clamp(0, maxq).long()
        z[:, g], s[:, g] = zero, scale
    return q, z, s


def exact_weight(q, z, s, group: int, g_idx: torch.Tensor | None = None) -> torch.Tensor:
    """(q - z) * s in fp32 for each weight (exact for fp16 / bf16 scales)."""
    g = torch.arange(q.shape[1]) // group if g_idx is None else g_idx.to(torch.int64)
    return (q - z[:, g]).to(torch.float32) * s.to(torch.float32)[:, g]


def _words(codes: np.ndarray, bits: int, order: list[int]) -> np.ndarray:
    """(R, C) codes -> (R, C / p) int32 words, code ``order[i]`` of each run of p at
    bits [i*bits, (i+1)*bits), OR-ed in one code at a time as the tools do."""
    per = 32 // bits
    out = np.zeros((codes.shape[0], codes.shape[1] // per), dtype=np.uint32)
    for col in range(out.shape[1]):
        for i in range(per):
            out[:, col] |= codes[:, col * per + order[i]].astype(np.uint32) << np.uint32(bits * i)
    return torch.from_numpy(out.view(np.int32))


def pack_awq_gemm(q, z, s):
    """AutoAWQ WQLinear_GEMM: qweight (K, N/8), qzeros (K/g, N/8), scales (K/g, N)."""
    return (_words(q.t().numpy(), 4, AWQ_PACK_ORDER), _words(z.t().numpy(), 4, AWQ_PACK_ORDER),
            s.t().contiguous())


def pack_awq_gemv(q, z, s, group: int):
    """AutoAWQ WQLinear_GEMV: qweight (N, K/8), qzeros (N, W) and scales (N, 8W) with W
    groups rounded up to whole words (and to 2 / 4 words for group 64 / 32)."""
    n, k = q.shape
    mult = {32: 4, 64: 2}.get(group, 1)
    words = -(-(k // group) // 8)  # groups rounded up to whole words
    width = -(-words // mult) * mult
    zeros = np.zeros((n, width * 8), dtype=np.int64)
    zeros[:, :k // group] = z.numpy()
    scales = torch.zeros(n, width * 8, dtype=s.dtype)
    scales[:, :k // group] = s
    return _words(q.numpy(), 4, list(range(8))), _words(zeros, 4, list(range(8))), scales


def pack_gptq(q, z, s, g_idx: torch.Tensor | None, bits: int, group: int, v1: bool):
    """GPTQ: qweight (K/p, N) packed along the input, qzeros (K/g, N/p), scales (K/g, N),
    g_idx (K,) int32. ``v1``: GPTQModel's export of the "gptq" format, which subtracts
    one from every zero by subtracting 0x11111111 (4-bit) from each whole word."""
    per = 32 // bits
    seq = list(range(per))
    qweight = _words(q.numpy(), bits, seq).t().contiguous()  # rows of K/p words: pack K, then (K/p, N)
    qzeros = _words(z.t().numpy(), bits, seq)
    if v1:
        ones = sum(1 << (bits * j) for j in range(per))
        qzeros = torch.from_numpy(((qzeros.numpy().view(np.uint32) - np.uint32(ones))).view(np.int32))
    g = torch.arange(q.shape[1]) // group if g_idx is None else g_idx
    return qweight, qzeros, s.t().contiguous(), g.to(torch.int32)


def write_quantized_checkpoint(src: Path, dst: Path, method: str, group: int, *, sym: bool = False,
                               desc_act: bool = False, split: bool = False, seed: int = 0) -> dict:
    """Copy the float checkpoint ``src`` to ``dst`` with every ``*_proj.weight`` quantized
    (AWQ gemm, or GPTQ v1 with ``desc_act`` shuffled groups) and a quantization_config in
    config.json. ``split``: qweights go to one shard, all other tensors to another.
    Other files (tokenizer, generation config) are copied. Returns {prefix: exact
    dequantized fp32 weight}."""
    dst.mkdir(parents=True)
    gen = torch.Generator().manual_seed(seed)
    floats = load_file(str(src / "model.safetensors"))
    shards, exact = ({}, {}), {}
    for name, t in floats.items():
        if not name.endswith("_proj.weight"):
            shards[1][name] = t
            continue
        prefix = name.removesuffix(".weight")
        w = t.to(torch.float32)
        g_idx = torch.randperm(w.shape[1], generator=gen) // group if desc_act else None
        q, z, s = quantize(w, group, sym=sym, g_idx=g_idx)
        exact[prefix] = exact_weight(q, z, s, group, g_idx)
        if method == "awq":
            parts = dict(zip(("qweight", "qzeros", "scales"), pack_awq_gemm(q, z, s)))
        else:
            parts = dict(zip(("qweight", "qzeros", "scales", "g_idx"), pack_gptq(q, z, s, g_idx, 4, group, True)))
        for part, v in parts.items():
            shards[0 if split and part == "qweight" else 1][f"{prefix}.{part}"] = v.contiguous()
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"] if split else \
        [None, "model.safetensors"]
    weight_map = {}
    for shard, fname in zip(shards, files):
        if shard:
            save_file(shard, str(dst / fname), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(shard, fname))
    if split:
        (dst / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = (
        {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm"}
        if method == "awq" else
        {"quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": desc_act, "sym": sym,
         "checkpoint_format": "gptq"})
    (dst / "config.json").write_text(json.dumps(cfg))
    for f in src.iterdir():  # tokenizer and generation config
        if f.is_file() and f.suffix != ".safetensors" and f.name not in ("config.json", "model.safetensors.index.json"):
            shutil.copy(f, dst / f.name)
    return exact
