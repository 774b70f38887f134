"""GGUF loading: a tiny llama GGUF written with gguf.GGUFWriter (F32, F16, Q8_0 and
Q4_1 tensors, q/k permuted as llama.cpp's converter does, tokenizer metadata) loads
with the right config and tokenizer, and its logits equal a transformers model holding
the same (dequantized) weights; conversion to an HF directory loads in both."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from furca.errors import ModelLoadError, UnsupportedModelError
from furca.runtime.loader import load_model
from furca.runtime.loader.gguf import convert_gguf_to_hf

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
