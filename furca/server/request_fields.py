"""Plain-words checks of the request fields whose type is a union.

pydantic reports a value that fits no member of a union once per member, with the
member's type in the location (``stop.str``, ``content.list[...]``). These ``before``
checks run first and raise `FieldError` with one sentence that says what the field
takes, naming the offending element (``content[1]``); a value that passes them fits the
union. A `FieldError`'s param is relative to the field (``"[1]"``: its element 1).
Content parts OpenAI defines for other modalities (images, audio, files) get
"not supported by this model".

Every request model is strict (`RequestModel`): JSON types are not coerced (``"4"`` is
not an integer, ``true`` is not a token id), floats must be finite. A whole request body
is first checked by `check_body` (`RequestBody`, the base of the top-level models): it
must nest at most `MAX_NESTING` arrays / objects, hold no NaN or Infinity (Python's JSON
reader accepts them; JSON has neither) and no string or key with a lone UTF-16 surrogate
(``"\\ud800"``: valid JSON, but not text a tokenizer, a template or an answer can hold).
Each is a 400 naming the field, before any work starts.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from furca.server.errors import FieldError

# The deepest nesting of arrays and objects a request body may have. Python's JSON reader
# fails near 1,000 levels, and rendering, tool schemas and grammar compilation recurse
# per level; a JSON schema 100 levels deep is far past any real one (OpenAI's structured
# outputs allow 10).
MAX_NESTING = 256
INT32_MAX = 2**31 - 1  # counts and lengths (the runtime's bound, sampling_checks.py)
TOKEN_ID_LIMIT = 2**31  # token ids lie in [0, 2**31), then below the model's vocabulary
_SURROGATE = re.compile("[\ud800-\udfff]")


def integral(value: Any) -> Any:
    """JSON has one number type: ``4.0`` is the integer 4 (JSON Schema's "integer" says so
    too); ``4.5``, ``"4"`` and ``true`` stay what they are (and are refused as integers)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list) and any(isinstance(v, (float, list)) for v in value):
        return [integral(v) for v in value]
    return value


class _NonEmpty:
    """``NonEmpty[list[X]]``: a list with at least one element."""

    def __class_getitem__(cls, item: Any) -> Any:
        return Annotated[item, Field(min_length=1)]


NonEmpty = _NonEmpty


def exactly_one_of(*names: str) -> dict[str, Any]:
    """JSON Schema (a model's ``json_schema_extra``) for "give exactly one of `names`"
    (null counts as not given)."""
    return {"oneOf": [{"required": [n], "properties": {n: {"not": {"type": "null"}}}} for n in names]}


def bounded_int(**bounds: int) -> Any:
    """An integer field within ``ge`` / ``gt`` / ``le`` / ``lt``: strict (no "4", no true),
    but 4.0 is 4. The bounds come before the validator: after it, pydantic could not
    write them into the JSON schema."""
    return Annotated[int, Field(**bounds), BeforeValidator(integral)]


class RequestModel(BaseModel):
    """Base of every request model: unknown fields are ignored (as vLLM does); types are
    strict (no str -> int, no bool -> int, no float -> int) and floats finite."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True, allow_inf_nan=False)


class RequestBody(RequestModel):
    """Base of the top-level request models: the whole body passes `check_body` first."""

    @model_validator(mode="before")
    @classmethod
    def _body(cls, value: Any) -> Any:
        check_body(value)
        return value


def _json_path(path: tuple) -> str | None:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or None


def check_body(body: Any) -> None:
    """Raise `FieldError` (param: the offending field) for a body nested deeper than
    `MAX_NESTING`, a non-finite number, or a string or key with a lone surrogate."""
    stack: list[tuple[Any, tuple, int]] = [(body, (), 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and _SURROGATE.search(value):
                _surrogate(value, path, "")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise FieldError(f"{_json_path(path) or 'the body'} must be a finite number, got {value} "
                                 "(NaN and Infinity are not JSON numbers)", _json_path(path))
        elif isinstance(value, (dict, list)):
            if depth >= MAX_NESTING:
                raise FieldError(f"the request body is nested too deeply: at most {MAX_NESTING} levels of "
                                 f"arrays and objects (limit {MAX_NESTING}), at {_json_path(path)}",
                                 _json_path(path))
            if isinstance(value, list):
                stack.extend((v, (*path, i), depth + 1) for i, v in enumerate(value) if not isinstance(v, int))
                continue
            for k, v in value.items():
                if isinstance(k, str) and not k.isascii() and _SURROGATE.search(k):
                    _surrogate(k, path, " has a key that")
                stack.append((v, (*path, k), depth + 1))


def _surrogate(text: str, path: tuple, what: str) -> None:
    at = _SURROGATE.search(text).start()
    where = _json_path(path) or "the body"
    raise FieldError(f"{where}{what or ''} contains a lone UTF-16 surrogate (\\u{ord(text[at]):04x} at character "
                     f"{at}), which is not Unicode text; send valid UTF-8 (a surrogate pair for characters "
                     "beyond U+FFFF)", _json_path(path))


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


def _is_token(x: Any) -> bool:
    return _is_int(x) and 0 <= x < TOKEN_ID_LIMIT


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


ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def messages(value: Any) -> Any:
    """Chat messages: a list of objects, each with a known ``role`` (which picks its class)."""
    if not isinstance(value, list):
        return value  # pydantic says "must be an array"
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise FieldError(f"messages[{i}] must be a JSON object (a message with a role and content)", f"[{i}]")
        if m.get("role") not in ROLES:
            role = m.get("role")
            got = ("no role" if role is None else f"role {role!r}" if isinstance(role, str)
                   else "a role that is not a string")
            raise FieldError(f"messages[{i}].role must be one of {', '.join(repr(r) for r in ROLES)}; got {got}",
                             f"[{i}].role")
    return value


def logit_bias(value: Any) -> Any:
    """``{"token id": bias}``: keys are token ids written as decimal strings."""
    if value is None:
        return value
    if not isinstance(value, dict):
        raise FieldError('logit_bias must be an object mapping token ids to biases, e.g. {"50256": -100}')
    for key in value:
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 10):
            raise FieldError(f"logit_bias keys must be token ids (decimal strings like \"50256\"), got {key!r}")
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
        if not value:
            raise FieldError("prompt must not be empty")
        return value
    value = integral(value)
    if not isinstance(value, list):
        raise FieldError(what)
    if not value:
        raise FieldError("prompt must not be empty")
    first = value[0]
    if isinstance(first, str):
        check, kind = (lambda x: isinstance(x, str)), "a string"
    elif _is_int(first):
        check, kind = _is_token, "a token id (an integer in [0, 2**31))"
    elif isinstance(first, list):
        check, kind = (lambda x: isinstance(x, list) and all(_is_token(t) for t in x)), "a list of token ids"
    else:
        raise FieldError(what)
    for i, x in enumerate(value):
        if not check(x):
            raise FieldError(f"prompt[{i}] must be {kind}, like prompt[0]", f"[{i}]")
        if isinstance(x, (str, list)) and not x:
            raise FieldError(f"prompt[{i}] must not be empty", f"[{i}]")
    return value
