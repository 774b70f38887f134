"""Reading llama.cpp GGUF files: config from metadata, tensors dequantized to fp32 with
HF names (undoing the q/k row permutation llama.cpp's converter applies to Llama),
and the gpt2-style BPE tokenizer rebuilt as a ``tokenizers`` tokenizer.

RoPE: plain, linear scaling (``rope.scaling.type``), or per-frequency factors in the
tensor ``rope_freqs.weight``, which is how llama.cpp's converter stores Llama-3.x's
llama3 scaling (``rope.scaling.type`` absent). The factors are config, not a weight:
they become furca's ``freq_factors`` rope type (inverse frequency i divided by factor
i, as llama.cpp does), so such files run exactly, but cannot be converted to an HF
directory (transformers has no rope type holding explicit factors).

``read_gguf`` is used both to load a ``.gguf`` directly and by ``convert_gguf_to_hf``
(the one-off conversion ``furca pull`` does, so transformers can load the same weights).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from furca.errors import ModelLoadError, UnsupportedModelError
from furca.runtime.model_config import FREQ_FACTORS_ROPE_TYPE
from furca.runtime.quant.gguf_blocks import UNQUANTIZED, to_groups
from furca.runtime.quant.groups import QuantGroups

# GGUF general.architecture -> (HF architecture, model_type, q/k permuted by llama.cpp)
_ARCHS = {
    "llama": ("LlamaForCausalLM", "llama", True),
    "qwen2": ("Qwen2ForCausalLM", "qwen2", False),
    "qwen3": ("Qwen3ForCausalLM", "qwen3", False),
}
_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK_RE = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_ROPE_FREQS = "rope_freqs.weight"  # llama3 rope factors: read into the config, not a weight

# llama.cpp pre-tokenizer names -> how the text is split before BPE
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_PRE_DIGITS_GPT2 = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}
_PRE_GPT2 = {"gpt2", "gpt-2", "default", "phi-2", "olmo", "jina-es", "jina-de"}
_PRE_LLAMA3 = {"llama3", "llama-bpe", "llama-v3", "falcon3", "pixtral", "smaug-bpe"}
_PRE_QWEN2 = {"qwen2", "deepseek-r1-qwen", "megrez"}

_TOKEN_CONTROL, _TOKEN_USER_DEFINED = 3, 4


@dataclass
class GGUFModel:
    path: Path
    hf_config: dict[str, Any]  # config.json-style
    generation_config: dict[str, Any]  # generation_config.json-style
    hf_tokenizer: Any  # transformers PreTrainedTokenizerFast
    _reader: Any
    _permute_qk: bool

    def tensors(self, keep_quantized: bool = False) -> Iterator[tuple[str, torch.Tensor | QuantGroups]]:
        """``(hf_name, weight)`` for every weight tensor, read one at a time
        (``rope_freqs.weight`` is not one: ``read_gguf`` put it in ``hf_config``).

        By default every weight is an fp32 tensor (dequantized). With ``keep_quantized``,
        a 2-D weight of a quantized type in ``gguf_blocks.SUPPORTED`` is a ``QuantGroups``
        holding the file's own codes and scales (its ``dequantize()`` equals the fp32
        tensor bit for bit, q/k row un-permutation included); float tensors (F32, F16,
        BF16) stay fp32 tensors, and a 2-D weight of any other quantized type raises
        ``UnsupportedModelError`` naming the tensor and the type."""
        heads = self.hf_config["num_attention_heads"]
        kv_heads = self.hf_config["num_key_value_heads"]
        for t in self._reader.tensors:
            if t.name == _ROPE_FREQS:
                continue
            name = _hf_tensor_name(t.name)
            if keep_quantized and t.tensor_type.name not in UNQUANTIZED and len(t.shape) == 2:
                weight = _quant_groups(t)
            else:
                weight = torch.from_numpy(_dequantize(t))
            if self._permute_qk and name.endswith(("q_proj.weight", "q_proj.bias")):
                weight = _unpermute_rows(weight, heads)
            elif self._permute_qk and name.endswith(("k_proj.weight", "k_proj.bias")):
                weight = _unpermute_rows(weight, kv_heads)
            yield name, weight

    def tensor_types(self) -> dict[str, str]:
        """``{hf_name: GGML type name}`` ("Q4_1", "F32", ...) for every weight tensor,
        from the file's tensor index alone (no tensor data is read)."""
        return {_hf_tensor_name(t.name): t.tensor_type.name for t in self._reader.tensors if t.name != _ROPE_FREQS}


