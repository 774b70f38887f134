"""Plain-words checks of the request fields whose type is a union.

pydantic reports a value that fits no member of a union once per member, with the
member's type in the location (``stop.str``, ``content.list[...]``). These ``before``
checks run first and raise `FieldError` with one sentence that says what the field
takes, naming the offending element (``content[1]``); a value that passes them fits the
union. A `FieldError`'s param is relative to the field (``"[1]"``: its element 1).
Content parts OpenAI defines for other modalities (images, audio, files) get
"not supported by this model".
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from furca.server.errors import FieldError


class RequestModel(BaseModel):
    """Base of every request model: unknown fields are ignored (as vLLM does)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)


TOOL_CHOICE_WORDS = ("none", "auto", "required")
FUNCTION_CALL_WORDS = ("none", "auto")
TEXT_PARTS = ("text", "input_text")
_OTHER_MODALITIES = {
    "image_url": "image inputs", "input_image": "image inputs", "image": "image inputs",
    "input_audio": "audio inputs", "audio_url": "audio inputs", "audio": "audio inputs",
    "file": "file inputs", "input_file": "file inputs", "video_url": "video inputs", "video": "video inputs",
}


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def content(value: Any) -> Any:
    """A message's content: a string, null, or a list of text parts."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise FieldError("content must be a string or a list of content parts "
                         "([{\"type\": \"text\", \"text\": ...}])")
    for i, part in enumerate(value):
        where, at = f"content[{i}]", f"[{i}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            raise FieldError(f"{where} must be a content part object with a type, e.g. "
                             "{\"type\": \"text\", \"text\": ...}", at)
        if kind in _OTHER_MODALITIES:
            raise FieldError(f"{_OTHER_MODALITIES[kind]} are not supported by this model ({where} has type "
                             f"{kind!r}); send text content parts only", at)
        if kind not in TEXT_PARTS:
            raise FieldError(f"{where} has an unknown content part type {kind!r}; this model takes "
                             "\"text\" parts", f"{at}.type")
        if not isinstance(part.get("text"), str):
            raise FieldError(f"{where}.text must be a string", f"{at}.text")
    return value


def stop(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return value
    raise FieldError("stop must be a string or a list of strings")


def json_schema(value: Any) -> Any:
    if value is None or isinstance(value, (dict, str)):
        return value
    raise FieldError("json_schema must be a JSON Schema object (or its JSON text)")


def _named(value: Any, field: str, words: tuple[str, ...], shape: str) -> Any:
    allowed = ", ".join(f'"{w}"' for w in words)
    if value is None:
        return value
    if isinstance(value, str):
        if value in words:
            return value
        raise FieldError(f"{field} must be {allowed} or {shape}, got {value!r}")
    if isinstance(value, dict):
        fn = value.get("function") if field == "tool_choice" else value
        if field == "tool_choice" and value.get("type", "function") != "function":
            raise FieldError(f"{field}.type must be \"function\", got {value.get('type')!r}", "type")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return value
        at = "function.name" if field == "tool_choice" else "name"
        raise FieldError(f"{field}.{at} is missing: {field} names a function as {shape}", at)
    raise FieldError(f"{field} must be {allowed} or {shape}")


def tool_choice(value: Any) -> Any:
    return _named(value, "tool_choice", TOOL_CHOICE_WORDS, '{"type": "function", "function": {"name": ...}}')


def function_call(value: Any) -> Any:
    return _named(value, "function_call", FUNCTION_CALL_WORDS, '{"name": ...}')


def response_format(value: Any) -> Any:
    if value is None or (isinstance(value, dict) and "type" in value):
        return value
    raise FieldError('response_format must be an object with a type: {"type": "text" | "json_object" | '
                     '"json_schema", ...}')


def prompt(value: Any) -> Any:
    """A completion prompt: a string, a list of strings, a list of token ids, or a list of
    token-id lists."""
    what = "prompt must be a string, a list of strings, a list of token ids or a list of token-id lists"
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise FieldError(what)
    if not value:
        raise FieldError("prompt must not be empty")
    first = value[0]
    if isinstance(first, str):
        check, kind = (lambda x: isinstance(x, str)), "a string"
    elif _is_int(first):
        check, kind = _is_int, "a token id (an integer)"
    elif isinstance(first, list):
        check, kind = (lambda x: isinstance(x, list) and all(_is_int(t) for t in x)), "a list of token ids"
    else:
        raise FieldError(what)
    for i, x in enumerate(value):
        if not check(x):
            raise FieldError(f"prompt[{i}] must be {kind}, like prompt[0]", f"[{i}]")
    return value
