"""GGUF loading: a tiny llama GGUF written with gguf.GGUFWriter (F32, F16, Q8_0 and
Q4_1 tensors, q/k permuted as llama.cpp's converter does, tokenizer metadata) loads
with the right config and tokenizer, and its logits equal a transformers model holding
the same (dequantized) weights; conversion to an HF directory loads in both. A
Llama-3.x-style GGUF (llama3 rope scaling as llama.cpp's ``rope_freqs.weight``) runs
exactly as transformers does with the HF llama3 config. Kept quantized
(``tensors(keep_quantized=True)``), the same file's weights are QuantGroups equal to
the dequantized ones; a quantized type furca cannot keep is refused by tensor and type."""

from __future__ import annotations

import copy
import math

import gguf
import numpy as np
import pytest
import torch

from furca.errors import ModelLoadError, UnsupportedModelError
from furca.runtime.loader import load_model
from furca.runtime.loader.gguf import convert_gguf_to_hf, read_gguf
from furca.runtime.model_config import ModelConfig
from furca.runtime.models.rope import rope_inv_freq
from furca.runtime.quant.groups import QuantGroups

TEXTS = ["Hello world!", "def add(a, b):\n    return a + b", "<|im_start|>user\nhi<|im_end|>", "héllo 🙂"]


def test_gguf_config_tokenizer_and_logits(tiny_gguf, tiny_hf_tokenizer, model_harness, reference_logits):
    path, hf = tiny_gguf
    loaded = load_model(path)
    cfg = loaded.config
    assert (cfg.architecture, cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == (
        "LlamaForCausalLM", 2, 64, 4)
    assert (cfg.num_key_value_heads, cfg.head_dim, cfg.intermediate_size) == (2, 16, 128)
    assert cfg.vocab_size == len(tiny_hf_tokenizer) and not cfg.tie_word_embeddings
    assert cfg.rope_scaling is None and loaded.context_length == 256
    tok = loaded.tokenizer
    assert tok.bos_token_id == 1 and tok.eos_token_ids == [2] and tok.add_bos_token
    assert tok.chat_template == tiny_hf_tokenizer.chat_template
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == tiny_hf_tokenizer.encode(text, add_special_tokens=False)
        assert tok.encode(text, add_special_tokens=True) == [1] + ids
        assert tok.decode(ids, skip_special_tokens=False) == text
    assert {0, 1, 2} <= tok.special_token_ids

    ids = [1] + tok.encode("The quick brown fox jumps over the lazy dog.")
    run = model_harness(loaded.model, cfg)
    [(logits, slots)] = run.forward([([], ids)], all_logits=True)
    assert (logits - reference_logits(hf, ids)).abs().max() < 1e-4
    ids.append(int(logits[-1].argmax()))
    [(logits, _)] = run.forward([(slots, ids[-1:])])
    assert (logits[0] - reference_logits(hf, ids)[-1]).abs().max() < 1e-4


def test_gguf_converts_to_an_hf_dir_transformers_loads(tiny_gguf, tmp_path, model_harness, reference_logits):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, hf = tiny_gguf
    out = tmp_path / "converted"
    out.mkdir()
    convert_gguf_to_hf(path, out)
    loaded = load_model(out)
    hf2 = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    hf_tok = AutoTokenizer.from_pretrained(str(out))
    ids = [1, 5, 9, 40, 77, 120, 3]
    [(logits, _)] = model_harness(loaded.model, loaded.config).forward([([], ids)], all_logits=True)
    assert (logits - reference_logits(hf2, ids)).abs().max() < 1e-4
    assert (reference_logits(hf2, ids) - reference_logits(hf, ids)).abs().max() < 1e-4
    for text in TEXTS:
        assert loaded.tokenizer.encode(text, add_special_tokens=True) == hf_tok(text)["input_ids"]
    messages = [{"role": "user", "content": "hi"}]
    assert loaded.tokenizer.apply_chat_template(messages) == hf_tok.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)
    assert loaded.generation_defaults["eos_token_id"] == [2]


def test_qwen2_gguf(tmp_path, make_tiny_model_dir, tiny_hf_tokenizer, write_gguf, model_harness,
                    reference_logits):
    """qwen2: q/k/v biases, no q/k permutation."""
    _, hf = make_tiny_model_dir("qwen2")
    path = tmp_path / "tiny-qwen2.gguf"
    hf.load_state_dict(write_gguf(path, hf, tiny_hf_tokenizer, arch="qwen2"))
    loaded = load_model(tmp_path)  # a directory holding one .gguf file
    assert loaded.model_path == path
    assert loaded.config.architecture == "Qwen2ForCausalLM" and loaded.config.attention_bias
    ids = [1, 8, 50, 99, 200, 7]
    [(logits, _)] = model_harness(loaded.model, loaded.config).forward([([], ids)], all_logits=True)
    assert (logits - reference_logits(hf, ids)).abs().max() < 1e-4


