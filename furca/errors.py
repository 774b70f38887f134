"""furca's error hierarchy. Every error furca raises on purpose is a FurcaError.

This module imports nothing, so every part of furca (leaves included) may use it.
"""


class FurcaError(Exception):
    """Root of every error furca raises on purpose."""


class ConfigError(FurcaError, ValueError):
    """A configuration value (engine, server, environment) is invalid."""


class ModelLoadError(FurcaError):
    """A model could not be found, read or is of an unsupported kind."""


class UnsupportedModelError(ModelLoadError):
    """The model's architecture (or a feature of it) is not implemented."""


class InvalidRequestError(FurcaError, ValueError):
    """A request is malformed: bad prompt, bad sampling values, too long for the context."""


class ContextLengthError(InvalidRequestError):
    """Prompt (plus requested new tokens) does not fit the model's context."""


class SamplingParamsError(InvalidRequestError):
    """A sampling parameter is out of range or contradicts another. ``param``: the
    parameter's name (SamplingParams' spelling), when one is to blame."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class CompileError(FurcaError, ValueError):
    """A constraint (regex, JSON schema, grammar, choices) cannot be compiled."""


class EngineClosedError(FurcaError, RuntimeError):
    """The engine was shut down (or its scheduler died) and takes no more requests."""


class RequestFailedError(FurcaError, RuntimeError):
    """Handling one request inside a scheduler step raised: that request alone failed (its
    KV and lock are given back; every other request goes on). ``stage``: where it failed
    ("model forward", "sampler", "grammar matcher", "detokenizer", ...); ``__cause__``:
    the exception. The engine keeps serving."""

    def __init__(self, message: str, stage: str | None = None):
        super().__init__(message)
        self.stage = stage


class QueueTimeoutError(FurcaError):
    """The request waited longer than the engine's ``max_queue_time`` to be admitted and
    was dropped before it ran (the server answers 503 with Retry-After)."""


class TensorParallelError(FurcaError, RuntimeError):
    """A tensor-parallel rank died, failed to start, or a collective between the ranks
    failed. The ranks' state can no longer be kept in step: the engine closes (every
    pending request fails with `EngineClosedError` whose cause is this error)."""
