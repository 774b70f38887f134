"""Request models of the OpenAI API (chat / completions; the chat messages, one model per
role, are in protocol_messages.py); SGLang's native ones are in protocol_native.py
(re-exported here).

Unknown fields are ignored (as vLLM does); every constraint a client can violate is a
validator here, so FastAPI reports it as a 400 (see errors.py) before any work starts.
Validators raise `FieldError` (a sentence and the field it names); union-typed fields are
checked first by request_fields.py, so no error shows pydantic's union internals.
Legacy ``functions`` / ``function_call`` are mapped onto ``tools`` / ``tool_choice`` here
(``legacy_functions`` says so; the answer is shaped by legacy_functions.py).
Responses are plain dicts built in the handlers (their shapes are OpenAI's / SGLang's).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from furca.server import request_fields as rf
from furca.server.chat_template import RESERVED_TEMPLATE_KWARGS, reserved_kwargs
from furca.server.errors import FieldError
from furca.server.protocol_messages import ChatMessage
from furca.server.protocol_native import AbortRequest, DetokenizeRequest, GenerateRequest, TokenizeRequest
from furca.server.request_fields import RequestModel as _Model

N_MAX = 128  # samples per request (OpenAI's bound on n)

__all__ = ["ChatCompletionRequest", "CompletionRequest", "GenerateRequest", "AbortRequest", "TokenizeRequest",
           "DetokenizeRequest"]


# -- pieces ----------------------------------------------------------------------------------


class StreamOptions(_Model):
    include_usage: bool = False


class FunctionDef(_Model):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Model):
    type: Literal["function"] = "function"
    function: FunctionDef


class FunctionName(_Model):
    name: str


class NamedToolChoice(_Model):
    type: Literal["function"] = "function"
    function: FunctionName


class JsonSchemaFormat(_Model):
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Model):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _check(self) -> "ResponseFormat":
        if self.type == "json_schema" and (self.json_schema is None or self.json_schema.schema_ is None):
            raise FieldError("response_format type json_schema needs json_schema.schema", "json_schema.schema")
        return self


# -- shared sampling fields -------------------------------------------------------------------


NonEmpty = rf.NonEmpty
TokenId = rf.bounded_int(ge=0, lt=rf.TOKEN_ID_LIMIT)
Text = Annotated[str, Field(min_length=1)]  # a prompt: not empty
Count = rf.bounded_int(ge=0, le=rf.INT32_MAX)
Bias = dict[Annotated[str, Field(pattern=r"^[0-9]{1,10}$")], Annotated[float, Field(ge=-100, le=100)]]


class _SamplingFields(rf.RequestBody):
    model: str | None = None
    n: rf.bounded_int(ge=1, le=N_MAX) = 1
    stop: str | list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: rf.bounded_int(ge=-(2**63), lt=2**63) | None = None
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    logit_bias: Bias | None = None
    user: str | None = None
    # furca / SGLang extras
    regex: str | None = None
    ebnf: str | None = None
    json_schema: dict[str, Any] | str | None = None
    # objects of the json_schema / response_format schema in any member order ("any"), or
    # in `properties` order (null / "schema", as OpenAI writes them)
    member_order: Literal["schema", "any"] | None = None
    top_k: rf.bounded_int(ge=-1, le=rf.INT32_MAX) | None = None
    min_p: float | None = Field(default=None, ge=0, le=1)
    repetition_penalty: float | None = Field(default=None, gt=0, le=2)
    min_tokens: Count | None = None
    ignore_eos: bool = False
    stop_token_ids: list[TokenId] | None = None
    skip_special_tokens: bool = True
    rid: str | None = None

    _stop = field_validator("stop", mode="before")(classmethod(lambda cls, v: rf.stop(v)))
    _logit_bias = field_validator("logit_bias", mode="before")(classmethod(lambda cls, v: rf.logit_bias(v)))
    _response_format = field_validator("response_format", mode="before")(
        classmethod(lambda cls, v: rf.response_format(v)))
    _json_schema = field_validator("json_schema", mode="before")(classmethod(lambda cls, v: rf.json_schema(v)))

    @model_validator(mode="after")
    def _check_common(self):
        if self.stream_options is not None and not self.stream:
            raise FieldError("stream_options is only allowed with stream=true", "stream_options")
        constraints = [name for name in ("regex", "ebnf", "json_schema") if getattr(self, name) is not None]
        if self.response_format is not None and self.response_format.type != "text":
            constraints.append(f"response_format={self.response_format.type}")
        if len(constraints) > 1:
            raise FieldError(f"at most one constraint may be set, got {', '.join(constraints)}",
                             constraints[-1].split("=")[0])
        return self


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: rf.bounded_int(ge=1, le=rf.INT32_MAX) | None = None
    max_completion_tokens: rf.bounded_int(ge=1, le=rf.INT32_MAX) | None = None
    logprobs: bool = False
    top_logprobs: rf.bounded_int(ge=0, le=20) | None = None
    tools: list[Tool] | None = Field(default=None, min_length=1)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    functions: list[FunctionDef] | None = Field(default=None, min_length=1)  # legacy tools
    function_call: Literal["none", "auto"] | FunctionName | None = None  # legacy tool_choice
    chat_template_kwargs: dict[str, Any] | None = None
    continue_final_message: bool = False
    _legacy: bool = PrivateAttr(default=False)

    _messages = field_validator("messages", mode="before")(classmethod(lambda cls, v: rf.messages(v)))

    @field_validator("chat_template_kwargs")
    @classmethod
    def _template_kwargs(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        taken = reserved_kwargs(v)
        if taken:
            raise FieldError(f"chat_template_kwargs may not set {taken[0]!r}: the server sets "
                             f"{', '.join(RESERVED_TEMPLATE_KWARGS)} itself (use the request's own fields)", taken[0])
        return v

    _tool_choice = field_validator("tool_choice", mode="before")(classmethod(lambda cls, v: rf.tool_choice(v)))
    _function_call = field_validator("function_call", mode="before")(
        classmethod(lambda cls, v: rf.function_call(v)))

    @property
    def legacy_functions(self) -> bool:
        """Whether the request used ``functions`` (the answer then carries ``function_call``)."""
        return self._legacy

    def _map_legacy_functions(self) -> None:
        if self.functions is None:
            if self.function_call not in (None, "none"):
                raise FieldError("function_call needs functions", "function_call")
            return
        if self.tools is not None:
            raise FieldError("give tools or the legacy functions, not both", "functions")
        if self.tool_choice is not None:
            raise FieldError("tool_choice goes with tools; with functions, use function_call", "tool_choice")
        if not self.functions:
            raise FieldError("functions must not be empty (leave it out instead)", "functions")
        self.tools = [Tool(function=f) for f in self.functions]
        fc = self.function_call
        self.tool_choice = fc if fc is None or isinstance(fc, str) else NamedToolChoice(function=fc)
        self.parallel_tool_calls = False  # the legacy API returns one call
        self._legacy = True

    @model_validator(mode="after")
    def _check_chat(self) -> "ChatCompletionRequest":
        if self.top_logprobs and not self.logprobs:
            raise FieldError("top_logprobs needs logprobs=true", "top_logprobs")
        self._map_legacy_functions()
        choice_field = "function_call" if self._legacy else "tool_choice"
        if self.tools is not None and not self.tools:
            raise FieldError("tools must not be empty (leave it out instead)", "tools")
        if self.tool_choice not in (None, "none") and not self.tools:
            raise FieldError("tool_choice needs tools", "tool_choice")
        if isinstance(self.tool_choice, NamedToolChoice):
            names = [t.function.name for t in self.tools or []]
            if self.tool_choice.function.name not in names:
                raise FieldError(f"{choice_field} names {self.tool_choice.function.name!r}, which is not in "
                                 f"{'functions' if self._legacy else 'tools'} {names}", choice_field)
        uses_tools = self.tools and self.tool_choice != "none"
        if uses_tools and (self.regex or self.ebnf or self.json_schema
                           or (self.response_format and self.response_format.type != "text")):
            if self.tool_choice not in (None, "auto"):
                raise FieldError(f"a forced {choice_field} cannot be combined with another constraint",
                                 choice_field)
        if self.continue_final_message and self.messages[-1].role != "assistant":
            raise FieldError("continue_final_message needs an assistant message last", "continue_final_message")
        return self


class CompletionRequest(_SamplingFields):
    prompt: Text | NonEmpty[list[Text]] | NonEmpty[list[TokenId]] | NonEmpty[list[NonEmpty[list[TokenId]]]]
    max_tokens: rf.bounded_int(ge=0, le=rf.INT32_MAX) | None = 16
    logprobs: rf.bounded_int(ge=0, le=20) | None = None
    echo: bool = False
    suffix: Annotated[str, Field(max_length=0, description="not supported: empty or null")] | None = None
    best_of: rf.bounded_int(ge=1, le=N_MAX) | None = None

    _prompt = field_validator("prompt", mode="before")(classmethod(lambda cls, v: rf.prompt(v)))

    @field_validator("suffix", mode="before")
    @classmethod
    def _suffix(cls, v: Any) -> Any:
        if isinstance(v, str) and v:
            raise FieldError("suffix is not supported")
        return v

    @model_validator(mode="after")
    def _check_completion(self) -> "CompletionRequest":
        if self.suffix:
            raise FieldError("suffix is not supported", "suffix")
        if self.best_of is not None and self.best_of != self.n:
            raise FieldError("best_of is not supported (it must equal n)", "best_of")
        return self
