"""The furca language: prompt programs with ``gen``, ``select``, roles and ``fork``,
API-compatible with SGLang's frontend. Imports no torch; the backends that need
heavier packages (the in-process engine, httpx, openai) load them when created."""

from __future__ import annotations

from importlib import import_module

from furca.lang.api import (
    assistant, assistant_begin, assistant_end, flush_cache, function, gen, gen_int, gen_string,
    get_server_info, select, set_default_backend, system, system_begin, system_end, user, user_begin, user_end,
)
from furca.lang.backends.base import Backend
from furca.lang.choices import (
    ChoicesDecision, ChoicesSamplingMethod, greedy_token_selection, token_length_normalized,
    unconditional_likelihood_normalized,
)
from furca.lang.config import global_config
from furca.lang.function import Function
from furca.lang.ir import REGEX_BOOL, REGEX_FLOAT, REGEX_INT, REGEX_STR
from furca.lang.state import ProgramState, ProgramStateGroup

_LAZY = {
    "LocalBackend": ("furca.lang.backends.local", "LocalBackend"),
    "RuntimeEndpoint": ("furca.lang.backends.runtime_endpoint", "RuntimeEndpoint"),
    "Runtime": ("furca.lang.backends.runtime", "Runtime"),
    "OpenAI": ("furca.lang.backends.openai_backend", "OpenAI"),
    "Graph": ("furca.lang.tracer", "Graph"),
}


def __getattr__(name: str):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'furca.lang' has no attribute {name!r}") from None
    value = getattr(import_module(module), attr)
    globals()[name] = value
    return value


__all__ = [
    "Backend", "ChoicesDecision", "ChoicesSamplingMethod", "Function", "ProgramState", "ProgramStateGroup",
    "REGEX_BOOL", "REGEX_FLOAT", "REGEX_INT", "REGEX_STR", "assistant", "assistant_begin", "assistant_end",
    "flush_cache", "function", "gen", "gen_int", "gen_string", "get_server_info", "global_config",
    "greedy_token_selection", "select", "set_default_backend", "system", "system_begin", "system_end",
    "token_length_normalized", "unconditional_likelihood_normalized", "user", "user_begin", "user_end", *_LAZY,
]
