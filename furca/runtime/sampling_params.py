"""Per-request sampling parameters, with SGLang's keys and defaults.

``SamplingParams`` is a frozen (hashable) dataclass validated in ``__post_init__``;
every bad value raises ``SamplingParamsError`` naming the field, the value and the
allowed range. Lists are normalised to tuples, ``logit_bias`` to sorted
``(token_id, bias)`` pairs, and dict-valued constraints (``json_schema``,
``structural_tag``) to JSON strings (key order kept), so two equal requests compare and
hash equal (the constraint compiler keys its cache on that).

``from_dict`` takes every key of SGLang's ``SamplingParams`` API (docs/runtime.md,
"Sampling keys"): most are fields; ``sampling_seed`` is ``seed``; ``custom_params``
(furca has no custom logit processors) is checked and dropped; ``beam_width`` and
``watermark`` are accepted only at their neutral values (None, or beam_width 1).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from furca.errors import SamplingParamsError
from furca.runtime.sampling_checks import (
    INT32_MAX,
    N_MAX,
    NOT_FIELDS,
    fail,
    int_tuple,
    integer,
    is_set,
    json_text,
    logit_bias_pairs,
    number,
    str_tuple,
    token_ids,
)

# Temperatures below this are treated as greedy (SGLang does the same), which also
# keeps ``logits / temperature`` finite.
GREEDY_TEMPERATURE_EPS = 1e-5

CONSTRAINT_FIELDS = ("regex", "json_schema", "ebnf", "choices", "json_object", "structural_tag")
SCHEMA_CONSTRAINTS = ("json_schema", "structural_tag")  # where allow_extra_properties applies

# Keys that other SGLang/OpenAI-style clients send under a different name.
_ALIASES = {"sampling_seed": "seed"}
SEED_RANGE = (-(2**63), 2**63)  # SGLang's sampling_seed range, [lo, hi)


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 or 0: off
    min_p: float = 0.0
    repetition_penalty: float = 1.0  # HF semantics, over prompt + output tokens
    frequency_penalty: float = 0.0  # OpenAI semantics, over output tokens
    presence_penalty: float = 0.0  # OpenAI semantics, over output tokens
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    stop_regex: tuple[str, ...] = ()  # Python re syntax; see stop_regex.py
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    n: int = 1
    seed: int | None = None  # alias: sampling_seed
    logit_bias: tuple[tuple[int, float], ...] = ()  # a {token_id: bias} dict is accepted
    stream_interval: int | None = None  # accepted; the server streams every token
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False
    # Constraints: at most one of these is set.
    regex: str | None = None
    json_schema: str | None = None  # a dict is accepted and stored as JSON text
    ebnf: str | None = None
    choices: tuple[str, ...] | None = None
    json_object: bool = False
    structural_tag: str | None = None  # a dict is accepted and stored as JSON text
    # What a JSON-schema object without ``additionalProperties`` admits (json_schema and the
    # schemas of a structural_tag): None = the engine's default (JSON Schema: undeclared
    # members allowed); False = declared properties only (OpenAI strict / xgrammar).
    allow_extra_properties: bool | None = None
    # The member order of a json_schema's objects: None / "schema" = `properties` order (or
    # required first), extra members last; "any" = any order, each key once (the matcher
    # keeps keys distinct: furca/constrain/json_schema/any_order.py).
    member_order: str | None = None
    # Token healing (token_healing.py): True heals the prompt's last token(s), False never;
    # None = heal unconstrained text prompts, leave input_ids and constrained requests as given.
    token_healing: bool | None = None

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("stop", str_tuple("stop", self.stop))
        set_("stop_token_ids", int_tuple("stop_token_ids", self.stop_token_ids))
        set_("stop_regex", str_tuple("stop_regex", self.stop_regex))
        set_("logit_bias", logit_bias_pairs(self.logit_bias))
        if self.choices is not None:
            set_("choices", str_tuple("choices", self.choices))
        set_("json_schema", json_text("json_schema", self.json_schema))
        set_("structural_tag", json_text("structural_tag", self.structural_tag))
        for name in ("temperature", "top_p", "min_p", "repetition_penalty",
                     "frequency_penalty", "presence_penalty"):
            set_(name, number(name, getattr(self, name)))
        for name in ("max_new_tokens", "min_new_tokens", "top_k", "n",
                     "logprob_start_len", "top_logprobs_num"):
            integer(name, getattr(self, name))
        for name in ("ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
                     "no_stop_trim", "return_logprob", "return_text_in_logprobs", "json_object"):
            if not isinstance(getattr(self, name), bool):
                fail(name, getattr(self, name), "true or false")
        if self.allow_extra_properties is not None and not isinstance(self.allow_extra_properties, bool):
            fail("allow_extra_properties", self.allow_extra_properties, "true, false or None")
        if self.member_order not in (None, "schema", "any"):
            fail("member_order", self.member_order, "'schema', 'any' or None")
        if self.token_healing is not None and not isinstance(self.token_healing, bool):
            fail("token_healing", self.token_healing, "true, false or None")
        self._check_ranges()
        self._check_constraint()

    def _check_ranges(self) -> None:
        checks = (
            ("temperature", self.temperature >= 0, ">= 0 (0 means greedy)"),
            ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
            ("top_k", self.top_k == -1 or self.top_k >= 0, "-1 or 0 (off), or >= 1"),
            ("min_p", 0 <= self.min_p <= 1, "in [0, 1]"),
            ("repetition_penalty", self.repetition_penalty > 0, "> 0 (1 means off)"),
            ("frequency_penalty", -2 <= self.frequency_penalty <= 2, "in [-2, 2]"),
            ("presence_penalty", -2 <= self.presence_penalty <= 2, "in [-2, 2]"),
            ("top_k", self.top_k <= INT32_MAX, "at most 2**31 - 1"),
            ("max_new_tokens", 0 <= self.max_new_tokens <= INT32_MAX, "in [0, 2**31 - 1]"),
            ("min_new_tokens", 0 <= self.min_new_tokens <= self.max_new_tokens,
             f"in [0, max_new_tokens={self.max_new_tokens}]"),
            ("n", 1 <= self.n <= N_MAX, f"in [1, {N_MAX}]"),
            ("logprob_start_len", -1 <= self.logprob_start_len <= INT32_MAX,
             "-1 (no prompt logprobs) or in [0, 2**31 - 1]"),
            ("top_logprobs_num", 0 <= self.top_logprobs_num <= INT32_MAX, "in [0, 2**31 - 1]"),
        )
        for name, ok, allowed in checks:
            if not ok:
                fail(name, getattr(self, name), allowed)
        if self.seed is not None:
            integer("seed", self.seed)
            if not SEED_RANGE[0] <= self.seed < SEED_RANGE[1]:
                fail("seed", self.seed, "None or an int in [-2**63, 2**63)")
        if self.stream_interval is not None:
            integer("stream_interval", self.stream_interval)
            if not 1 <= self.stream_interval <= INT32_MAX:
                fail("stream_interval", self.stream_interval, "None or in [1, 2**31 - 1]")
        if self.stop_regex:
            from furca.runtime.stop_regex import check_patterns

            check_patterns(self.stop_regex)
        if any(s == "" for s in self.stop):
            fail("stop", self.stop, "non-empty strings")
        token_ids("stop_token_ids", self.stop_token_ids)

    def _check_constraint(self) -> None:
        for name in ("regex", "ebnf"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                fail(name, value, "a string or None")
        if self.choices is not None and (not self.choices or any(c == "" for c in self.choices)):
            fail("choices", self.choices, "a non-empty list of non-empty strings")
        set_ = [name for name in CONSTRAINT_FIELDS if is_set(getattr(self, name))]
        if len(set_) > 1:
            raise SamplingParamsError(
                f"at most one constraint may be set, got {', '.join(set_)}; "
                f"choose one of {', '.join(CONSTRAINT_FIELDS)}"
            )

    # -- construction and export -------------------------------------------------------

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SamplingParams:
        """Build from a dict with SGLang's keys. ``None`` values mean "the default".

        An unknown key raises ``SamplingParamsError`` naming it and the accepted keys.
        """
        if d is None:
            return cls()
        if isinstance(d, SamplingParams):
            return d
        if not isinstance(d, dict):
            raise SamplingParamsError(
                f"sampling_params must be a dict or SamplingParams, got {type(d).__name__}"
            )
        known = {f.name for f in fields(cls)}
        kwargs = {}
        for key, value in d.items():
            name = _ALIASES.get(key, key)
            if name in NOT_FIELDS:
                NOT_FIELDS[name](value)
                continue
            if name not in known:
                accepted = sorted(known | set(_ALIASES) | set(NOT_FIELDS))
                raise SamplingParamsError(f"unknown sampling parameter {key!r}; accepted: {', '.join(accepted)}")
            if value is not None:
                if name in kwargs:
                    raise SamplingParamsError(f"sampling parameter {name} is given twice (as {key!r} too)")
                kwargs[name] = value
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """All fields as a JSON-ready dict (tuples become lists); ``from_dict`` inverts it."""
        d = asdict(self)
        for key, value in d.items():
            if isinstance(value, tuple):
                d[key] = list(value)
        d["logit_bias"] = {str(t): b for t, b in self.logit_bias}  # OpenAI's shape
        return d

    def replace(self, **changes: Any) -> SamplingParams:
        """A copy with ``changes`` applied (and validated)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(changes)
        return SamplingParams(**d)

    # -- derived -----------------------------------------------------------------------

    @property
    def is_greedy(self) -> bool:
        """Argmax decoding: temperature 0 (below 1e-5) or top_k == 1."""
        return self.temperature < GREEDY_TEMPERATURE_EPS or self.top_k == 1

    @property
    def has_constraint(self) -> bool:
        return self.constraint is not None

    @property
    def constraint(self) -> tuple[str, Any] | None:
        """``(field_name, value)`` of the constraint, or None."""
        for name in CONSTRAINT_FIELDS:
            value = getattr(self, name)
            if is_set(value):
                return (name, value)
        return None

    @property
    def compile_key(self) -> tuple[str, Any, tuple] | None:
        """``(field_name, value, options)``: everything that decides the compiled grammar
        (hashable; two params with equal keys share one compile), or None. ``options`` holds
        ``("allow_extra_properties", v)`` for schema-bearing constraints and
        ``("member_order", "any")`` for a json_schema in any member order."""
        c = self.constraint
        if c is None:
            return None
        options = ()
        if c[0] in SCHEMA_CONSTRAINTS and self.allow_extra_properties is not None:
            options = (("allow_extra_properties", self.allow_extra_properties),)
        if c[0] == "json_schema" and self.member_order == "any":
            options += (("member_order", "any"),)
        return (c[0], c[1], options)
