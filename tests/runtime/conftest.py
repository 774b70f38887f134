"""Shared fixtures for runtime tests (append yours below, keep each section small).

Model fixtures build tiny random transformers checkpoints locally (nothing is
downloaded) and a harness that drives a furca model through the KV cache with
ForwardBatch, allocating slots by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

# ----------------------------------------------------------------- tiny models

CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)
TINY_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world! furca runs prompt programs with a radix cache.",
    "def add(a, b):\n    return a + b\n",
    '{"name": "furca", "version": 1, "tags": ["llm", "json"]}',
    "Paris is the capital of France. 1234567890",
] * 20


def build_tiny_hf_tokenizer(vocab_size: int = 300):
    """A byte-level BPE (gpt2 pre-tokenization) trained on a few lines, wrapped as a
    transformers fast tokenizer with ChatML specials and template. No BOS is added."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=TINY_SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
        unk_token="<|endoftext|>", pad_token="<|endoftext|>", chat_template=CHATML_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


@pytest.fixture(scope="session")
def tiny_hf_tokenizer():
    return build_tiny_hf_tokenizer()


_TINY_COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
                    bos_token_id=1, eos_token_id=2)
TINY_ARCH_KWARGS = {
    # llama3 rope scaling with a small original context so scaling matters; tied head
    "llama": dict(rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
                  rope_theta=10000.0, tie_word_embeddings=True),
    "mistral": dict(sliding_window=4096, rope_theta=1000000.0),
    "qwen2": dict(rope_theta=1000000.0),
    "qwen3": dict(head_dim=32, rope_theta=1000000.0),  # head_dim != hidden / heads
}


def build_tiny_hf_model(arch: str, vocab_size: int, seed: int = 0, **overrides):
    """A random transformers model; every parameter (norms and biases too) is drawn
    from a distribution wide enough that attention is far from uniform."""
    import transformers

    config_cls = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
                  "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}[arch]
    model_cls = {"llama": transformers.LlamaForCausalLM, "mistral": transformers.MistralForCausalLM,
                 "qwen2": transformers.Qwen2ForCausalLM, "qwen3": transformers.Qwen3ForCausalLM}[arch]
    kwargs = {**_TINY_COMMON, **TINY_ARCH_KWARGS[arch], "vocab_size": vocab_size, **overrides}
    config = config_cls(**kwargs)
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.15)
    return model


@pytest.fixture
def make_tiny_model_dir(tmp_path, tiny_hf_tokenizer):
    """``make(arch, **config_overrides, save_kwargs=None, generation_config=None) ->
    (dir, hf_model)``: a tiny checkpoint saved with save_pretrained plus tokenizer."""

    def make(arch: str, *, save_kwargs: dict | None = None, generation_config: dict | None = None,
             **overrides):
        model = build_tiny_hf_model(arch, len(tiny_hf_tokenizer), **overrides)
        out = tmp_path / f"tiny-{arch}"
        model.save_pretrained(out, **(save_kwargs or {}))
        tiny_hf_tokenizer.save_pretrained(out)
        if generation_config is not None:
            (out / "generation_config.json").write_text(json.dumps(generation_config))
        return out, model

    return make


# ------------------------------------------------------- paged forward harness

class ModelHarness:
    """Runs a furca model through a KVCache, allocating slots by hand.

    ``forward([(prefix_slots, new_ids), ...], all_logits=...)`` runs one mixed batch:
    each request attends to ``prefix_slots`` (already filled) plus its new tokens.
    Returns ``[(logits (rows, V), slots_of_the_whole_sequence), ...]``; ``rows`` are all
    new tokens when ``all_logits`` else only the last one.
    """

    def __init__(self, model, config, num_slots: int = 2048, dtype=torch.float32):
        from furca.runtime.attention.torch_backend import TorchAttentionBackend
        from furca.runtime.kv_cache import KVCache

        self.model = model
        self.kv_cache = KVCache(num_slots, config.num_hidden_layers, config.num_key_value_heads,
                                config.head_dim, dtype)
        self.backend = TorchAttentionBackend()
        self.next_slot = 1

    def alloc(self, n: int) -> list[int]:
        slots = list(range(self.next_slot, self.next_slot + n))
        self.next_slot += n
        assert self.next_slot <= self.kv_cache.num_slots
        return slots

    def forward(self, requests: list[tuple[list[int], list[int]]], all_logits: bool = False):
        from furca.runtime.forward_batch import ForwardBatch

        input_ids, positions, kv_indices, out_loc, logits_rows, spans = [], [], [], [], [], []
        for prefix_slots, new_ids in requests:
            new_slots = self.alloc(len(new_ids))
            start = len(input_ids)
            input_ids += new_ids
            positions += range(len(prefix_slots), len(prefix_slots) + len(new_ids))
            kv_indices += prefix_slots + new_slots
            out_loc += new_slots
            rows = list(range(start, len(input_ids))) if all_logits else [len(input_ids) - 1]
            spans.append((len(logits_rows), len(logits_rows) + len(rows), prefix_slots + new_slots))
            logits_rows += rows
        batch = ForwardBatch.build(
            prefix_lens=[len(p) for p, _ in requests], qo_lens=[len(n) for _, n in requests],
            kv_indices=torch.tensor(kv_indices), out_cache_loc=torch.tensor(out_loc),
            logits_indices=torch.tensor(logits_rows), kv_cache=self.kv_cache, attn_backend=self.backend)
        logits = self.model(torch.tensor(input_ids), torch.tensor(positions), batch)
        assert logits.dtype == torch.float32 and logits.shape[0] == len(logits_rows)
        return [(logits[a:b], slots) for a, b, slots in spans]