def _quant_groups(t: Any) -> QuantGroups:
    """A reader tensor of a quantized type as ``QuantGroups`` in (N, K) row order."""
    try:
        return to_groups(t.data, t.tensor_type, tuple(int(d) for d in reversed(t.shape.tolist())))
    except ModelLoadError as e:  # UnsupportedModelError included: the same class, naming the tensor
        raise type(e)(f"GGUF tensor {t.name!r}: {e}") from None


def _unpermute_rows(w: torch.Tensor | QuantGroups, n_head: int) -> torch.Tensor | QuantGroups:
    """``_unpermute`` on an fp32 tensor, or the same row order taken from ``QuantGroups``."""
    if isinstance(w, QuantGroups):
        return w.take_rows(_unpermute(torch.arange(w.shape[0]), n_head))
    return _unpermute(w, n_head)


def _dequantize(t: Any) -> np.ndarray:
    """A reader tensor as a writable fp32 array in numpy (row-major) shape order."""
    from gguf.quants import dequantize

    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    try:
        array = dequantize(t.data, t.tensor_type).reshape(shape)
    except NotImplementedError as e:
        raise UnsupportedModelError(
            f"GGUF tensor {t.name!r} has quantization {t.tensor_type.name}, which gguf-py "
            f"cannot dequantize: {e}") from None
    return np.array(array, dtype=np.float32, order="C")  # a writable copy


def _unpermute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Inverse of llama.cpp's ``permute`` (interleaved -> rotate-half rows per head)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _hf_tensor_name(name: str) -> str:
    if name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[name]
    m = _BLOCK_RE.fullmatch(name)
    if m and m.group(2) in _BLOCK_TENSORS:
        return f"model.layers.{m.group(1)}.{_BLOCK_TENSORS[m.group(2)]}.{m.group(3)}"
    raise UnsupportedModelError(f"GGUF tensor {name!r} is not part of a supported Llama-family model")


