"""furca: structured generation for LLMs.

Heavy parts (the runtime, which imports torch) load lazily, so ``import furca``,
``import furca.lang`` and ``import furca.constrain`` stay light. The language's names
(``function``, ``gen``, ``select``, ...) are here too, so SGLang programs run with
``import furca as sgl``; ``sgl.Engine()`` is the in-process runtime, usable as a backend.
"""

from __future__ import annotations

from importlib import import_module

from furca.errors import FurcaError

__version__ = "0.1.0"

_LAZY = {
    "Engine": ("furca.runtime.engine", "Engine"),
    "SamplingParams": ("furca.runtime.sampling_params", "SamplingParams"),
    "Output": ("furca.runtime.output", "Output"),
    # the language (furca.lang imports no torch; its backends load their packages when created)
    **{name: ("furca.lang", name) for name in (
        "function", "gen", "gen_int", "gen_string", "select", "system", "user", "assistant",
        "system_begin", "system_end", "user_begin", "user_end", "assistant_begin", "assistant_end",
        "set_default_backend", "flush_cache", "get_server_info", "global_config",
        "token_length_normalized", "greedy_token_selection", "unconditional_likelihood_normalized",
        "ProgramState", "RuntimeEndpoint", "Runtime", "OpenAI", "LocalBackend",
    )},
}


def __getattr__(name: str):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'furca' has no attribute {name!r}") from None
    value = getattr(import_module(module), attr)
    globals()[name] = value
    return value


__all__ = ["FurcaError", "__version__", *_LAZY]
