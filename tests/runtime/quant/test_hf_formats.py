"""AWQ / GPTQ checkpoints -> QuantGroups: weights quantized here, packed as AutoAWQ and
AutoGPTQ / GPTQModel pack them (awq_gptq_writers.py), unpacked by furca and compared to
the exact (q - z) * s; a tiny Llama written as AWQ and GPTQ checkpoint directories and
read back through the loader's safetensors stream; bad configs and missing tensors."""

from __future__ import annotations

import pytest
import torch
from awq_gptq_writers import (exact_weight, pack_awq_gemm, pack_awq_gemv, pack_gptq, quantize,
                              write_quantized_checkpoint)

from furca.errors import ModelLoadError, UnsupportedModelError
from furca.runtime.loader.hf import iter_safetensors, read_json, safetensors_files
from furca.runtime.quant.groups import QuantGroups
from furca.runtime.quant.hf_formats import (ActOrderGroups, QuantSpec, iter_quantized, parse_quantization_config,
                                            unpack_awq, unpack_gptq)

N, K = 64, 256


def weight(seed: int = 0) -> torch.Tensor:
    """Random (N, K) with some all-positive and all-negative rows, so zeros of 0 and of
    2**bits - 1 occur (the edges of the packed zero words)."""
    w = torch.randn(N, K, generator=torch.Generator().manual_seed(seed))
    w[:4] = w[:4].abs()
    w[4:6] = -w[4:6].abs()
    return w


def checkpoint_order(groups: QuantGroups) -> torch.Tensor:
    """The fp32 weight in the checkpoint's input order (act-order groups put back)."""
    w = groups.dequantize()
    if not isinstance(groups, ActOrderGroups):
        return w
    out = torch.empty_like(w)
    out[:, groups.input_perm] = w
    return out


def assert_exact(groups: QuantGroups, expected: torch.Tensor, q, z, s, g=None):
    assert groups.shape == (N, K)
    got = checkpoint_order(groups)
    assert torch.equal(got, expected), f"max |diff| {(got - expected).abs().max():.3e}"
    # the tools' own fp16 dequantization, (q - z) * s in fp16, is that value rounded
    g = torch.arange(K) // groups.group if g is None else g
    assert torch.equal(got.half(), (q - z[:, g]).to(torch.int8).half() * s[:, g])


@pytest.mark.parametrize("group", [128, 32])
def test_awq_gemm_is_exact(group):
    q, z, s = quantize(weight(), group)
    assert (z == 0).any() and (z == 15).any()
    groups = unpack_awq(*pack_awq_gemm(q, z, s), QuantSpec("awq", 4, group))
    assert groups.codes.dtype == torch.uint8 and groups.offset is not None and groups.source == "awq"
    assert torch.equal(groups.codes, q.to(torch.uint8))
    assert_exact(groups, exact_weight(q, z, s, group), q, z, s)


@pytest.mark.parametrize("group", [128, 32])
def test_awq_gemv_is_exact(group):
    q, z, s = quantize(weight(1), group)
    groups = unpack_awq(*pack_awq_gemv(q, z, s, group), QuantSpec("awq", 4, group, version="gemv"))
    assert_exact(groups, exact_weight(q, z, s, group), q, z, s)


@pytest.mark.parametrize("group,sym,version,bits", [
    (128, False, "gptq", 4), (32, False, "gptq", 4), (128, True, "gptq", 4), (32, True, "gptq_v2", 4),
    (32, False, "gptq_v2", 4), (64, False, "gptq", 8), (128, True, "gptq", 8)])
def test_gptq_is_exact(group, sym, version, bits):
    q, z, s = quantize(weight(2), group, bits=bits, sym=sym)
    packed = pack_gptq(q, z, s, None, bits, group, v1=version == "gptq")
    groups = unpack_gptq(*packed, QuantSpec("gptq", bits, group, sym=sym, zero_point=not sym, version=version))
    assert type(groups) is QuantGroups and groups.bits == bits
    if sym:  # signed codes, no offset
        assert groups.codes.dtype == torch.int8 and groups.offset is None
        assert torch.equal(groups.codes.long(), q - 2 ** (bits - 1))
    else:
        assert groups.codes.dtype == torch.uint8 and groups.offset is not None
    if bits == 4:
        assert_exact(groups, exact_weight(q, z, s, group), q, z, s)
    else:  # 8-bit differences overflow the int8 fp16 reference above; the fp32 value is still exact
        assert torch.equal(groups.dequantize(), exact_weight(q, z, s, group))