def read_gguf(path: str | Path) -> GGUFModel:
    """Parse metadata and build config + tokenizer; tensors are read lazily."""
    from gguf import GGUFReader

    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"GGUF file not found: {path}")
    try:
        reader = GGUFReader(str(path))
    except Exception as e:  # gguf raises ValueError/struct.error/... on bad files
        raise ModelLoadError(f"cannot read GGUF file {path}: {e}") from e
    meta = _Metadata(reader, path)
    arch = meta.get("general.architecture")
    if arch not in _ARCHS:
        raise UnsupportedModelError(
            f"GGUF architecture {arch!r} is not supported (supported: {', '.join(_ARCHS)})")
    hf_arch, model_type, permute_qk = _ARCHS[arch]
    names = {t.name: t for t in reader.tensors}
    if "token_embd.weight" not in names:
        raise ModelLoadError(f"GGUF file {path} is missing tensor 'token_embd.weight'")
    vocab_size = int(names["token_embd.weight"].shape[1])
    hidden = int(meta.get(f"{arch}.embedding_length"))
    num_heads = int(meta.get(f"{arch}.attention.head_count"))
    head_dim = int(meta.get(f"{arch}.attention.key_length", hidden // num_heads))
    rope_dim = int(meta.get(f"{arch}.rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        raise UnsupportedModelError(f"GGUF model with partial rotary embedding ({rope_dim} of {head_dim})")
    bos = meta.get("tokenizer.ggml.bos_token_id", None)
    eos = meta.get("tokenizer.ggml.eos_token_id", None)
    eos_ids = [int(i) for i in dict.fromkeys(
        [eos, meta.get("tokenizer.ggml.eot_token_id", None), meta.get("tokenizer.ggml.eom_token_id", None)])
        if i is not None]
    has_qkv_bias = "blk.0.attn_q.bias" in names
    hf_config = {
        "architectures": [hf_arch],
        "model_type": model_type,
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "intermediate_size": int(meta.get(f"{arch}.feed_forward_length")),
        "num_hidden_layers": int(meta.get(f"{arch}.block_count")),
        "num_attention_heads": num_heads,
        "num_key_value_heads": int(meta.get(f"{arch}.attention.head_count_kv", num_heads)),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": float(meta.get(f"{arch}.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        "rope_scaling": _rope_scaling(meta, arch, names.get(_ROPE_FREQS), head_dim, path),
        "max_position_embeddings": int(meta.get(f"{arch}.context_length")),
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": has_qkv_bias if arch != "qwen2" else True,
        "bos_token_id": None if bos is None else int(bos),
        "eos_token_id": eos_ids[0] if len(eos_ids) == 1 else (eos_ids or None),
        "torch_dtype": "float32",
    }
    if model_type == "qwen2":
        hf_config.pop("attention_bias")
    generation_config = {k: hf_config[k] for k in ("bos_token_id", "eos_token_id")}
    pad = meta.get("tokenizer.ggml.padding_token_id", None)
    if pad is not None:
        generation_config["pad_token_id"] = hf_config["pad_token_id"] = int(pad)
    hf_tokenizer = _build_tokenizer(meta)
    hf_tokenizer.model_max_length = hf_config["max_position_embeddings"]
    return GGUFModel(path, hf_config, generation_config, hf_tokenizer, reader, permute_qk)


def _rope_scaling(meta: "_Metadata", arch: str, rope_freqs: Any, head_dim: int,
                  path: Path) -> dict[str, Any] | None:
    """HF-style ``rope_scaling`` from ``rope.scaling.*`` metadata and the optional
    ``rope_freqs.weight`` tensor (furca's ``freq_factors`` rope type)."""
    kind = meta.get(f"{arch}.rope.scaling.type", "none")
    if kind not in ("none", "linear"):
        raise UnsupportedModelError(f"GGUF rope scaling type {kind!r} is not supported (only linear)")
    if rope_freqs is not None:
        if kind != "none":
            raise UnsupportedModelError(
                f"GGUF file {path} has both rope scaling type {kind!r} and per-frequency rope factors "
                f"({_ROPE_FREQS}); furca supports either, not both")
        return {"rope_type": FREQ_FACTORS_ROPE_TYPE, "freq_factors": _rope_freq_factors(rope_freqs, head_dim, path)}
    if kind == "none":
        return None
    return {"rope_type": "linear", "factor": float(meta.get(f"{arch}.rope.scaling.factor"))}


def _rope_freq_factors(t: Any, head_dim: int, path: Path) -> list[float]:
    """The ``head_dim / 2`` positive factors of ``rope_freqs.weight``, as Python floats."""
    n = head_dim // 2
    shape = [int(d) for d in t.shape.tolist()]
    if shape != [n]:
        raise ModelLoadError(
            f"GGUF file {path}: tensor {_ROPE_FREQS!r} has shape {shape}, but a model with head_dim "
            f"{head_dim} needs one factor per rotary frequency, shape [{n}]")
    factors = _dequantize(t)
    if not (np.isfinite(factors).all() and (factors > 0).all()):
        raise ModelLoadError(f"GGUF file {path}: tensor {_ROPE_FREQS!r} holds non-positive or non-finite factors")
    return [float(f) for f in factors]


class _Metadata:
    _MISSING = object()

    def __init__(self, reader: Any, path: Path):
        self.reader, self.path = reader, path

    def get(self, key: str, default: Any = _MISSING) -> Any:
        field = self.reader.fields.get(key)
        if field is None:
            if default is self._MISSING:
                raise ModelLoadError(f"GGUF file {self.path} lacks the metadata key {key!r}")
            return default
        return field.contents()


def _build_tokenizer(meta: _Metadata) -> Any:
    """The gpt2-style (byte-level BPE) tokenizer stored in GGUF metadata."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise UnsupportedModelError(
            f"GGUF tokenizer model {kind!r} is not supported (only 'gpt2' byte-level BPE)")
    tokens: list[str] = meta.get("tokenizer.ggml.tokens")
    types: list[int] = meta.get("tokenizer.ggml.token_type", [1] * len(tokens))
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, fuse_unk=False, byte_fallback=False))
    pre = meta.get("tokenizer.ggml.pre", "default")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _PRE_DIGITS_GPT2:
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre in _PRE_GPT2:
        tok.pre_tokenizer = byte_level
    elif pre in _PRE_LLAMA3 or pre in _PRE_QWEN2:
        split = _LLAMA3_SPLIT if pre in _PRE_LLAMA3 else _QWEN2_SPLIT
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        raise UnsupportedModelError(f"GGUF pre-tokenizer {pre!r} is not supported")
    tok.decoder = decoders.ByteLevel()
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, ty in zip(tokens, types) if ty == _TOKEN_USER_DEFINED])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == _TOKEN_CONTROL])

    def token(key: str) -> str | None:
        i = meta.get(key, None)
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

    bos, eos = token("tokenizer.ggml.bos_token_id"), token("tokenizer.ggml.eos_token_id")
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False)) and bos is not None
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False)) and eos is not None
    steps = [processors.ByteLevel(trim_offsets=False)]
    if add_bos or add_eos:
        single = " ".join([*(["$bos"] if add_bos else []), "$A:0", *(["$eos"] if add_eos else [])])
        pair = " ".join([single, *(["$bos:1"] if add_bos else []), "$B:1", *(["$eos:1"] if add_eos else [])])
        special = [(t, tokens.index(t)) for t in dict.fromkeys(
            [*([bos] if add_bos else []), *([eos] if add_eos else [])])]
        template = processors.TemplateProcessing(
            single=single.replace("$bos", bos or "").replace("$eos", eos or ""),
            pair=pair.replace("$bos", bos or "").replace("$eos", eos or ""),
            special_tokens=special)
        steps.append(template)
    tok.post_processor = processors.Sequence(steps)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos, eos_token=eos,
        unk_token=token("tokenizer.ggml.unknown_token_id"),
        pad_token=token("tokenizer.ggml.padding_token_id"),
        chat_template=meta.get("tokenizer.chat_template", None),
        clean_up_tokenization_spaces=False,
    )


def convert_gguf_to_hf(gguf_path: str | Path, out_dir: str | Path, *, progress: bool = False) -> None:
    """Write an HF-format directory (config.json, fp32 model.safetensors, tokenizer
    files with the chat template, generation_config.json) that both furca and
    transformers load offline. ``out_dir`` must exist and be empty."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    model = read_gguf(gguf_path)
    if (model.hf_config["rope_scaling"] or {}).get("rope_type") == FREQ_FACTORS_ROPE_TYPE:
        raise UnsupportedModelError(
            f"GGUF file {gguf_path} stores its rope scaling as per-frequency factors ({_ROPE_FREQS}), "
            "which a transformers config.json cannot express; load the .gguf directly instead")
    with open(out_dir / "config.json", "w", encoding="utf-8") as f:
        json.dump(model.hf_config, f, indent=2)
    with open(out_dir / "generation_config.json", "w", encoding="utf-8") as f:
        json.dump(model.generation_config, f, indent=2)
    tensors = model.tensors()
    if progress:
        from tqdm import tqdm

        tensors = tqdm(tensors, total=len(model._reader.tensors), desc="dequantizing tensors", unit="tensor")
    state = {name: t for name, t in tensors}
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    del state
    hf = model.hf_tokenizer
    hf.save_pretrained(str(out_dir))
    cfg_path = out_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    if hf.chat_template:
        cfg["chat_template"] = hf.chat_template  # also in chat_template.jinja (transformers 5)
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False), encoding="utf-8")