@pytest.mark.parametrize("arch", ["gpt2", "phi3"])
def test_gguf_unsupported_architecture(tmp_path, arch):
    path = tmp_path / f"{arch}.gguf"
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedModelError, match=arch):
        load_model(path)


def test_gguf_missing_or_bad_file(tmp_path):
    with pytest.raises(ModelLoadError, match="missing.gguf"):
        load_model(tmp_path / "missing.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ModelLoadError, match="bad.gguf"):
        load_model(bad)


# ------------------------------------------------- llama3 rope factors (rope_freqs.weight)

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}


def llama_cpp_rope_freqs(hparams: dict) -> torch.Tensor:
    """``rope_freqs.weight`` as llama.cpp's converter writes it for a llama3-scaled model:
    convert_hf_to_gguf.py, ``LlamaModel.generate_extra_tensors`` (ggml-org/llama.cpp,
    added with Llama 3.1 support, PR #8676), transcribed. Per rotary frequency: 1 where
    the wavelength is below ``high_freq_wavelen``, ``factor`` above ``low_freq_wavelen``,
    ``1 / ((1 - smooth) / factor + smooth)`` in between; llama.cpp divides the base
    frequency by it (``ggml_rope_ext``'s ``freq_factors``). (Older converters read
    ``original_max_position_embeddings`` from the top level of config.json, default
    8192; current ones from the rope parameters, as here.)"""
    rope_scaling = hparams["rope_scaling"]
    base = hparams.get("rope_theta", 10000.0)
    dim = hparams.get("head_dim", hparams["hidden_size"] // hparams["num_attention_heads"])
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor = rope_scaling.get("factor", 8.0)
    low_freq_factor = rope_scaling.get("low_freq_factor", 1.0)
    high_freq_factor = rope_scaling.get("high_freq_factor", 4.0)
    old_context_len = rope_scaling.get("original_max_position_embeddings", 8192)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    rope_factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            rope_factors.append(1)
        elif wavelen > low_freq_wavelen:
            rope_factors.append(factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            rope_factors.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor([float(f) for f in rope_factors], dtype=torch.float32)


@pytest.fixture
def gguf_extras(monkeypatch):
    """``add(tensors={name: array}, scaling_type=None)``: the next GGUFs written also hold
    these tensors (and ``rope.scaling.type``), added just before the header is written;
    each call replaces the previous one's extras."""
    original = gguf.GGUFWriter.write_header_to_file

    def add(tensors: dict, scaling_type: str | None = None):
        def write_header_to_file(self, *args, **kwargs):
            for name, array in tensors.items():
                self.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))
            if scaling_type is not None:
                self.add_rope_scaling_type(gguf.RopeScalingType(scaling_type))
                self.add_rope_scaling_factor(8.0)
            return original(self, *args, **kwargs)

        monkeypatch.setattr(gguf.GGUFWriter, "write_header_to_file", write_header_to_file)

    return add


