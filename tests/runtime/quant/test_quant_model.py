"""Quantized models end to end through the loader: which weights become packed, that the
packed model computes what its own (dequantized) weights say, and the bytes it keeps.

Exactness is checked against the model rebuilt in float from the packed model's own
dequantized weights, so these tests see the plumbing (fusion, q/k permutation, tables,
shard layouts) and not the quantization error; the error itself is a benchmark figure
(bench/quantization.py)."""

from __future__ import annotations

import pytest
import torch

from furca.errors import ConfigError
from furca.runtime.loader import load_model
from furca.runtime.quant.linear import QuantLinear, QuantTable, quantization_summary, weight_nbytes

IDS = [1, 5, 9, 42, 7, 100, 3, 250, 17, 64]


def _logits(model, config, model_harness, ids=IDS):
    harness = model_harness(model, config)
    (logits, _), = harness.forward([([], ids)], all_logits=True)
    return logits


def _float_twin(loaded, tmp_path):
    """The same architecture in fp32 with the quantized model's dequantized weights."""
    from furca.runtime.models import get_model_class

    model = loaded.model
    twin = get_model_class(loaded.config.architecture)(loaded.config, dtype=torch.float32)
    state = {}
    for name, m in model.named_modules():
        if isinstance(m, QuantLinear):
            w = m.dequantize()
            if m.bias is not None:
                state[f"{name}.bias"] = m.bias.float()
            state[f"{name}.weight"] = w
        elif isinstance(m, QuantTable):
            state[f"{name}.weight"] = m.dequantize()
    for name, p in model.named_parameters():
        state.setdefault(name, p.detach().float())
    twin_params = dict(twin.named_parameters())
    for name, t in state.items():
        twin_params[name].data.copy_(t)
    return twin.eval()


@pytest.mark.parametrize("method", ["int8", "int4"])
def test_float_checkpoint_quantized_on_load(method, make_tiny_model_dir, model_harness):
    path, _ = make_tiny_model_dir("qwen2")  # q/k/v biases
    fp = load_model(path, dtype="float32")
    q = load_model(path, dtype="float32", quantization=method, quantization_group_size=32)
    linears = [m for m in q.model.modules() if isinstance(m, QuantLinear)]
    assert len(linears) == 4 * q.config.num_hidden_layers
    assert all(len(m.packed) == 1 for m in linears)  # q/k/v and gate/up fused into one packed weight
    assert quantization_summary(q.model) == method
    assert quantization_summary(fp.model) == "none"
    # the packed model computes what its dequantized weights say (bf16 activations inside the packed matmuls)
    twin = _float_twin(q, None)
    got, want = _logits(q.model, q.config, model_harness), _logits(twin, q.config, model_harness)
    assert torch.allclose(got, want, atol=0.05 * want.abs().max().item(), rtol=0.05)
    # and is near the float model: the quantization error of a tiny random model, whose normal weights
    # are the worst case for 16 levels (~12% noise per weight through two layers)
    ref = _logits(fp.model, fp.config, model_harness)
    rel = ((got - ref).norm() / ref.norm()).item()
    assert rel < (0.05 if method == "int8" else 0.4), rel
    linear_fp = sum(m.weight.numel() * 4 for n, m in fp.model.named_modules() if n.endswith("_proj"))
    linear_q = sum(m.weight_nbytes for m in linears)
    assert linear_q < linear_fp * (0.3 if method == "int8" else 0.2)


def test_gguf_auto_keeps_the_file_quantization(tiny_gguf, model_harness):
    path, _ = tiny_gguf  # q, v, gate, down Q4_1; k, o, up Q8_0; token_embd Q8_0; output F16
    auto = load_model(path, dtype="float32", quantization="auto")
    plain = load_model(path, dtype="float32", quantization="none")
    assert quantization_summary(auto.model) == "Q4_1+Q8_0"
    qkv = auto.model.model.layers[0].self_attn.qkv_proj
    assert isinstance(qkv, QuantLinear) and len(qkv.packed) == 3  # Q4_1 / Q8_0 / Q4_1: one packed weight each
    assert isinstance(auto.model.model.embed_tokens, QuantTable)
    assert not isinstance(auto.model.lm_head, QuantTable)  # F16 in the file: a float head
    # the packed weights hold the file's values: dequantized they equal the float load's weights,
    # up to the layout's rounding of its scales (bf16 scale and zero for 4-bit codes)
    for (name, m) in auto.model.named_modules():
        if isinstance(m, QuantLinear):
            w = dict(plain.model.named_parameters())[f"{name}.weight"].float()
            assert torch.allclose(m.dequantize(), w, atol=2e-2 * w.abs().max().item()), name
    table = auto.model.model.embed_tokens
    assert torch.equal(table.dequantize(), plain.model.model.embed_tokens.weight.float())  # Q8_0 kept exactly
    twin = _float_twin(auto, None)
    got, want = _logits(auto.model, auto.config, model_harness), _logits(twin, auto.config, model_harness)
    assert torch.allclose(got, want, atol=0.05 * want.abs().max().item(), rtol=0.05)
    assert weight_nbytes(auto.model) < 0.5 * weight_nbytes(plain.model)


def test_bad_quantization_options(tiny_gguf):
    path, _ = tiny_gguf
    with pytest.raises(ConfigError, match="quantization"):
        load_model(path, quantization="int3")
    with pytest.raises(ConfigError, match="group"):
        load_model(path, quantization="int4", quantization_group_size=48)
    with pytest.raises(ConfigError, match="CUDA"):
        load_model(path, quantization="fp8")
    from furca.runtime.config import EngineConfig

    with pytest.raises(ConfigError, match="quantization must be one of"):
        EngineConfig(quantization="fp4")
    with pytest.raises(ConfigError, match="quantization_group_size"):
        EngineConfig(quantization_group_size=16)
