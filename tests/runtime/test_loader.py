"""Loading HF directories: sharded weights, generation defaults with several EOS ids,
the tokenizer wrapper against transformers, config parsing and load errors."""

from __future__ import annotations

import json

import pytest
import torch

from furca.errors import ConfigError, InvalidRequestError, ModelLoadError, UnsupportedModelError
from furca.runtime.loader import load_model
from furca.runtime.model_config import ModelConfig
from furca.runtime.tokenizer import Tokenizer

TEXTS = ["Hello world!", "  leading spaces and 12345 digits", "<|im_start|>user\nhi<|im_end|>",
         "unicode: héllo 🙂 日本", ""]


def test_sharded_checkpoint_and_several_eos_ids(make_tiny_model_dir, model_harness, reference_logits):
    model_dir, hf = make_tiny_model_dir(
        "qwen2", save_kwargs={"max_shard_size": "40KB"},
        generation_config={"eos_token_id": [2, 0], "temperature": 0.7, "top_p": 0.9, "top_k": 20,
                           "do_sample": True, "bos_token_id": 1})
    assert (model_dir / "model.safetensors.index.json").exists()
    assert len(list(model_dir.glob("model-*.safetensors"))) > 1
    loaded = load_model(model_dir)
    assert loaded.tokenizer.eos_token_ids == [2, 0]
    assert loaded.generation_defaults["eos_token_id"] == [2, 0]
    assert loaded.generation_defaults["temperature"] == 0.7
    assert loaded.generation_defaults["top_k"] == 20
    assert loaded.context_length == 256
    assert loaded.model_path == model_dir
    ids = list(range(3, 20))
    [(logits, _)] = model_harness(loaded.model, loaded.config).forward([([], ids)], all_logits=True)
    assert (logits - reference_logits(hf, ids)).abs().max() < 1e-4


def test_tokenizer_matches_transformers(make_tiny_model_dir, tiny_hf_tokenizer):
    from transformers import AutoTokenizer

    model_dir, _ = make_tiny_model_dir("llama")
    assert (model_dir / "chat_template.jinja").exists()  # transformers 5 layout
    hf = AutoTokenizer.from_pretrained(str(model_dir))
    tok = load_model(model_dir).tokenizer
    for text in TEXTS:
        assert tok.encode(text, add_special_tokens=True) == hf(text)["input_ids"]
        ids = tok.encode(text)
        assert ids == hf.encode(text, add_special_tokens=False)
        assert tok.decode(ids, skip_special_tokens=False) == text
        assert tok.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
    assert tok.decode(tok.encode("<|im_start|>hi<|im_end|>")) == "hi"
    assert not tok.add_bos_token
    assert tok.vocab_size == len(hf) == len(tiny_hf_tokenizer)
    assert tok.bos_token_id == 1 and tok.eos_token_ids == [2]
    assert {0, 1, 2} <= tok.special_token_ids
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    for gen_prompt in (True, False):
        expected = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen_prompt)
        assert tok.apply_chat_template(messages, add_generation_prompt=gen_prompt) == expected
    assert tok.hf is not None and tok.hf.backend_tokenizer is not None
    with pytest.raises(InvalidRequestError, match="chat template"):
        tok.apply_chat_template([{"role": "user", "content": None}])


def test_chat_template_only_in_tokenizer_config(tmp_path, tiny_hf_tokenizer):
    tiny_hf_tokenizer.save_pretrained(tmp_path)
    template = (tmp_path / "chat_template.jinja").read_text()
    (tmp_path / "chat_template.jinja").unlink()
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    cfg["chat_template"] = template
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    tok = Tokenizer.from_pretrained(tmp_path)
    assert tok.chat_template == template
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]).endswith("<|im_start|>assistant\n")


