"""Errors a prompt-program author can act on. All are `FurcaError`s."""

from __future__ import annotations

from furca.errors import FurcaError, InvalidRequestError


class LangError(FurcaError):
    """Root of the language's own errors."""


class ProgramError(LangError, ValueError):
    """The program is malformed: a select without choices, nested roles, a bad ``+=``."""


class VariableNotSetError(LangError, KeyError):
    """A program read a variable that no gen, select or var_scope set."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class NoBackendError(LangError, RuntimeError):
    """No backend was given to ``run`` and no default backend is set."""


class BackendCapabilityError(LangError, NotImplementedError):
    """The backend cannot do what the program asked (e.g. regex on api.openai.com)."""


class BackendRequestError(LangError, RuntimeError):
    """A call to a server failed; the message carries the server's own message."""

    def __init__(self, message: str, *, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code


class ProgramFailedError(LangError, RuntimeError):
    """A program (or one of its forks) raised; reading its results re-raises this,
    chained to the original error."""


__all__ = [
    "BackendCapabilityError",
    "BackendRequestError",
    "InvalidRequestError",
    "LangError",
    "NoBackendError",
    "ProgramError",
    "ProgramFailedError",
    "VariableNotSetError",
]
