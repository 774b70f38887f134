"""Program nodes: what ``s += ...`` appends. Frozen dataclasses, compared by identity
(two ``gen("x")`` calls are two nodes), combined with ``+`` into a `Seq`.

The interpreter (`interpreter.py`) executes them; the tracer (`tracer.py`) records
them into a graph. `GenParams` is the sampling part of a `gen`, every field ``None``
meaning "inherit from the run's defaults".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable

from furca.lang.errors import ProgramError

# SGLang's dtype regexes (sglang.lang.ir), so dtype gens produce the same text.
REGEX_INT = r"[-+]?[0-9]+[ \n]*"
REGEX_FLOAT = r"[-+]?[0-9]*\.?[0-9]+[ \n]*"
REGEX_BOOL = r"(True|False)"
REGEX_STR = r"\"[\w\d\s]*\""

DTYPE_REGEX = {"int": REGEX_INT, "float": REGEX_FLOAT, "bool": REGEX_BOOL, "str": REGEX_STR}
_DTYPE_NAMES = {int: "int", float: "float", bool: "bool", str: "str",
                "int": "int", "float": "float", "bool": "bool", "str": "str"}
# int and float stop at the first space or newline, as in SGLang
DTYPE_STOPS = {"int": (" ", "\n"), "float": (" ", "\n")}


def normalize_dtype(dtype: Any) -> str | None:
    if dtype is None:
        return None
    try:
        return _DTYPE_NAMES[dtype]
    except (KeyError, TypeError):
        raise ProgramError(f"dtype must be one of int, float, bool, str (or their names), got {dtype!r}") from None


def _tuple(value: Any) -> tuple | None:
    if value is None:
        return None
    if isinstance(value, (str, int)):
        return (value,)
    return tuple(value)


@dataclass(frozen=True)
class GenParams:
    """Sampling and constraint fields of a ``gen`` (SGLang's names, native-API keys).

    ``None`` means unset; `merged_over` fills unset fields from the run's defaults.
    ``json_schema`` is JSON text; ``ebnf`` is grammar text (EBNF or Lark)."""

    max_new_tokens: int | None = None
    min_new_tokens: int | None = None
    n: int | None = None
    stop: tuple[str, ...] | None = None
    stop_token_ids: tuple[int, ...] | None = None
    stop_regex: tuple[str, ...] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    ignore_eos: bool | None = None
    return_logprob: bool | None = None
    logprob_start_len: int | None = None
    top_logprobs_num: int | None = None
    return_text_in_logprobs: bool | None = None
    regex: str | None = None
    json_schema: str | None = None
    ebnf: str | None = None
    token_healing: bool | None = None  # None: the backend's default (on for the local engine)

    def __post_init__(self) -> None:
        for name in ("stop", "stop_token_ids", "stop_regex"):
            object.__setattr__(self, name, _tuple(getattr(self, name)))

    def merged_over(self, defaults: "GenParams") -> "GenParams":
        """These params with unset fields taken from ``defaults``."""
        return replace(defaults, **{f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None})

    def to_dict(self) -> dict[str, Any]:
        """Set fields only, tuples as lists: SGLang's ``sampling_params`` keys."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @property
    def constraint(self) -> tuple[str, str] | None:
        for name in ("regex", "json_schema", "ebnf"):
            if getattr(self, name) is not None:
                return name, getattr(self, name)
        return None


# SGLang's run() defaults
RUN_DEFAULTS = GenParams(
    max_new_tokens=128, stop=(), stop_token_ids=(), temperature=1.0, top_p=1.0, top_k=-1, min_p=0.0,
    frequency_penalty=0.0, presence_penalty=0.0, ignore_eos=False,
)


# -- nodes -------------------------------------------------------------------------------


class Expr:
    """Base of every node: ``a + b`` concatenates into a `Seq`; strings become `Text`."""

    def __add__(self, other: Any) -> "Seq":
        return Seq.of(self, other)

    def __radd__(self, other: Any) -> "Seq":
        return Seq.of(other, self)


def as_expr(value: Any) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, str):
        return Text(value)
    if value is None:
        raise ProgramError("tried to append None to the program state")
    raise ProgramError(
        f"cannot append a {type(value).__name__} to the program state; append a str, gen(...), "
        f"select(...) or a role (convert values with str() first)"
    )


