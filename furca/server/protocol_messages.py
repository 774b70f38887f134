"""Chat messages of the OpenAI API: one model per role, as OpenAI's schema has them
(``ChatMessage``, a union picked by ``role``). Content is required and not null on
system, developer, user, tool and function messages (function also needs ``name``) and
optional on assistant messages, the only ones that carry ``tool_calls`` /
``function_call``. The union's tags are class names, which errors.py leaves out of a
``param`` (``messages[0].content``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from furca.server import request_fields as rf
from furca.server.errors import FieldError
from furca.server.request_fields import RequestModel as _Model


class ToolCallFunction(_Model):
    name: str
    arguments: str = "{}"


class ToolCall(_Model):
    id: str | None = None
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ContentPart(_Model):
    type: Literal["text", "input_text"]
    text: str


class _Message(_Model):
    """What every role's message has; `ChatMessage` picks the class by ``role``."""

    name: str | None = None

    _content = field_validator("content", mode="before", check_fields=False)(
        classmethod(lambda cls, v: rf.content(v)))

    def text(self) -> str | None:
        content = getattr(self, "content", None)
        if content is None or isinstance(content, str):
            return content
        return "".join(part.text for part in content)


class _NeedsContent(_Message):
    """A message whose content is required and not null (every role but assistant), which
    carries no tool calls."""

    @model_validator(mode="before")
    @classmethod
    def _needs_content(cls, value: Any) -> Any:
        if isinstance(value, dict):
            role = value.get("role")
            if value.get("content") is None:
                raise FieldError(f"a {role} message needs content (only an assistant message may have content "
                                 "null)", "content")
            for key in ("tool_calls", "function_call"):
                if value.get(key) is not None:
                    raise FieldError("only assistant messages may carry tool_calls or function_call", key)
        return value


class SystemMessage(_NeedsContent):
    role: Literal["system", "developer"]
    content: str | list[ContentPart]


class UserMessage(_NeedsContent):
    role: Literal["user"]
    content: str | list[ContentPart]


class ToolMessage(_NeedsContent):
    role: Literal["tool"]
    content: str | list[ContentPart]
    tool_call_id: str | None = None


class FunctionMessage(_NeedsContent):
    """The legacy API's function result: ``name`` says which function answered."""

    role: Literal["function"]
    content: str | list[ContentPart]
    name: str = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _needs_name(cls, value: Any) -> Any:
        if isinstance(value, dict) and not value.get("name"):
            raise FieldError("a function message needs the name of the function it answers", "name")
        return value


class AssistantMessage(_Message):
    """content may be null (with or without calls: an empty turn)."""

    role: Literal["assistant"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCall] | None = None
    function_call: ToolCallFunction | None = None  # legacy: an assistant's one call


_MESSAGE_CLASSES = {"system": "SystemMessage", "developer": "SystemMessage", "user": "UserMessage",
                    "assistant": "AssistantMessage", "tool": "ToolMessage", "function": "FunctionMessage"}


def _message_tag(value: Any) -> str | None:
    role = value.get("role") if isinstance(value, dict) else getattr(value, "role", None)
    return _MESSAGE_CLASSES.get(role) if isinstance(role, str) else None


# one class per role (OpenAI's schema); the tags are class names, which errors.py leaves
# out of a param (``messages[0].content``)
ChatMessage = Annotated[
    Annotated[SystemMessage, Tag("SystemMessage")] | Annotated[UserMessage, Tag("UserMessage")]
    | Annotated[AssistantMessage, Tag("AssistantMessage")] | Annotated[ToolMessage, Tag("ToolMessage")]
    | Annotated[FunctionMessage, Tag("FunctionMessage")],
    Discriminator(_message_tag),
]
