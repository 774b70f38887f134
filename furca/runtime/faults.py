"""Fault injection (tests only): make one chosen request raise inside one stage of the
scheduler step, to prove that a failure is isolated (docs/runtime.md, "Failure isolation").

``FaultInjector(stage, rid, skip=0)`` raises `InjectedFault` each time the scheduler
reaches ``stage`` for a request whose rid contains ``rid``, after letting the first
``skip`` such times pass (``skip=2`` on "detokenizer": the third token fails). Stages:

- ``forward``: the batched model forward (raised when the request is in the batch);
- ``sampler``: batched sampling (likewise);
- ``grammar``: the request's grammar matcher (filling its token mask);
- ``detokenizer``: the request's detokenizer and stop checks (one call per token);
- ``output``: building the request's final result;
- ``cache``: inserting the request's prefill into the radix cache, shared state: the
  scheduler dies (callers get ``EngineClosedError``).

Install one with ``Engine.set_fault_injector`` or, for a served engine, the environment
variable ``FURCA_FAULT_INJECT=stage:rid[:skip]``, read once when an `Engine` starts and
only when set. Unset, the scheduler holds None and each hook is one ``is not None`` test.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Iterable

from furca.errors import ConfigError

ENV_VAR = "FURCA_FAULT_INJECT"
STAGES = ("forward", "sampler", "grammar", "detokenizer", "output", "cache")


class InjectedFault(RuntimeError):
    """The exception a `FaultInjector` raises (deliberately not a FurcaError: it stands
    for a bug)."""


class FaultInjector:
    def __init__(self, stage: str, rid: str, skip: int = 0):
        if stage not in STAGES:
            raise ConfigError(f"fault stage must be one of {', '.join(STAGES)}, got {stage!r}")
        if not isinstance(rid, str) or not rid:
            raise ConfigError(f"fault rid must be a non-empty string, got {rid!r}")
        if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
            raise ConfigError(f"fault skip must be an int >= 0, got {skip!r}")
        self.stage, self.rid, self.skip = stage, rid, skip
        self.hits = 0  # times the stage was reached for a matching request
        self.raised = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FaultInjector({self.stage!r}, {self.rid!r}, skip={self.skip})"

    def check(self, stage: str, reqs: Any) -> None:
        """Raise `InjectedFault` if ``stage`` is the chosen one and ``reqs`` (a `Req` or
        an iterable of them) holds a chosen request past ``skip``."""
        if stage != self.stage:
            return
        batch: Iterable[Any] = reqs if isinstance(reqs, (list, tuple)) else (reqs,)
        hit = next((r for r in batch if self.rid in r.rid), None)
        if hit is None:
            return
        with self._lock:
            self.hits += 1
            if self.hits <= self.skip:
                return
            self.raised += 1
        raise InjectedFault(f"injected fault in the {stage} stage for request {hit.rid}")

    @classmethod
    def parse(cls, spec: str) -> "FaultInjector":
        """``"stage:rid[:skip]"`` (the environment variable's form)."""
        parts = spec.split(":")
        if len(parts) not in (2, 3) or not all(parts):
            raise ConfigError(f"{ENV_VAR} must be 'stage:rid' or 'stage:rid:skip', got {spec!r}")
        skip = parts[2] if len(parts) == 3 else "0"
        if not skip.isdigit():
            raise ConfigError(f"{ENV_VAR}: skip must be an int >= 0, got {skip!r}")
        return cls(parts[0], parts[1], int(skip))

    @classmethod
    def from_env(cls) -> "FaultInjector | None":
        """The injector ``FURCA_FAULT_INJECT`` asks for, or None when it is unset or empty."""
        spec = os.environ.get(ENV_VAR)
        return cls.parse(spec) if spec else None
