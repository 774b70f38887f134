"""EngineConfig: every knob of the runtime in one frozen, validated dataclass.

`Engine(model, **config)` builds one with `EngineConfig.from_kwargs`, which rejects
unknown keys by name. Nothing here touches a device; sizing happens in `memory.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from furca.errors import ConfigError
from furca.runtime.attention import registry as attention_registry

_DTYPES = ("auto", "float32", "float16", "bfloat16")
_KV_DTYPES = _DTYPES + ("fp8_e4m3", "fp8")  # fp8: an alias of fp8_e4m3 (float8_e4m3fn)
_POLICIES = ("lpm", "fcfs")
_QUANTIZATIONS = ("auto", "none", "int8", "int4", "fp8")
_SPEC_ALGORITHMS = ("ngram", "draft")


def _opt(default: Any, help: str, **cli: Any) -> Any:
    """A field with its help text and, for the command line, optional ``flag=`` (the flag's
    name when not ``--field-name``) and ``choices=``; `furca.cli_flags` turns every field
    into a flag of ``furca serve`` and ``furca generate``."""
    return field(default=default, metadata={"help": help, **cli})


@dataclass(frozen=True)
class EngineConfig:
    # model
    dtype: str = _opt("auto", "activations, norms, embeddings and the LM head "
                              "(auto: bfloat16 on CUDA, float32 elsewhere)", choices=_DTYPES)
    linear_dtype: str = _opt("auto", "the decoder layers' linear projections, weights and products (auto: bfloat16 "
                                     "where dtype is auto and resolves to float32 on a CPU with native bf16 dot "
                                     "products, else dtype)", choices=_DTYPES)
    kv_cache_dtype: str = _opt("auto", "the KV cache (auto: the projections' dtype: K and V come out of them; "
                                       "fp8_e4m3 or fp8: 1 byte per element, saturated to +-448, read in the "
                                       "activations' dtype; see docs/quantization.md)", choices=_KV_DTYPES)
    quantization: str = _opt("auto", "weights: none, int8 (per output channel), int4 (group-wise; see "
                                     "quantization_group_size), fp8 (e4m3 per output channel, CUDA) or auto (a GGUF file's or an AWQ/GPTQ checkpoint's "
                                     "own quantization kept, none for a float checkpoint)", choices=_QUANTIZATIONS)
    quantization_group_size: int = _opt(32, "weights per scale and zero of int4 quantization",
                                        choices=(32, 64, 128))
    device: str = _opt("auto", "cpu, cuda or cuda:N (auto: cuda if available, else cpu)")
    tp_size: int = _opt(1, "tensor-parallel ranks: one process per rank, each holding 1/N of every layer (the "
                           "engine spawns N-1 workers; float weights only; see docs/scale.md)", flag="--tp")
    nnodes: int = _opt(1, "machines the tensor-parallel ranks span, tp_size / nnodes ranks on each (start "
                          "`furca serve` with the same flags on each, with its own --node-rank)")
    node_rank: int = _opt(0, "this machine's index among nnodes: 0 runs the engine and the server, the others "
                             "only their ranks")
    dist_init_addr: str | None = _opt(None, "HOST:PORT on node 0 where the ranks meet (needed with nnodes > 1; "
                                            "default: a free local port)")
    context_length: int | None = _opt(None, "the longest prompt + output in tokens; may only shrink the "
                                            "model's (default: the model's)")
    attention_backend: str = _opt("auto", "auto: triton on CUDA when installed, torch elsewhere",
                                  choices=attention_registry.config_choices())
    deterministic: bool = _opt(False, "batch-invariant outputs: greedy and seeded sampling give bit-identical tokens "
                                      "and logprobs whatever the batch, chunking or cache state (CPU, float "
                                      "weights; attention_backend auto or invariant; slower, see docs/runtime.md)")
    # KV pool: exactly one of these decides its size (max_total_tokens wins)
    max_total_tokens: int | None = _opt(None, "KV pool capacity in tokens; wins over the two below (default: a "
                                              "fraction of free memory, at most max_running_requests x context)")
    kv_cache_bytes: int | None = _opt(None, "KV pool size in bytes")
    kv_cache_fraction: float | None = _opt(None, "KV pool size as a fraction of free device memory (CPU: "
                                                 "MemAvailable; default 0.8 on CUDA, 0.1 on CPU)")
    # scheduling
    max_running_requests: int = _opt(64, "requests decoding at once (more wait in the engine's queue)")
    chunked_prefill_size: int | None = _opt(2048, "per-step prefill token budget; long prompts are computed in "
                                                  "chunks of it (-1: chunking off)")
    max_prefill_tokens: int = _opt(16384, "per-step prefill token budget when chunking is off (a longer prompt "
                                          "runs alone)")
    max_queue_time: float | None = _opt(None, "seconds a request may wait in the engine's queue to be admitted the "
                                              "first time; past it, it fails with QueueTimeoutError (the server "
                                              "answers 503 with Retry-After); a request retracted after it ran is not "
                                              "timed out (default: none, no limit)")
    schedule_policy: str = _opt("lpm", "admission order: lpm (longest cached prefix first) or fcfs",
                                choices=_POLICIES)
    disable_radix_cache: bool = _opt(False, "no prefix sharing: every prompt is computed in full")
    pinned_share: float = _opt(0.5, "most of the KV pool sessions may pin (their programs' KV kept between calls), "
                                    "in [0, 1); a pin past it is refused and the request runs unpinned")
    session_ttl: float = _opt(300.0, "seconds a session (and its pinned KV) lives after its last call unless "
                                     "closed; open_session's timeout overrides it per session")
    in_batch_prefix_min: int = _opt(32, "defer a request sharing this many tokens with one admitted this step, "
                                        "so the shared prefix is computed once")
    init_new_token_ratio: float = _opt(0.7, "fraction of max_new_tokens reserved in the KV pool for admitted "
                                            "requests (reset to this after a retraction)")
    min_new_token_ratio: float = _opt(0.1, "the reserve fraction never decays below this")
    new_token_ratio_decay: float = _opt(0.001, "the reserve fraction's decay per decode step")
    decode_reserve_clip: int = _opt(4096, "reserve at most this many decode tokens per request")
    # constrained decoding: append a grammar's forced text without sampling (SGLang's
    # compressed FSM), re-tokenized at the boundary
    enable_jump_forward: bool = _opt(True, "append a grammar's forced text without sampling (off: every token "
                                           "of a constrained output is sampled)", flag="--disable-jump-forward")
    overlap_masks: bool = _opt(True, "fill grammar token masks on worker threads while the forward pass runs (off: "
                                     "after it, on the scheduler thread)", flag="--disable-overlap-masks")
    early_masks: bool = _opt(True, "with overlap_masks, start a request's next grammar mask as soon as its "
                                   "sampled and forced tokens are accepted (off: at the next forward pass)",
                             flag="--disable-early-masks")
    mask_wait_ms: float = _opt(2.0, "with overlap_masks, how long a step waits after its forward pass for a "
                                    "grammar mask; a request whose mask is later samples one step later")
    # speculative decoding (furca/runtime/speculative): drafts verified in one extend pass
    speculative_algorithm: str | None = _opt(None, "ngram: draft tokens from the longest suffix match of each request's "
                                                   "own tokens (prompt lookup); draft: from a smaller model sharing "
                                                   "the tokenizer (speculative_draft_model); verified by the model in "
                                                   "one pass (default: none, one token per step)",
                                             choices=_SPEC_ALGORITHMS)
    speculative_draft_model: str | None = _opt(None, "with speculative_algorithm draft: the draft model's directory "
                                                     "(greedy drafts; its own KV pool and radix cache)")
    speculative_num_draft_tokens: int = _opt(6, "most draft tokens per request and step (each request's draft length "
                                                "adapts below it to its acceptance)")
    speculative_ngram_min: int = _opt(1, "ngram drafting: the shortest suffix match that proposes a draft")
    speculative_ngram_max: int = _opt(4, "ngram drafting: the longest suffix match tried (longest first)")
    # sampling / misc
    random_seed: int | None = _opt(None, "seed torch's global generator (what requests without a seed draw "
                                         "from) at start")
    check_memory: bool = _opt(True, "strict KV accounting check whenever the engine goes idle (as SGLang)",
                              flag="--disable-check-memory")
    log_capacity: bool = _opt(True, "log the KV pool's size at start", flag="--disable-log-capacity")
    decode_log_interval: int = _opt(40, "log a one-line batch summary (running, queued, tokens, cache hits, "
                                        "token usage, throughput) every this many steps at info level; 0: off")

    def __post_init__(self) -> None:
        def positive(name: str, value: Any, allow_none: bool = True) -> None:
            if value is None and allow_none:
                return
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive int, got {value!r}")

        for name, allowed in (("dtype", _DTYPES), ("linear_dtype", _DTYPES), ("kv_cache_dtype", _KV_DTYPES)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.quantization not in _QUANTIZATIONS:
            raise ConfigError(f"quantization must be one of {_QUANTIZATIONS}, got {self.quantization!r}")
        if self.quantization_group_size not in (32, 64, 128):
            raise ConfigError(f"quantization_group_size must be 32, 64 or 128, got {self.quantization_group_size!r}")
        if not isinstance(self.device, str) or not self.device:
            raise ConfigError(f"device must be a string like 'cpu', 'cuda', 'cuda:1' or 'auto', got {self.device!r}")
        attention_registry.check_name(self.attention_backend)
        _check_deterministic(self)
        _check_tensor_parallel(self)
        positive("context_length", self.context_length)
        if self.max_total_tokens is not None:
            positive("max_total_tokens", self.max_total_tokens)
            if self.max_total_tokens < 2:
                raise ConfigError(f"max_total_tokens must be >= 2, got {self.max_total_tokens}")
        positive("kv_cache_bytes", self.kv_cache_bytes)
        if self.kv_cache_fraction is not None and not (0.0 < float(self.kv_cache_fraction) <= 1.0):
            raise ConfigError(f"kv_cache_fraction must be in (0, 1], got {self.kv_cache_fraction!r}")
        if self.kv_cache_bytes is not None and self.kv_cache_fraction is not None:
            raise ConfigError("give kv_cache_bytes or kv_cache_fraction, not both")
        positive("max_running_requests", self.max_running_requests, allow_none=False)
        if self.chunked_prefill_size == -1:
            object.__setattr__(self, "chunked_prefill_size", None)
        positive("chunked_prefill_size", self.chunked_prefill_size)
        positive("max_prefill_tokens", self.max_prefill_tokens, allow_none=False)
        if self.max_queue_time is not None:
            t = self.max_queue_time
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
                raise ConfigError(f"max_queue_time must be a number of seconds > 0 (or None: no limit), got {t!r}")
        if self.schedule_policy not in _POLICIES:
            raise ConfigError(f"schedule_policy must be one of {_POLICIES}, got {self.schedule_policy!r}")
        share = self.pinned_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share < 1.0:
            raise ConfigError(f"pinned_share must be a fraction in [0, 1), got {share!r}")
        ttl = self.session_ttl
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl) or ttl <= 0:
            raise ConfigError(f"session_ttl must be a number of seconds > 0, got {ttl!r}")
        positive("in_batch_prefix_min", self.in_batch_prefix_min, allow_none=False)
        positive("decode_reserve_clip", self.decode_reserve_clip, allow_none=False)
        for name in ("init_new_token_ratio", "min_new_token_ratio"):
            value = getattr(self, name)
            if not (0.0 <= value <= 1.0):
                raise ConfigError(f"{name} must be in [0, 1], got {value!r}")
        if self.min_new_token_ratio > self.init_new_token_ratio:
            raise ConfigError("min_new_token_ratio must not exceed init_new_token_ratio")
        if self.new_token_ratio_decay < 0:
            raise ConfigError(f"new_token_ratio_decay must be >= 0, got {self.new_token_ratio_decay!r}")
        if not isinstance(self.enable_jump_forward, bool):
            raise ConfigError(f"enable_jump_forward must be true or false, got {self.enable_jump_forward!r}")
        for name in ("overlap_masks", "early_masks"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        w = self.mask_wait_ms
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise ConfigError(f"mask_wait_ms must be a number of milliseconds >= 0, got {w!r}")
        _check_speculative(self)
        if self.random_seed is not None and not isinstance(self.random_seed, int):
            raise ConfigError(f"random_seed must be an int, got {self.random_seed!r}")
        if not isinstance(self.decode_log_interval, int) or self.decode_log_interval < 0:
            raise ConfigError(f"decode_log_interval must be an int >= 0 (0: off), got {self.decode_log_interval!r}")

    @property
    def prefill_budget(self) -> int:
        """Most new prompt tokens one step computes."""
        return self.chunked_prefill_size or self.max_prefill_tokens

    @property
    def is_chunked(self) -> bool:
        return self.chunked_prefill_size is not None

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> "EngineConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(f"unknown engine option(s) {unknown}; known: {sorted(known)}")
        return cls(**kwargs)


def _check_speculative(config: EngineConfig) -> None:
    if config.speculative_algorithm is not None and config.speculative_algorithm not in _SPEC_ALGORITHMS:
        raise ConfigError(f"speculative_algorithm must be one of {_SPEC_ALGORITHMS} or None, got "
                          f"{config.speculative_algorithm!r}")
    for name in ("speculative_num_draft_tokens", "speculative_ngram_min", "speculative_ngram_max"):
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{name} must be a positive int, got {value!r}")
    if config.speculative_ngram_min > config.speculative_ngram_max:
        raise ConfigError(f"speculative_ngram_min ({config.speculative_ngram_min}) must not exceed "
                          f"speculative_ngram_max ({config.speculative_ngram_max})")


def _check_tensor_parallel(config: EngineConfig) -> None:
    for name in ("tp_size", "nnodes"):
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{name} must be a positive int, got {value!r}")
    if not isinstance(config.node_rank, int) or not 0 <= config.node_rank < config.nnodes:
        raise ConfigError(f"node_rank must be in [0, nnodes={config.nnodes}), got {config.node_rank!r}")
    if config.tp_size % config.nnodes:
        raise ConfigError(f"tp_size ({config.tp_size}) must be a multiple of nnodes ({config.nnodes})")
    addr = config.dist_init_addr
    if addr is not None:
        host, _, port = str(addr).rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"dist_init_addr must be HOST:PORT, got {addr!r}")
    elif config.nnodes > 1:
        raise ConfigError("nnodes > 1 needs dist_init_addr (HOST:PORT on node 0, reachable from every node)")


def _check_deterministic(config: EngineConfig) -> None:
    """The combinations ``deterministic=True`` supports (the loaded model is checked too:
    `furca.runtime.batch_invariant.check_model`)."""
    if not isinstance(config.deterministic, bool):
        raise ConfigError(f"deterministic must be true or false, got {config.deterministic!r}")
    if not config.deterministic:
        return
    if config.attention_backend not in ("auto", "invariant"):
        raise ConfigError(f"deterministic=True computes attention with the 'invariant' backend: attention_backend "
                          f"must be 'auto' or 'invariant', got {config.attention_backend!r}")
    if config.quantization not in ("auto", "none"):
        raise ConfigError(f"deterministic=True needs float weights: quantization must be 'auto' or 'none', got "
                          f"{config.quantization!r}")
    for name in ("dtype", "linear_dtype", "kv_cache_dtype"):
        if getattr(config, name) == "float16":
            raise ConfigError(f"deterministic=True supports float32 and bfloat16: {name} must not be 'float16'")