def test_gptq_v1_zero_of_zero_borrows_across_the_word():
    """GPTQModel stores v1 zeros as word - 0x11111111, so a zero of 0 borrows from the
    next code of its word; reading back adds the word constant, exactly."""
    q, z, s = quantize(weight(3), 32)
    assert (z[:4] == 0).all()
    qweight, qzeros, scales, g_idx = pack_gptq(q, z, s, None, 4, 32, v1=True)
    assert ((qzeros[:, 0] >> 4) & 0xF != 0xF).any()  # a borrowed code, not the plain -1 & 0xF
    groups = unpack_gptq(qweight, qzeros, scales, g_idx, QuantSpec("gptq", 4, 32, version="gptq"))
    assert torch.equal(groups.dequantize(), exact_weight(q, z, s, 32))


@pytest.mark.parametrize("sym", [False, True])
def test_gptq_act_order(sym):
    group = 32
    g_idx = torch.randperm(K, generator=torch.Generator().manual_seed(4)) // group
    q, z, s = quantize(weight(4), group, sym=sym, g_idx=g_idx)
    packed = pack_gptq(q, z, s, g_idx, 4, group, v1=True)
    groups = unpack_gptq(*packed, QuantSpec("gptq", 4, group, desc_act=True, sym=sym, zero_point=not sym,
                                            version="gptq"))
    assert isinstance(groups, ActOrderGroups)
    perm = groups.input_perm
    assert torch.equal(perm.sort().values, torch.arange(K))
    assert torch.equal(g_idx[perm], torch.arange(K) // group)  # groups consecutive in the new order
    expected = exact_weight(q, z, s, group, g_idx)
    assert_exact(groups, expected, q, z, s, g_idx)
    assert torch.equal(groups.dequantize(), expected[:, perm])
    x = torch.randn(5, K, generator=torch.Generator().manual_seed(5))
    # in float64: the two products sum in different orders (fp32 BLAS differ by ~1e-5 on AVX2)
    torch.testing.assert_close(x.double()[:, perm] @ groups.dequantize().double().T, x.double() @ expected.double().T)
    # row operations keep the input order; fusing needs the same one
    rows = groups.take_rows(torch.arange(8))
    assert isinstance(rows, ActOrderGroups) and torch.equal(rows.input_perm, perm)
    fused = ActOrderGroups.cat([groups, rows])
    assert fused.shape == (N + 8, K) and torch.equal(fused.input_perm, perm)
    other = unpack_gptq(*pack_gptq(q, z, s, g_idx.flip(0), 4, group, v1=True),
                        QuantSpec("gptq", 4, group, desc_act=True, sym=sym, zero_point=not sym))
    with pytest.raises(ValueError, match="input orders differ"):
        ActOrderGroups.cat([groups, other])


def test_gptq_bad_g_idx():
    q, z, s = quantize(weight(), 32)
    qweight, qzeros, scales, g_idx = pack_gptq(q, z, s, None, 4, 32, v1=False)
    g_idx = g_idx.clone()
    g_idx[0] = 1  # group 0 one short, group 1 one over
    with pytest.raises(ModelLoadError, match=r"w\.g_idx must put exactly 32"):
        unpack_gptq(qweight, qzeros, scales, g_idx, QuantSpec("gptq", 4, 32, version="gptq_v2"), name="w")


def test_fp32_scales_within_an_ulp():
    q, z, s = quantize(weight(6), 32, scale_dtype=torch.float32)
    groups = unpack_gptq(*pack_gptq(q, z, s, None, 4, 32, v1=False), QuantSpec("gptq", 4, 32, version="gptq_v2"))
    bound = torch.finfo(torch.float32).eps * 15 * s.repeat_interleave(32, dim=1)
    assert ((groups.dequantize() - exact_weight(q, z, s, 32)).abs() <= bound).all()


def test_mismatched_shapes_name_the_tensor():
    q, z, s = quantize(weight(), 32)
    qweight, qzeros, scales = pack_awq_gemm(q, z, s)
    with pytest.raises(ModelLoadError, match=r"layer\.scales must be float16/bfloat16/float32 of shape \(8, 64\)"):
        unpack_awq(qweight, qzeros, scales[:, :32], QuantSpec("awq", 4, 32), name="layer")
    with pytest.raises(ModelLoadError, match="group_size 48 does not divide"):
        unpack_awq(qweight, qzeros, scales, QuantSpec("awq", 4, 48), name="layer")


# -------------------------------------------------------------------- config


def test_parse_quantization_config():
    assert parse_quantization_config({"architectures": ["LlamaForCausalLM"]}) is None
    autoawq = {"quant_method": "awq", "w_bit": 4, "q_group_size": 128, "zero_point": True, "version": "GEMM"}
    assert parse_quantization_config({"quantization_config": autoawq}) == QuantSpec("awq", 4, 128)
    gemv = {"quant_method": "awq", "bits": 4, "group_size": 64, "format": "gemv"}
    assert parse_quantization_config({"quantization_config": gemv}).version == "gemv"
    gptq = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True, "sym": False,
            "checkpoint_format": "gptq"}
    spec = parse_quantization_config({"quantization_config": gptq})
    assert spec == QuantSpec("gptq", 4, 128, desc_act=True, sym=False, zero_point=True, version="gptq")
    gptq_v2 = {"quant_method": "gptq", "bits": 8, "group_size": -1, "format": "gptq_v2", "sym": True}
    assert parse_quantization_config({"quantization_config": gptq_v2}) == QuantSpec(
        "gptq", 8, -1, sym=True, zero_point=False, version="gptq_v2")