@dataclass(frozen=True, eq=False)
class Text(Expr):
    value: str


@dataclass(frozen=True, eq=False)
class Seq(Expr):
    items: tuple[Expr, ...]

    @classmethod
    def of(cls, *parts: Any) -> "Seq":
        items: list[Expr] = []
        for part in parts:
            expr = as_expr(part)
            items.extend(expr.items if isinstance(expr, Seq) else (expr,))
        return cls(tuple(items))


@dataclass(frozen=True, eq=False)
class Gen(Expr):
    name: str | None
    params: GenParams = field(default_factory=GenParams)
    dtype: str | None = None  # int / float / bool / str: a regex, and the value converted
    schema_class: Any = None  # a pydantic model class: the value is parsed into it

    def __repr__(self) -> str:
        return f"Gen({self.name!r})"


@dataclass(frozen=True, eq=False)
class Select(Expr):
    name: str | None
    choices: tuple[str, ...]
    temperature: float = 0.0
    choices_method: Callable[..., Any] | None = None  # None: token_length_normalized

    def __repr__(self) -> str:
        return f"Select({self.name!r}, choices={list(self.choices)})"


@dataclass(frozen=True, eq=False)
class RoleBegin(Expr):
    role: str


@dataclass(frozen=True, eq=False)
class RoleEnd(Expr):
    role: str


@dataclass(frozen=True, eq=False)
class VarScopeBegin(Expr):
    name: str


@dataclass(frozen=True, eq=False)
class VarScopeEnd(Expr):
    name: str


@dataclass(frozen=True, eq=False)
class CommitPrefix(Expr):
    """Send the text so far to the backend so its KV is cached (before a fork)."""


@dataclass(frozen=True, eq=False)
class ConcatStates(Expr):
    """Append the text each forked state added after the fork (``join("concate_and_append")``)."""

    states: tuple[Any, ...]


class StopTracing(Exception):
    """Raised where a traced program uses a placeholder as a value (``str(arg)``, an
    f-string, ``if s["x"] == ...``): its text or control flow depends on what tracing
    cannot know."""


class _Placeholder(Expr):
    """Stands for a value while tracing; using it as a value stops the trace."""

    _what = "value"

    def _stop(self, *args: Any, **kwargs: Any):
        raise StopTracing(f"the program uses {self._what} {self.name!r} as a value")  # type: ignore[attr-defined]

    __str__ = __format__ = __bool__ = __int__ = __float__ = __index__ = _stop
    __len__ = __iter__ = __getitem__ = __contains__ = _stop
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _stop  # type: ignore[assignment]
    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False, repr=True)
class Argument(_Placeholder):
    """A program argument while tracing (the real value is unknown)."""

    name: str
    _what = "argument"


@dataclass(frozen=True, eq=False, repr=True)
class Variable(_Placeholder):
    """A variable read while tracing: ``s["name"]`` before it has a value."""

    name: str
    source: Any = None  # the tracer node that sets it, when known
    _what = "variable"


def json_schema_text(schema: Any) -> tuple[str, Any]:
    """``(schema JSON text, pydantic class or None)`` from a dict, JSON text or pydantic class."""
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return json.dumps(_closed_objects(schema.model_json_schema())), schema
    if isinstance(schema, dict):
        return json.dumps(schema), None
    if isinstance(schema, str):
        try:
            json.loads(schema)
        except json.JSONDecodeError as e:
            raise ProgramError(f"json_schema is not valid JSON: {e.msg} at position {e.pos}") from None
        return schema, None
    raise ProgramError(f"json_schema must be a dict, a JSON string or a pydantic model class, got {type(schema).__name__}")


def _closed_objects(schema: Any) -> Any:
    """A pydantic schema with ``additionalProperties: false`` on every object that lists
    its properties and says nothing about others (JSON Schema would allow any extra
    member; the model then wastes tokens on fields the class ignores)."""
    if isinstance(schema, dict):
        out = {k: _closed_objects(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and out.get("type", "object") == "object":
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed_objects(v) for v in schema]
    return schema