@pytest.fixture
def model_harness():
    return ModelHarness


def hf_logits(hf_model, ids: list[int]) -> torch.Tensor:
    """Reference: transformers' logits for every position of ``ids`` (no cache)."""
    with torch.no_grad():
        return hf_model(torch.tensor([ids])).logits[0].float()


@pytest.fixture
def reference_logits():
    return hf_logits


def default_model_dir() -> Path:
    """The pulled default model (downloads ~93 MB once into $FURCA_HOME)."""
    from furca.runtime.pull import pull_default_model

    return pull_default_model(progress=False)


# ------------------------------------------------------- engine fixtures (engine/scheduler tests)

@pytest.fixture(scope="session")
def tiny_engine_model(tmp_path_factory):
    """``(LoadedModel, hf_model)`` for a tiny random Llama (context 256), loaded once per
    session; engines built on it share the weights (each has its own KV pool)."""
    from furca.runtime.loader import load_model

    tok = build_tiny_hf_tokenizer()
    hf_model = build_tiny_hf_model("llama", len(tok), seed=1)
    out = tmp_path_factory.mktemp("engine") / "tiny-llama"
    hf_model.save_pretrained(out)
    tok.save_pretrained(out)
    return load_model(out, dtype="float32", device="cpu"), hf_model


# ------------------------------------------------------------------ tiny GGUF

Q = gguf.GGMLQuantizationType

# HF tensor (per layer) -> (GGUF name, storage type)
_LAYER = {
    "input_layernorm.weight": ("attn_norm.weight", Q.F32),
    "self_attn.q_proj.weight": ("attn_q.weight", Q.Q4_1),
    "self_attn.k_proj.weight": ("attn_k.weight", Q.Q8_0),
    "self_attn.v_proj.weight": ("attn_v.weight", Q.Q4_1),
    "self_attn.o_proj.weight": ("attn_output.weight", Q.Q8_0),
    "post_attention_layernorm.weight": ("ffn_norm.weight", Q.F32),
    "mlp.gate_proj.weight": ("ffn_gate.weight", Q.Q4_1),
    "mlp.up_proj.weight": ("ffn_up.weight", Q.Q8_0),
    "mlp.down_proj.weight": ("ffn_down.weight", Q.Q4_1),
}
_GLOBAL = {
    "model.embed_tokens.weight": ("token_embd.weight", Q.Q8_0),
    "model.norm.weight": ("output_norm.weight", Q.F32),
    "lm_head.weight": ("output.weight", Q.F16),
}


def _llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _roundtrip(w: np.ndarray, qtype) -> np.ndarray:
    if qtype == Q.F32:
        return w
    if qtype == Q.F16:
        return w.astype(np.float16).astype(np.float32)
    return gguf.quants.dequantize(gguf.quants.quantize(w, qtype), qtype).reshape(w.shape)


def write_tiny_gguf(path, hf_model, hf_tokenizer, arch: str = "llama") -> dict[str, torch.Tensor]:
    """Write ``hf_model`` (llama or qwen2) as a GGUF; return the HF state dict the GGUF
    really holds (each weight after its quantization round trip, before permutation)."""
    cfg = hf_model.config
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    writer.add_rope_dimension_count(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    writer.add_vocab_size(cfg.vocab_size)
    vocab = hf_tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    merges = json.loads(hf_tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t.startswith("<|") else 1 for t in tokens])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_chat_template(hf_tokenizer.chat_template)

    expected = {}
    for name, tensor in hf_model.state_dict().items():
        w = tensor.float().numpy()
        if name in _GLOBAL:
            gguf_name, qtype = _GLOBAL[name]
        else:
            layer, rest = name.removeprefix("model.layers.").split(".", 1)
            is_bias = rest.endswith(".bias")
            gguf_name, qtype = _LAYER[rest.replace(".bias", ".weight")]
            if is_bias:
                gguf_name, qtype = gguf_name.replace(".weight", ".bias"), Q.F32
            gguf_name = f"blk.{layer}.{gguf_name}"
        # quantization blocks run along rows, so permuting rows commutes with it
        expected[name] = torch.from_numpy(_roundtrip(w, qtype).copy())
        if arch == "llama" and name.endswith(("q_proj.weight", "q_proj.bias")):
            w = _llama_cpp_permute(w, cfg.num_attention_heads)
        elif arch == "llama" and name.endswith(("k_proj.weight", "k_proj.bias")):
            w = _llama_cpp_permute(w, cfg.num_key_value_heads)
        if qtype == Q.F32:
            writer.add_tensor(gguf_name, np.ascontiguousarray(w))
        elif qtype == Q.F16:
            writer.add_tensor(gguf_name, w.astype(np.float16))
        else:
            writer.add_tensor(gguf_name, gguf.quants.quantize(w, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected


@pytest.fixture
def tiny_gguf(tmp_path, make_tiny_model_dir, tiny_hf_tokenizer):
    """``(path, hf_model)``: a tiny llama GGUF and transformers holding its weights."""
    _, hf = make_tiny_model_dir("llama", rope_scaling=None, tie_word_embeddings=False)
    path = tmp_path / "tiny-llama.Q4_1.gguf"
    expected = write_tiny_gguf(path, hf, tiny_hf_tokenizer)
    hf.load_state_dict(expected)
    return path, hf


@pytest.fixture
def write_gguf():
    """``write(path, hf_model, hf_tokenizer, arch="llama") -> expected state dict``."""
    return write_tiny_gguf