def test_llama3_rope_freqs_gguf(tmp_path, make_tiny_model_dir, tiny_hf_tokenizer, write_gguf, gguf_extras,
                                model_harness, reference_logits):
    """A Llama-3.x-style GGUF: llama3 scaling only as rope_freqs.weight (no rope.scaling.*
    metadata) runs exactly as transformers does with the HF llama3 config, past the
    original context."""
    _, hf = make_tiny_model_dir("llama", rope_scaling=dict(LLAMA3_ROPE), tie_word_embeddings=False)
    hparams = {"rope_scaling": LLAMA3_ROPE, "rope_theta": 10000.0, "hidden_size": 64, "num_attention_heads": 4}
    factors = llama_cpp_rope_freqs(hparams)
    # head_dim 16 -> 8 frequencies, wavelengths 2*pi*10000**(i/8) = 6.3, 19.9, 62.8, 199, ...:
    # with original context 64 all three bands occur (high_freq_wavelen 16, low_freq_wavelen 64)
    base_inv = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16))
    wavelen = 2 * math.pi / base_inv
    high, low = wavelen < 16, wavelen > 64
    assert high.sum() == 1 and low.sum() == 5 and (~high & ~low).sum() == 2
    assert (factors[high] == 1).all() and (factors[low] == 8).all()
    smooth = (64 / wavelen - 1.0) / (4.0 - 1.0)
    mid = ~high & ~low
    assert torch.allclose(factors[mid], 1 / ((1 - smooth[mid]) / 8.0 + smooth[mid]))
    assert ((factors[mid] > 1) & (factors[mid] < 8)).all()
    # dividing the base frequencies by them is transformers' llama3 rope
    assert torch.allclose(base_inv / factors, hf.model.rotary_emb.inv_freq, rtol=1e-6, atol=0)

    path = tmp_path / "tiny-llama3.gguf"
    gguf_extras({"rope_freqs.weight": factors.numpy()})
    hf.load_state_dict(write_gguf(path, hf, tiny_hf_tokenizer))
    loaded = load_model(path)
    cfg = loaded.config
    assert cfg.rope_scaling["rope_type"] == "freq_factors"
    assert cfg.rope_scaling["freq_factors"] == factors.tolist()
    assert torch.equal(loaded.model.rotary_emb.inv_freq, base_inv / factors)

    ids = [1] + [int(i) for i in torch.randint(3, cfg.vocab_size, (99,), generator=torch.Generator().manual_seed(0))]
    assert len(ids) > LLAMA3_ROPE["original_max_position_embeddings"]
    run = model_harness(loaded.model, cfg)
    [(logits, slots)] = run.forward([([], ids)], all_logits=True)
    expected = reference_logits(hf, ids)
    assert (logits - expected).abs().max() < 1e-4
    ids.append(int(logits[-1].argmax()))
    [(logits, _)] = run.forward([(slots, ids[-1:])])
    assert (logits[0] - reference_logits(hf, ids)[-1]).abs().max() < 1e-4
    # the scaling matters at these positions: plain RoPE would give other logits
    plain = copy.deepcopy(hf)
    plain.model.rotary_emb.inv_freq.copy_(base_inv)
    assert (reference_logits(plain, ids[:-1]) - expected).abs().max() > 1e-2

    out = tmp_path / "converted"
    out.mkdir()
    with pytest.raises(UnsupportedModelError, match="rope_freqs"):
        convert_gguf_to_hf(path, out)


def test_rope_freqs_wrong_length_or_conflicting_scaling(tmp_path, make_tiny_model_dir, tiny_hf_tokenizer,
                                                        write_gguf, gguf_extras):
    _, hf = make_tiny_model_dir("llama", rope_scaling=None, tie_word_embeddings=False)
    gguf_extras({"rope_freqs.weight": np.ones(7, dtype=np.float32)})  # head_dim 16 needs 8
    write_gguf(tmp_path / "short.gguf", hf, tiny_hf_tokenizer)
    with pytest.raises(ModelLoadError, match=r"rope_freqs\.weight.*\[7\].*head_dim 16.*\[8\]"):
        load_model(tmp_path / "short.gguf")

    gguf_extras({"rope_freqs.weight": np.array([1, 1, 2, 0, 8, 8, 8, 8], dtype=np.float32)})
    write_gguf(tmp_path / "zero.gguf", hf, tiny_hf_tokenizer)
    with pytest.raises(ModelLoadError, match="non-positive"):
        load_model(tmp_path / "zero.gguf")

    ones = np.ones(8, dtype=np.float32)
    gguf_extras({"rope_freqs.weight": ones}, scaling_type="linear")
    write_gguf(tmp_path / "both.gguf", hf, tiny_hf_tokenizer)
    with pytest.raises(UnsupportedModelError, match="both rope scaling type 'linear' and per-frequency"):
        load_model(tmp_path / "both.gguf")

    gguf_extras({"rope_freqs.weight": ones}, scaling_type="yarn")
    write_gguf(tmp_path / "yarn.gguf", hf, tiny_hf_tokenizer)
    with pytest.raises(UnsupportedModelError, match="rope scaling type 'yarn' is not supported"):
        load_model(tmp_path / "yarn.gguf")


