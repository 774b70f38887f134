"""The language's public functions (SGLang's ``sglang.lang.api``, same signatures;
``grammar`` is furca's own)."""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

from furca.lang import config
from furca.lang.backends import as_backend
from furca.lang.choices import token_length_normalized
from furca.lang.errors import ProgramError
from furca.lang.function import Function
from furca.lang.ir import Expr, Gen, GenParams, RoleBegin, RoleEnd, Select, Seq, json_schema_text, normalize_dtype


def function(func: Callable | None = None, num_api_spec_tokens: int | None = None):
    """``@function`` or ``@function(...)``: turn ``def program(s, ...)`` into a program."""
    if func is not None:
        return Function(func, num_api_spec_tokens=num_api_spec_tokens)
    return lambda f: Function(f, num_api_spec_tokens=num_api_spec_tokens)


def set_default_backend(backend: Any) -> None:
    """The backend programs run on when ``run`` gets none: an ``Engine()``,
    ``RuntimeEndpoint(url)``, ``Runtime()`` or ``OpenAI(model)``."""
    config.default_backend = None if backend is None else as_backend(backend)


def flush_cache(backend: Any = None) -> bool:
    backend = backend if backend is not None else config.default_backend
    return False if backend is None else as_backend(backend).flush_cache()


def get_server_info(backend: Any = None) -> dict[str, Any] | None:
    backend = backend if backend is not None else config.default_backend
    return None if backend is None else as_backend(backend).get_server_info()


def gen(
    name: str | None = None,
    max_tokens: int | None = None,
    min_tokens: int | None = None,
    n: int | None = None,
    stop: str | Sequence[str] | None = None,
    stop_token_ids: Sequence[int] | None = None,
    stop_regex: str | Sequence[str] | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    frequency_penalty: float | None = None,
    presence_penalty: float | None = None,
    ignore_eos: bool | None = None,
    return_logprob: bool | None = None,
    logprob_start_len: int | None = None,
    top_logprobs_num: int | None = None,
    return_text_in_logprobs: bool | None = None,
    dtype: Any = None,
    choices: Sequence[str] | None = None,
    choices_method: Any = None,
    regex: str | None = None,
    json_schema: Any = None,
    grammar: str | None = None,
    token_healing: bool | None = None,
) -> Expr:
    """Generate text into variable ``name``. Unset parameters come from ``run``'s.

    At most one constraint: ``dtype`` (int / float / bool / str; the variable holds the
    converted value), ``regex``, ``json_schema`` (a dict, JSON text or a pydantic model
    class, whose instance the variable then holds), ``grammar`` (EBNF or Lark text) or
    ``choices`` (then this is a `select`). ``token_healing``: back up a prompt that ends
    inside a token and make the output spell the removed text first (docs/lang.md; None:
    the backend's default: on for the local engine and the native API, off over OpenAI)."""
    if choices is not None:
        return select(name, choices, 0.0 if temperature is None else temperature,
                      choices_method or token_length_normalized)
    constraints = [k for k, v in (("dtype", dtype), ("regex", regex), ("json_schema", json_schema),
                                  ("grammar", grammar)) if v is not None]
    if len(constraints) > 1 and constraints != ["dtype", "regex"]:  # SGLang lets dtype override regex
        raise ProgramError(f"gen {name!r}: give at most one of dtype, regex, json_schema, grammar; got {constraints}")
    if regex is not None:
        try:
            re.compile(regex)
        except re.error as e:
            raise ProgramError(f"gen {name!r}: invalid regex {regex!r}: {e}") from None
    schema_text, schema_class = json_schema_text(json_schema) if json_schema is not None else (None, None)
    params = GenParams(
        max_new_tokens=max_tokens, min_new_tokens=min_tokens, n=n, stop=stop, stop_token_ids=stop_token_ids,
        stop_regex=stop_regex, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
        frequency_penalty=frequency_penalty, presence_penalty=presence_penalty, ignore_eos=ignore_eos,
        return_logprob=return_logprob, logprob_start_len=logprob_start_len, top_logprobs_num=top_logprobs_num,
        return_text_in_logprobs=return_text_in_logprobs, regex=regex, json_schema=schema_text, ebnf=grammar,
        token_healing=token_healing,
    )
    return Gen(name, params, normalize_dtype(dtype), schema_class)


def _typed(dtype: type) -> Callable[..., Expr]:
    def typed_gen(name: str | None = None, max_tokens: int | None = None, n: int | None = None, stop=None,
                  stop_token_ids=None, stop_regex=None, temperature=None, top_p=None, top_k=None, min_p=None,
                  frequency_penalty=None, presence_penalty=None, ignore_eos=None, return_logprob=None,
                  logprob_start_len=None, top_logprobs_num=None, return_text_in_logprobs=None) -> Expr:
        return gen(name, max_tokens, None, n, stop, stop_token_ids, stop_regex, temperature, top_p, top_k, min_p,
                   frequency_penalty, presence_penalty, ignore_eos, return_logprob, logprob_start_len,
                   top_logprobs_num, return_text_in_logprobs, dtype=dtype)

    typed_gen.__name__ = f"gen_{'int' if dtype is int else 'string'}"
    typed_gen.__doc__ = f"``gen(..., dtype={dtype.__name__})``."
    return typed_gen


gen_int = _typed(int)
gen_string = _typed(str)


def select(name: str | None = None, choices: Sequence[str] | None = None, temperature: float = 0.0,
           choices_method: Any = token_length_normalized) -> Expr:
    """Append the option the model scores best (see `furca.lang.choices`); every option
    is scored exactly, all in one batched call."""
    if choices is None or isinstance(choices, str) or len(choices) == 0:
        raise ProgramError(f"select {name!r} needs a non-empty list of choices, got {choices!r}")
    if any(not isinstance(c, str) or c == "" for c in choices):
        raise ProgramError(f"select {name!r}: every choice must be a non-empty string, got {list(choices)!r}")
    return Select(name, tuple(choices), temperature, choices_method)


def _role(role: str, expr: Any = None) -> Expr:
    return Seq.of(RoleBegin(role), RoleEnd(role)) if expr is None else Seq.of(RoleBegin(role), expr, RoleEnd(role))


def system(expr: Any = None) -> Expr:
    return _role("system", expr)


def user(expr: Any = None) -> Expr:
    return _role("user", expr)


def assistant(expr: Any = None) -> Expr:
    return _role("assistant", expr)


def system_begin() -> Expr:
    return RoleBegin("system")


def system_end() -> Expr:
    return RoleEnd("system")


def user_begin() -> Expr:
    return RoleBegin("user")


def user_end() -> Expr:
    return RoleEnd("user")


def assistant_begin() -> Expr:
    return RoleBegin("assistant")


def assistant_end() -> Expr:
    return RoleEnd("assistant")
