"""Request models of SGLang's native API (/generate, /abort_request, /tokenize,
/detokenize). Unknown fields are ignored; every constraint a client can violate is a
validator, so FastAPI reports it as a 400 (errors.py) before any work starts."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from furca.server.errors import FieldError
from furca.server.request_fields import RequestModel as _Model


class GenerateRequest(_Model):
    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None
    rid: str | list[str] | None = None
    stream: bool = False
    return_logprob: bool = False
    logprob_start_len: int = Field(default=-1, ge=-1)
    top_logprobs_num: int = Field(default=0, ge=0, le=20)
    return_text_in_logprobs: bool = False

    @field_validator("text", mode="before")
    @classmethod
    def _text(cls, v: Any) -> Any:
        if v is None or isinstance(v, str) or (isinstance(v, list) and all(isinstance(t, str) for t in v)):
            return v
        raise FieldError("text must be a string or a list of strings")

    @field_validator("input_ids", mode="before")
    @classmethod
    def _input_ids(cls, v: Any) -> Any:
        if v is None or not isinstance(v, list) or not v or not isinstance(v[0], list):
            ok = v is None or (isinstance(v, list) and all(_is_int(t) for t in v))
        else:
            ok = all(isinstance(x, list) and all(_is_int(t) for t in x) for x in v)
        if ok:
            return v
        raise FieldError("input_ids must be a list of token ids or a list of token-id lists")

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


class AbortRequest(_Model):
    rid: str


class TokenizeRequest(_Model):
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


class DetokenizeRequest(_Model):
    tokens: list[int]
    skip_special_tokens: bool = True