def test_freq_factors_rope_type_in_model_config():
    """The internal rope type the GGUF loader produces is validated by ModelConfig too."""
    base = dict(architectures=["LlamaForCausalLM"], vocab_size=100, hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=4)
    factors = [1.0, 1.5, 4.0, 8.0, 8.0, 8.0, 8.0, 8.0]
    cfg = ModelConfig.from_hf_dict({**base, "rope_scaling": {"rope_type": "freq_factors", "freq_factors": factors}})
    base_inv = rope_inv_freq(16, 10000.0, None)
    assert torch.equal(rope_inv_freq(16, 10000.0, cfg.rope_scaling), base_inv / torch.tensor(factors))
    with pytest.raises(ModelLoadError, match=r"head_dim / 2 = 8 numbers, got 7 values"):
        ModelConfig.from_hf_dict({**base, "rope_scaling": {"rope_type": "freq_factors", "freq_factors": factors[:7]}})
    with pytest.raises(ModelLoadError, match="positive finite"):
        ModelConfig.from_hf_dict({**base, "rope_scaling": {"rope_type": "freq_factors",
                                                          "freq_factors": [float("nan")] + factors[1:]}})


# ------------------------------------------------------------ weights kept quantized

def test_gguf_tensors_kept_quantized(tiny_gguf):
    """Q4_1 / Q8_0 weights come out as QuantGroups equal, dequantized, to the fp32
    tensors (q and k rows un-permuted alike); F16 / F32 ones as the same fp32 tensors."""
    path, hf = tiny_gguf
    model = read_gguf(path)
    types = model.tensor_types()
    assert types["model.layers.0.self_attn.q_proj.weight"] == "Q4_1"
    assert types["model.layers.1.self_attn.k_proj.weight"] == "Q8_0"
    assert (types["lm_head.weight"], types["model.norm.weight"]) == ("F16", "F32")
    pairs = list(zip(model.tensors(), model.tensors(keep_quantized=True), strict=True))
    assert [name for (name, _), _ in pairs] == list(types) == [name for _, (name, _) in pairs]
    for (name, fp32), (_, kept) in pairs:
        if types[name] in ("Q4_1", "Q8_0"):
            assert isinstance(kept, QuantGroups) and kept.source == types[name]
            assert torch.equal(kept.dequantize(), fp32), name
        else:
            assert isinstance(kept, torch.Tensor) and torch.equal(kept, fp32), name
    # the loader's fp32 tensors are the HF model's weights (the un-permuted row order)
    state = hf.state_dict()
    assert all(torch.equal(fp32, state[name]) for (name, fp32), _ in pairs)


@pytest.fixture
def retype_tensor(monkeypatch):
    """``retype(gguf_name, qtype)``: GGUFs written next store that tensor as zero bytes
    of ``qtype`` (same shape), a type the test writer cannot otherwise produce."""
    original = gguf.GGUFWriter.add_tensor

    def retype(target: str, qtype: gguf.GGMLQuantizationType):
        def add_tensor(self, name, tensor, raw_shape=None, raw_dtype=None, **kwargs):
            if name == target:
                shape = tensor.shape if raw_dtype is None else gguf.quant_shape_from_byte_shape(tensor.shape,
                                                                                                  raw_dtype)
                tensor, raw_dtype = np.zeros(gguf.quant_shape_to_byte_shape(shape, qtype), np.uint8), qtype
            return original(self, name, tensor, raw_shape=raw_shape, raw_dtype=raw_dtype, **kwargs)

        monkeypatch.setattr(gguf.GGUFWriter, "add_tensor", add_tensor)

    return retype


@pytest.mark.parametrize("qtype, dequantizable", [("Q5_0", True), ("Q8_1", False)])
def test_gguf_quantized_type_not_kept_is_named(tmp_path, make_tiny_model_dir, tiny_hf_tokenizer, write_gguf,
                                               retype_tensor, qtype, dequantizable):
    """Kept quantized, a type outside gguf_blocks.SUPPORTED is an UnsupportedModelError
    naming the tensor and the type; dequantized, only a type gguf-py cannot dequantize is."""
    _, hf = make_tiny_model_dir("llama", rope_scaling=None, tie_word_embeddings=False)
    retype_tensor("blk.1.ffn_up.weight", gguf.GGMLQuantizationType[qtype])
    path = tmp_path / f"tiny-{qtype}.gguf"
    write_gguf(path, hf, tiny_hf_tokenizer)
    model = read_gguf(path)
    assert model.tensor_types()["model.layers.1.mlp.up_proj.weight"] == qtype
    with pytest.raises(UnsupportedModelError, match=rf"'blk\.1\.ffn_up\.weight'.*{qtype}"):
        list(model.tensors(keep_quantized=True))
    if dequantizable:
        weights = dict(model.tensors())
        assert torch.equal(weights["model.layers.1.mlp.up_proj.weight"], torch.zeros(128, 64))
    else:
        with pytest.raises(UnsupportedModelError, match=rf"'blk\.1\.ffn_up\.weight'.*{qtype}"):
            list(model.tensors())
