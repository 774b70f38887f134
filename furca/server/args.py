"""`ServerArgs`: every knob of `furca serve`, one frozen, validated dataclass.

The engine options are passed to `Engine(model, **args.engine_kwargs())`; the rest
belong to the HTTP layer (admission, auth, logging, shutdown).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from furca.errors import ConfigError


@dataclass(frozen=True)
class ServerArgs:
    model: str | None = None  # None: the default model
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None
    served_model_name: str | None = None  # default: the model directory's name
    chat_template: str | None = None  # a jinja file path or the template text
    # engine
    context_length: int | None = None
    max_running_requests: int = 64
    max_total_tokens: int | None = None
    chunked_prefill_size: int | None = 2048
    schedule_policy: str = "lpm"
    dtype: str = "auto"
    linear_dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    device: str = "auto"
    # HTTP layer
    max_queued_requests: int | None = None  # None: unbounded; past it, 429
    grammar_timeout: float = 10.0  # seconds a constraint may take to compile
    shutdown_grace_period: float = 30.0  # SIGTERM: seconds running requests may take
    log_requests: bool = False
    log_level: str = "info"

    def __post_init__(self) -> None:
        if not isinstance(self.port, int) or not 0 <= self.port < 65536:
            raise ConfigError(f"port must be an int in [0, 65536), got {self.port!r}")
        if self.max_queued_requests is not None and self.max_queued_requests < 0:
            raise ConfigError(f"max_queued_requests must be >= 0, got {self.max_queued_requests}")
        if self.api_key is not None and not self.api_key:
            raise ConfigError("api_key must not be empty (leave it out to disable auth)")
        for name in ("grammar_timeout", "shutdown_grace_period"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")

    def engine_kwargs(self) -> dict[str, Any]:
        keys = ("context_length", "max_running_requests", "max_total_tokens", "chunked_prefill_size",
                "schedule_policy", "dtype", "linear_dtype", "kv_cache_dtype", "device")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]