@pytest.mark.parametrize("qc,field,value", [
    ({"quant_method": "awq", "bits": 3, "group_size": 128}, "bits", "3"),
    ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "bits", "3"),
    ({"quant_method": "exl2", "bits": 4}, "quant_method", "'exl2'"),
    ({"quant_method": "awq", "bits": 4, "version": "gemv_fast"}, "version", "'gemv_fast'"),
    ({"quant_method": "awq", "bits": 4, "zero_point": False}, "zero_point", "False"),
    ({"quant_method": "gptq", "bits": 4, "format": "marlin"}, "format", "'marlin'"),
    ({"quant_method": "gptq", "bits": 4, "pack_dtype": "int16"}, "pack_dtype", "'int16'"),
])
def test_unsupported_config_names_field_and_value(qc, field, value):
    with pytest.raises(UnsupportedModelError) as e:
        parse_quantization_config({"quantization_config": qc})
    assert f"quantization_config.{field} = {value}" in str(e.value)


def test_bad_group_size():
    with pytest.raises(ModelLoadError, match=r"quantization_config\.group_size = 0"):
        parse_quantization_config({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 0}})


# ------------------------------------------------------- checkpoint directories


def read_quantized(model_dir):
    spec = parse_quantization_config(read_json(model_dir / "config.json"))
    return dict(iter_quantized(iter_safetensors(safetensors_files(model_dir)), spec))


@pytest.fixture
def tiny_llama(make_tiny_model_dir):
    """(dir, transformers model): a tiny Llama whose projections take 128 and 256 inputs
    (group 128 divides both)."""
    return make_tiny_model_dir("llama", hidden_size=128, intermediate_size=256)


def check_stream(out: dict, exact: dict, float_dir):
    floats = dict(iter_safetensors(safetensors_files(float_dir)))
    projections = {n for n in floats if n.endswith("_proj.weight")}
    assert len(projections) == 2 * 7 and set(out) == set(floats)
    for name, t in floats.items():
        if name in projections:
            g = out[name]
            assert isinstance(g, QuantGroups) and g.shape == tuple(t.shape)
            assert torch.equal(checkpoint_order(g), exact[name.removesuffix(".weight")]), name
        else:
            assert torch.equal(out[name], t), name


def test_awq_checkpoint_directory(tiny_llama, tmp_path):
    float_dir, _ = tiny_llama
    exact = write_quantized_checkpoint(float_dir, tmp_path / "awq", "awq", 128)
    out = read_quantized(tmp_path / "awq")
    check_stream(out, exact, float_dir)
    assert all(g.source == "awq" for g in out.values() if isinstance(g, QuantGroups))


def test_gptq_act_order_sharded_directory(tiny_llama, tmp_path):
    """qweights in one shard, their other parts in the next: each linear is yielded once
    its last part arrives."""
    float_dir, _ = tiny_llama
    exact = write_quantized_checkpoint(float_dir, tmp_path / "gptq", "gptq", 32, desc_act=True, split=True)
    assert len(safetensors_files(tmp_path / "gptq")) == 2
    out = read_quantized(tmp_path / "gptq")
    check_stream(out, exact, float_dir)
    assert all(isinstance(g, ActOrderGroups) for n, g in out.items() if n.endswith("_proj.weight"))


def test_missing_parts_name_the_tensor(tiny_llama, tmp_path):
    float_dir, _ = tiny_llama
    write_quantized_checkpoint(float_dir, tmp_path / "q", "gptq", 128)
    spec = parse_quantization_config(read_json(tmp_path / "q" / "config.json"))
    tensors = list(iter_safetensors(safetensors_files(tmp_path / "q")))
    without = [(n, t) for n, t in tensors if n != "model.layers.1.mlp.up_proj.qzeros"]
    with pytest.raises(ModelLoadError, match=r"model\.layers\.1\.mlp\.up_proj\.qzeros is missing"):
        list(iter_quantized(without, spec))
    # g_idx may be left out when groups are in order, not with act-order
    no_g_idx = [(n, t) for n, t in tensors if not n.endswith("g_idx")]
    out = dict(iter_quantized(no_g_idx, spec))
    assert sum(isinstance(v, QuantGroups) for v in out.values()) == 14
    act_order = QuantSpec("gptq", 4, 128, desc_act=True, version="gptq")
    with pytest.raises(ModelLoadError, match=r"\.g_idx is missing"):
        list(iter_quantized(no_g_idx, act_order))


_FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


@pytest.mark.parametrize("method,sym,desc_act", [("awq", False, False), ("gptq", True, False),
                                                 ("gptq", True, True), ("gptq", False, True)])
def test_loaded_model_matches_transformers_on_the_dequantized_weights(
        method, sym, desc_act, tiny_llama, tmp_path, model_harness, reference_logits):
    """load_model on the checkpoint directory computes what transformers computes with the
    exact dequantized projections: exactly with the codes dequantized (quantization
    "none"), and within the packed layout's bf16 rounding with them kept ("auto")."""
    from furca.runtime.loader import load_model
    from furca.runtime.quant.linear import QuantLinear, quantization_summary

    float_dir, hf = tiny_llama
    exact = write_quantized_checkpoint(float_dir, tmp_path / "q", method, 32 if desc_act else 128, sym=sym,
                                       desc_act=desc_act)
    with torch.no_grad():
        params = hf.state_dict()
        for prefix, w in exact.items():
            params[f"{prefix}.weight"].copy_(w)
    loaded = load_model(tmp_path / "q", quantization="none")
    ids = torch.randint(3, loaded.config.vocab_size, (9,), generator=torch.Generator().manual_seed(0)).tolist()
    [(logits, _)] = model_harness(loaded.model, loaded.config).forward([([], ids)], all_logits=True)
    ref = reference_logits(hf, ids)
    assert (logits - ref).abs().max() < 1e-4
    kept = load_model(tmp_path / "q", quantization="auto")
    assert quantization_summary(kept.model) == method
    for name, m in kept.model.named_modules():
        if isinstance(m, QuantLinear):  # the kept codes hold the checkpoint's weights, in input order
            w = torch.cat([exact[name.replace(fused, part)] for fused, parts in _FUSED.items() if fused in name
                           for part in parts] or [exact[name]])
            assert torch.allclose(m.dequantize(), w, atol=1e-2 * w.abs().max().item()), name
    [(logits, _)] = model_harness(kept.model, kept.config).forward([([], ids)], all_logits=True)
    assert (logits - ref).abs().max() < 0.05 * ref.abs().max()


@pytest.mark.parametrize("method,file,qc", [
    ("gptq", "quantize_config.json", {"bits": 4, "group_size": 128, "desc_act": False, "sym": True,
                                      "true_sequential": True, "model_file_base_name": "model"}),
    ("awq", "quant_config.json", {"zero_point": True, "q_group_size": 128, "w_bit": 4, "version": "GEMM"}),
])
def test_older_checkpoint_with_its_config_in_a_separate_file(method, file, qc, tiny_llama, tmp_path):
    """AutoGPTQ's quantize_config.json and AutoAWQ's quant_config.json (no quant_method in
    either) load as the same checkpoint with quantization_config in config.json does."""
    import json

    from furca.runtime.loader import load_model
    from furca.runtime.quant.linear import quantization_summary

    float_dir, _ = tiny_llama
    write_quantized_checkpoint(float_dir, tmp_path / "q", method, 128, sym=method == "gptq")
    config = read_json(tmp_path / "q" / "config.json")
    inline = load_model(tmp_path / "q", quantization="auto")
    del config["quantization_config"]
    (tmp_path / "q" / "config.json").write_text(json.dumps(config))
    (tmp_path / "q" / file).write_text(json.dumps(qc))

    separate = load_model(tmp_path / "q", quantization="auto")

    assert quantization_summary(separate.model) == method
    ours, theirs = separate.model.state_dict(), inline.model.state_dict()
    assert set(ours) == set(theirs) and all(torch.equal(ours[k], theirs[k]) for k in ours)
    for (name, m), (_, ref) in zip(separate.model.named_modules(), inline.model.named_modules()):
        if hasattr(m, "dequantize") and hasattr(ref, "dequantize"):
            assert torch.equal(m.dequantize(), ref.dequantize()), name
    (tmp_path / "q" / file).write_text(json.dumps({**qc, "quant_method": "exl2"}))
    with pytest.raises(UnsupportedModelError, match="quant_method = 'exl2'"):
        load_model(tmp_path / "q", quantization="auto")
