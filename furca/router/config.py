"""`RouterConfig`: the router's options, one frozen, validated dataclass.

Each field's help text sits in its metadata, so `furca router` derives one flag per field
(`furca.cli_flags.add_config_arguments`); ``workers`` is the repeated ``--worker URL``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from furca.errors import ConfigError

POLICIES = ("cache_aware", "round_robin")


@dataclass(frozen=True)
class RouterConfig:
    workers: tuple[str, ...] = ()
    policy: str = field(default="cache_aware", metadata={
        "choices": POLICIES,
        "help": "cache_aware: the replica holding the longest prefix of the prompt, unless the load is "
                "uneven; round_robin: each replica in turn"})
    cache_threshold: float = field(default=0.5, metadata={
        "help": "cache_aware: a prompt goes to the replica with its longest prefix when that prefix is more "
                "than this share of the prompt; otherwise to the replica whose tree is smallest"})
    balance_abs_threshold: int = field(default=16, metadata={
        "help": "cache_aware: the load (requests in flight) is uneven when the busiest replica has more than "
                "this many over the idlest ..."})
    balance_rel_threshold: float = field(default=1.5, metadata={
        "help": "... and more than this many times its load; then the request goes to the idlest replica"})
    max_tree_chars: int = field(default=1 << 22, metadata={
        "help": "characters of prompt text remembered per replica (least recently used evicted past it)"})
    max_key_chars: int = field(default=1 << 14, metadata={
        "help": "characters of a prompt's start the cache_aware policy routes by"})
    health_interval: float = field(default=2.0, metadata={"help": "seconds between health checks of a replica"})
    health_timeout: float = field(default=10.0, metadata={"help": "seconds a replica's /health may take"})
    health_failures: int = field(default=3, metadata={
        "help": "consecutive failed checks after which a replica that still accepts connections is down "
                "(one refused connection is enough)"})
    max_request_bytes: int = field(default=16 * 1024 * 1024, metadata={
        "help": "request bodies longer than this get 413"})
    api_key: str | None = field(default=None, repr=False, metadata={
        "help": "require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') at the router itself, on every "
                "route but /health and /metrics; the header still reaches the replicas, which check their own"})

    def __post_init__(self) -> None:
        workers = (self.workers,) if isinstance(self.workers, str) else tuple(self.workers)
        if not all(isinstance(w, str) and w.startswith(("http://", "https://")) for w in workers):
            raise ConfigError(f"workers must be http(s):// URLs, got {list(workers)!r}")
        if len(set(w.rstrip("/") for w in workers)) != len(workers):
            raise ConfigError(f"workers must be distinct, got {list(workers)!r}")
        object.__setattr__(self, "workers", tuple(w.rstrip("/") for w in workers))
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key):
            raise ConfigError("api_key must be a non-empty string (leave it out to disable the check)")
        if self.policy not in POLICIES:
            raise ConfigError(f"policy must be one of {list(POLICIES)}, got {self.policy!r}")
        if not 0.0 <= self.cache_threshold <= 1.0:
            raise ConfigError(f"cache_threshold must be in [0, 1], got {self.cache_threshold!r}")
        if not self.balance_rel_threshold >= 1.0:
            raise ConfigError(f"balance_rel_threshold must be >= 1, got {self.balance_rel_threshold!r}")
        for name in ("balance_abs_threshold",):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ConfigError(f"{name} must be an int >= 0, got {getattr(self, name)!r}")
        for name in ("max_tree_chars", "max_key_chars", "health_failures", "max_request_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("health_interval", "health_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")
