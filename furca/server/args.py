"""`ServerArgs`: every knob of `furca serve`, one frozen, validated dataclass.

The engine's options are one `EngineConfig` (``args.engine``), passed on whole to
`Engine(model, **args.engine_kwargs())`; `ServerArgs.from_kwargs` takes both kinds flat
(what the command line gives) and rejects unknown names. The rest belong to the HTTP
layer (admission, auth, CORS, logging, shutdown).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from furca.errors import ConfigError
from furca.runtime.config import EngineConfig


@dataclass(frozen=True)
class ServerArgs:
    model: str | None = None  # None: the default model
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None
    served_model_name: str | None = None  # default: the model directory's name
    chat_template: str | None = None  # a jinja file path or the template text
    # the engine: every EngineConfig option (each has a `furca serve` flag)
    engine: EngineConfig = field(default_factory=EngineConfig)
    # HTTP layer
    max_queued_requests: int | None = None  # None: unbounded; past it, 429
    grammar_timeout: float = 10.0  # seconds a constraint may take to compile
    grammar_workers: int = 2  # threads that compile constraints (a pool of their own)
    max_request_bytes: int = 16 * 1024 * 1024  # request bodies past it get 413
    public_docs: bool = False  # with api_key: /docs, /redoc, /openapi.json open without the key
    expose_model_path: bool = False  # show the model's filesystem path in /v1/models, /server_info
    shutdown_grace_period: float = 30.0  # SIGTERM: seconds running requests may take
    log_requests: bool = False
    log_level: str = "info"
    # OpenAI routes: an object schema without additionalProperties admits undeclared members
    # (JSON Schema's lax reading); default False, only declared properties (OpenAI strict)
    json_schema_allow_extra_properties: bool = False
    # CORS (Starlette's CORSMiddleware); no origins: off, a browser's preflight gets 405
    allowed_origins: tuple[str, ...] = ()
    allowed_methods: tuple[str, ...] = ("*",)
    allowed_headers: tuple[str, ...] = ("*",)
    allow_credentials: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.engine, EngineConfig):
            raise ConfigError(f"engine must be an EngineConfig, got {type(self.engine).__name__}")
        for name in ("allowed_origins", "allowed_methods", "allowed_headers"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise ConfigError(f"{name} must be a list of non-empty strings, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        if not isinstance(self.port, int) or not 0 <= self.port < 65536:
            raise ConfigError(f"port must be an int in [0, 65536), got {self.port!r}")
        if self.max_queued_requests is not None and self.max_queued_requests < 0:
            raise ConfigError(f"max_queued_requests must be >= 0, got {self.max_queued_requests}")
        if self.api_key is not None and not self.api_key:
            raise ConfigError("api_key must not be empty (leave it out to disable auth)")
        if not isinstance(self.json_schema_allow_extra_properties, bool):
            raise ConfigError("json_schema_allow_extra_properties must be true or false, "
                              f"got {self.json_schema_allow_extra_properties!r}")
        for name in ("grammar_workers", "max_request_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("grammar_timeout", "shutdown_grace_period"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")

    def engine_kwargs(self) -> dict[str, Any]:
        """Every `EngineConfig` option, for ``Engine(model, **engine_kwargs())``."""
        return {f.name: getattr(self.engine, f.name) for f in fields(EngineConfig)}

    @classmethod
    def field_names(cls) -> list[str]:
        """Every option `from_kwargs` takes: the HTTP layer's and the engine's."""
        return [f.name for f in fields(cls) if f.name != "engine"] + [f.name for f in fields(EngineConfig)]

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> "ServerArgs":
        """Build from flat options (engine options among them); an engine value the engine
        rejects raises its ConfigError here, before anything starts."""
        engine_names = {f.name for f in fields(EngineConfig)}
        own = {f.name for f in fields(cls)} - {"engine"}
        unknown = sorted(set(kwargs) - own - engine_names)
        if unknown:
            raise ConfigError(f"unknown server option(s) {unknown}")
        engine = EngineConfig(**{k: v for k, v in kwargs.items() if k in engine_names})
        return cls(engine=engine, **{k: v for k, v in kwargs.items() if k in own})

