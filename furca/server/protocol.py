"""Request models: OpenAI chat / completions, and SGLang's native API.

Unknown fields are ignored (as vLLM does); every constraint a client can violate is a
validator here, so FastAPI reports it as a 400 (see errors.py) before any work starts.
Responses are plain dicts built in the handlers (their shapes are OpenAI's / SGLang's).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


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


class ToolCallFunction(_Model):
    name: str
    arguments: str = "{}"


class ToolCall(_Model):
    id: str | None = None
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ContentPart(_Model):
    type: str
    text: str | None = None

    @model_validator(mode="after")
    def _check(self) -> "ContentPart":
        if self.type != "text" or self.text is None:
            raise ValueError(f"only text content parts ({{'type': 'text', 'text': ...}}) are supported, "
                             f"got type {self.type!r}")
        return self


class ChatMessage(_Model):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _check(self) -> "ChatMessage":
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs content (only an assistant message with "
                             "tool_calls may have content null)")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages may carry tool_calls")
        return self

    def text(self) -> str | None:
        if self.content is None or isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


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
            raise ValueError("response_format type json_schema needs json_schema.schema")
        return self


# -- shared sampling fields -------------------------------------------------------------------


class _SamplingFields(_Model):
    model: str | None = None
    n: int = Field(default=1, ge=1, le=128)
    stop: str | list[str] | None = None
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # furca / SGLang extras
    regex: str | None = None
    ebnf: str | None = None
    json_schema: dict[str, Any] | str | None = None
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0, le=1)
    repetition_penalty: float | None = Field(default=None, gt=0)
    min_tokens: int | None = Field(default=None, ge=0)
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool = True
    rid: str | None = None

    @model_validator(mode="after")
    def _check_common(self):
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed with stream=true")
        if self.logit_bias:
            raise ValueError("logit_bias is not supported")
        constraints = [name for name in ("regex", "ebnf", "json_schema") if getattr(self, name) is not None]
        if self.response_format is not None and self.response_format.type != "text":
            constraints.append(f"response_format={self.response_format.type}")
        if len(constraints) > 1:
            raise ValueError(f"at most one constraint may be set, got {', '.join(constraints)}")
        if self.stop_token_ids and any(t < 0 for t in self.stop_token_ids):
            raise ValueError("stop_token_ids must be >= 0")
        return self


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    continue_final_message: bool = False

    @model_validator(mode="after")
    def _check_chat(self) -> "ChatCompletionRequest":
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs=true")
        if self.tools is not None and not self.tools:
            raise ValueError("tools must not be empty (leave it out instead)")
        if self.tool_choice not in (None, "none") and not self.tools:
            raise ValueError("tool_choice needs tools")
        if isinstance(self.tool_choice, NamedToolChoice):
            names = [t.function.name for t in self.tools or []]
            if self.tool_choice.function.name not in names:
                raise ValueError(f"tool_choice names {self.tool_choice.function.name!r}, which is not "
                                 f"in tools {names}")
        uses_tools = self.tools and self.tool_choice != "none"
        if uses_tools and (self.regex or self.ebnf or self.json_schema
                           or (self.response_format and self.response_format.type != "text")):
            if self.tool_choice not in (None, "auto"):
                raise ValueError("a forced tool_choice cannot be combined with another constraint")
        if self.continue_final_message and self.messages[-1].role != "assistant":
            raise ValueError("continue_final_message needs an assistant message last")
        return self


class CompletionRequest(_SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=0)
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _check_completion(self) -> "CompletionRequest":
        if self.suffix:
            raise ValueError("suffix is not supported")
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError("best_of is not supported (it must equal n)")
        if self.echo and self.logprobs is not None:
            raise ValueError("echo together with logprobs is not supported")
        if isinstance(self.prompt, list) and not self.prompt:
            raise ValueError("prompt must not be empty")
        return self


# -- SGLang's native API ----------------------------------------------------------------------


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

    @model_validator(mode="after")
    def _check(self) -> "GenerateRequest":
        if (self.text is None) == (self.input_ids is None):
            raise ValueError("give exactly one of text and input_ids")
        return self


class AbortRequest(_Model):
    rid: str


class TokenizeRequest(_Model):
    prompt: str | list[str] | None = None
    text: str | None = None
    add_special_tokens: bool = True

    @model_validator(mode="after")
    def _check(self) -> "TokenizeRequest":
        if (self.prompt is None) == (self.text is None):
            raise ValueError("give exactly one of prompt and text")
        return self


class DetokenizeRequest(_Model):
    tokens: list[int]
    skip_special_tokens: bool = True