def test_tokenizer_with_bos_prepended(tmp_path, tiny_hf_tokenizer):
    """A tokenizer whose post-processor prepends BOS: encode(add_special_tokens=True)
    follows it, exactly as transformers' tokenizer(text) does."""
    from tokenizers import Tokenizer as RawTokenizer
    from tokenizers import processors
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    raw = RawTokenizer.from_str(tiny_hf_tokenizer.backend_tokenizer.to_str())
    raw.post_processor = processors.TemplateProcessing(
        single="<|im_start|> $A", pair="<|im_start|> $A <|im_start|> $B", special_tokens=[("<|im_start|>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<|im_start|>", eos_token="<|im_end|>",
                            ).save_pretrained(tmp_path)
    tok = Tokenizer.from_pretrained(tmp_path)
    hf = AutoTokenizer.from_pretrained(str(tmp_path))
    assert tok.add_bos_token
    for text in TEXTS:
        assert tok.encode(text, add_special_tokens=True) == hf(text)["input_ids"]
        assert tok.encode(text, add_special_tokens=True)[0] == 1
        assert tok.encode(text) == hf.encode(text, add_special_tokens=False)
    assert tok.chat_template is None
    with pytest.raises(InvalidRequestError, match="no chat template"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}])


def test_model_config_from_both_config_styles():
    base = dict(architectures=["LlamaForCausalLM"], vocab_size=100, hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    legacy = ModelConfig.from_hf_dict({**base, "rope_theta": 500000.0, "rope_scaling": {
        "type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}})
    v5 = ModelConfig.from_hf_dict({**base, "rope_parameters": {
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})
    assert legacy == v5
    assert v5.rope_theta == 500000.0 and v5.rope_scaling["rope_type"] == "llama3"
    assert v5.head_dim == 16 and v5.eos_token_ids == ()
    plain = ModelConfig.from_hf_dict({**base, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}})
    assert plain.rope_scaling is None
    qwen2 = ModelConfig.from_hf_dict({**base, "architectures": ["Qwen2ForCausalLM"], "sliding_window": 4096,
                                      "use_sliding_window": False, "eos_token_id": [5, 6]})
    assert qwen2.attention_bias and not qwen2.o_proj_bias and qwen2.sliding_window is None
    assert qwen2.eos_token_ids == (5, 6)
    assert qwen2.context_length == qwen2.max_position_embeddings == 2048
    # a sliding window shorter than the positions caps the context (full attention is exact up to it)
    mistral = ModelConfig.from_hf_dict({**base, "architectures": ["MistralForCausalLM"], "sliding_window": 512,
                                        "max_position_embeddings": 4096})
    assert mistral.sliding_window == 512 and mistral.context_length == 512
    wide = ModelConfig.from_hf_dict({**base, "architectures": ["MistralForCausalLM"], "sliding_window": 8192,
                                     "max_position_embeddings": 4096})
    assert wide.context_length == 4096
    with pytest.raises(UnsupportedModelError, match="yarn"):
        ModelConfig.from_hf_dict({**base, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    with pytest.raises(UnsupportedModelError, match="GPT2LMHeadModel"):
        ModelConfig.from_hf_dict({**base, "architectures": ["GPT2LMHeadModel"]})
    with pytest.raises(ModelLoadError, match="num_key_value_heads"):
        ModelConfig.from_hf_dict({**base, "num_key_value_heads": 3})
    with pytest.raises(ModelLoadError, match="intermediate_size"):
        ModelConfig.from_hf_dict({k: v for k, v in base.items() if k != "intermediate_size"})


def test_load_errors(tmp_path, make_tiny_model_dir):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelLoadError, match="no-such-model"):
        load_model(missing)
    with pytest.raises(ConfigError, match="int8"):
        load_model(missing, dtype="int8")

    model_dir, _ = make_tiny_model_dir("llama")
    cfg_path = model_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg_path.write_text(json.dumps({**cfg, "architectures": ["PhiForCausalLM"]}))
    with pytest.raises(UnsupportedModelError, match="PhiForCausalLM"):
        load_model(model_dir)
    cfg_path.write_text(json.dumps(cfg))

    from safetensors.torch import load_file, save_file

    weights = load_file(model_dir / "model.safetensors")
    del weights["model.layers.1.mlp.up_proj.weight"]
    save_file(weights, model_dir / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=r"model\.layers\.1\.mlp\.up_proj\.weight"):
        load_model(model_dir)

    weights["model.layers.1.mlp.up_proj.weight"] = torch.zeros(3, 3)
    save_file(weights, model_dir / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match="shape"):
        load_model(model_dir)

    (model_dir / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="safetensors"):
        load_model(model_dir)
