"""Request models of SGLang's native API (/generate, /abort_request, /tokenize,
/detokenize). Unknown fields are ignored (but not unknown sampling parameters); every
constraint a client can violate is a validator, so FastAPI reports it as a 400
(errors.py) before any work starts.

`NativeSamplingParams` declares every key `SamplingParams.from_dict` takes (SGLang's), with
the runtime's bounds (sampling_params.py), so the OpenAPI document states them; the
handler passes the keys a client set to `SamplingParams.from_dict`, which stays the
authority (and checks what a schema cannot: min_new_tokens <= max_new_tokens, one
constraint, patterns that compile)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from furca.server.errors import FieldError
from furca.server.request_fields import (INT32_MAX, TOKEN_ID_LIMIT, NonEmpty, RequestBody, bounded_int, exactly_one_of,
                                         integral)
from furca.server.request_fields import logit_bias as logit_bias_keys
from furca.server.request_fields import RequestModel as _Model

TokenId = bounded_int(ge=0, lt=TOKEN_ID_LIMIT)
Count = bounded_int(ge=0, le=INT32_MAX)
Text = Annotated[str, Field(min_length=1)]  # a prompt: not empty
N_MAX = 1024  # samples per prompt (the runtime's bound)
Seed = bounded_int(ge=-(2**63), lt=2**63)
Bias = dict[Annotated[str, Field(pattern=r"^[0-9]{1,10}$")], Annotated[float, Field(ge=-100, le=100)]]


class NativeSamplingParams(_Model):
    """SGLang's sampling keys (null: the default, or the model's generation default)."""

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: Count | None = None
    min_new_tokens: Count | None = None
    temperature: float | None = Field(default=None, ge=0, le=100)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: bounded_int(ge=-1, le=INT32_MAX) | None = None
    min_p: float | None = Field(default=None, ge=0, le=1)
    repetition_penalty: float | None = Field(default=None, gt=0, le=2)  # SGLang's range
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    stop: str | list[str] | None = None
    stop_token_ids: list[TokenId] | None = None
    stop_regex: str | list[str] | None = None
    ignore_eos: bool | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    no_stop_trim: bool | None = None
    n: bounded_int(ge=1, le=N_MAX) | None = None
    seed: Seed | None = None
    sampling_seed: Seed | None = None
    logit_bias: Bias | None = None
    stream_interval: bounded_int(ge=1, le=INT32_MAX) | None = None
    return_logprob: bool | None = None
    logprob_start_len: bounded_int(ge=-1, le=INT32_MAX) | None = None
    top_logprobs_num: Count | None = None
    return_text_in_logprobs: bool | None = None
    regex: str | None = None
    json_schema: dict[str, Any] | str | None = None
    ebnf: str | None = None
    choices: list[str] | None = None
    json_object: bool | None = None
    structural_tag: dict[str, Any] | str | None = None
    allow_extra_properties: bool | None = None
    member_order: Literal["schema", "any"] | None = Field(default=None, description="a json_schema's objects in any "
                                                          "member order (each key once), or in `properties` order")
    token_healing: bool | None = Field(default=None, description="back up a prompt that ends inside a token "
                                       "(null: heal an unconstrained text prompt, leave input_ids as given)")
    beam_width: bounded_int(ge=1, le=1) | None = Field(default=None, description="furca has no beam search: null or 1")
    watermark: None = Field(default=None, description="not supported: null only")
    custom_params: dict[str, Any] | None = Field(default=None, description="accepted and ignored")

    _logit_bias = field_validator("logit_bias", mode="before")(classmethod(lambda cls, v: logit_bias_keys(v)))

    def given(self) -> dict[str, Any]:
        """The keys the client set, as `SamplingParams.from_dict` takes them."""
        return self.model_dump(exclude_unset=True)


class GenerateRequest(RequestBody):
    model_config = ConfigDict(json_schema_extra=exactly_one_of("text", "input_ids"))

    text: Text | NonEmpty[list[Text]] | None = None
    input_ids: NonEmpty[list[TokenId]] | NonEmpty[list[NonEmpty[list[TokenId]]]] | None = None
    sampling_params: NativeSamplingParams | list[NativeSamplingParams] | None = None
    rid: str | list[str] | None = None
    stream: bool = False
    return_logprob: bool = False
    logprob_start_len: bounded_int(ge=-1, le=INT32_MAX) = -1
    top_logprobs_num: bounded_int(ge=0, le=20) = 0
    return_text_in_logprobs: bool = False
    session_id: str | None = Field(default=None, min_length=1, max_length=256,
                                   description="an open session (/open_session): its KV stays pinned between calls")

    @field_validator("text", mode="before")
    @classmethod
    def _text(cls, v: Any) -> Any:
        if v == "" or v == [] or (isinstance(v, list) and "" in v):
            raise FieldError("text must be a non-empty string or a non-empty list of them")
        if v is None or isinstance(v, str) or (isinstance(v, list) and all(isinstance(t, str) for t in v)):
            return v
        raise FieldError("text must be a string or a list of strings")

    @field_validator("input_ids", mode="before")
    @classmethod
    def _input_ids(cls, v: Any) -> Any:
        if v is None:
            return v
        v = integral(v)
        nested = isinstance(v, list) and bool(v) and isinstance(v[0], list)
        rows = v if nested else [v]
        if not isinstance(v, list) or not all(isinstance(r, list) and all(_is_int(t) for t in r) for r in rows):
            raise FieldError("input_ids must be a list of token ids or a list of token-id lists")
        if not v or not all(rows):
            raise FieldError("input_ids must be a non-empty list[int] or list[list[int]]")
        for i, row in enumerate(rows):
            for j, t in enumerate(row):
                if not 0 <= t < TOKEN_ID_LIMIT:
                    at = f"[{i}][{j}]" if nested else f"[{j}]"
                    raise FieldError(f"input_ids{at} must be a token id in [0, 2**31), got {t}", at)
        return v

    @field_validator("sampling_params", mode="before")
    @classmethod
    def _sampling_params(cls, v: Any) -> Any:
        if v is None or isinstance(v, dict) or (isinstance(v, list) and all(isinstance(d, dict) for d in v)):
            return v
        raise FieldError("sampling_params must be an object or a list of objects (one per prompt)")

    @field_validator("rid", mode="before")
    @classmethod
    def _rid(cls, v: Any) -> Any:
        if v is None or isinstance(v, str) or (isinstance(v, list) and all(isinstance(r, str) for r in v)):
            return v
        raise FieldError("rid must be a string or a list of strings (one per prompt)")

    @model_validator(mode="after")
    def _check(self) -> "GenerateRequest":
        if (self.text is None) == (self.input_ids is None):
            raise FieldError("give exactly one of text and input_ids", "text")
        return self


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class AbortRequest(RequestBody):
    """SGLang's ``/abort_request``: ``rid`` (what one HTTP request started) or
    ``abort_all: true`` (every request in flight; then ``rid`` is ignored)."""

    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"required": ["rid"], "properties": {"rid": {"type": "string"}}},
        {"required": ["abort_all"], "properties": {"abort_all": {"const": True}}}]})

    rid: str | None = None
    abort_all: bool = False

    @model_validator(mode="after")
    def _check(self) -> "AbortRequest":
        if self.rid is None and not self.abort_all:
            raise FieldError("give the rid of the request to abort, or abort_all: true", "rid")
        return self


class TokenizeRequest(RequestBody):
    model_config = ConfigDict(json_schema_extra=exactly_one_of("prompt", "text"))

    prompt: str | list[str] | None = None
    text: str | None = None
    add_special_tokens: bool = True

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt(cls, v: Any) -> Any:
        if v is None or isinstance(v, str) or (isinstance(v, list) and all(isinstance(t, str) for t in v)):
            return v
        raise FieldError("prompt must be a string or a list of strings")

    @model_validator(mode="after")
    def _check(self) -> "TokenizeRequest":
        if (self.prompt is None) == (self.text is None):
            raise FieldError("give exactly one of prompt and text", "prompt")
        return self


class DetokenizeRequest(RequestBody):
    tokens: list[TokenId]
    skip_special_tokens: bool = True
