"""Tool calling: constraints for tool_choice, and parsing the model's calls.

- named function: the output is that tool's arguments, constrained by its parameter schema;
- ``required``: a JSON list ``[{"name": ..., "parameters": {...}}, ...]`` constrained by
  an ``anyOf`` over the tools (vLLM's schema; ``maxItems: 1`` unless parallel calls). The
  model may close the list after any complete call; a list cut by max_tokens keeps every
  complete call (`parse_call_array`), and streaming sends each call as it completes;
- ``auto``: free text, or calls in the Hermes format ``<tool_call>{"name": ..., "arguments":
  ...}</tool_call>``. With structural tags the call is constrained once ``<tool_call>``
  appears; without them the text is parsed afterwards (and a malformed call stays text).

Schemas are read strictly on the OpenAI routes: an object schema without
``additionalProperties`` admits only its declared properties (``allow_extra_properties``
is False unless ``--json-schema-allow-extra-properties``), as OpenAI's strict mode does.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

TOOL_CALL_BEGIN = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_ANY_OBJECT = {"type": "object"}


@dataclass(frozen=True)
class ToolMode:
    kind: str  # "none" | "auto" | "required" | "named"
    name: str | None = None  # the named function


def tool_mode(tools: list | None, tool_choice: Any) -> ToolMode:
    if not tools or tool_choice == "none":
        return ToolMode("none")
    if tool_choice in (None, "auto"):
        return ToolMode("auto")
    if tool_choice == "required":
        return ToolMode("required")
    return ToolMode("named", tool_choice.function.name)


def tool_dicts(tools: list) -> list[dict[str, Any]]:
    """Tool definitions as the chat template receives them."""
    return [{"type": "function", "function": t.function.model_dump(exclude_none=True)} for t in tools]


def _params_schema(tool: Any) -> dict[str, Any]:
    return tool.function.parameters or _ANY_OBJECT


def constraint_fields(mode: ToolMode, tools: list, parallel: bool, structural_tags: bool) -> dict[str, Any]:
    """SamplingParams fields that enforce `mode` (empty when nothing is enforced)."""
    if mode.kind == "named":
        tool = next(t for t in tools if t.function.name == mode.name)
        return {"json_schema": _params_schema(tool)}
    if mode.kind == "required":
        items = [{"type": "object", "properties": {"name": {"enum": [t.function.name]},
                                                   "parameters": _params_schema(t)},
                  "required": ["name", "parameters"]} for t in tools]
        schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": items}}
        if not parallel:
            schema["maxItems"] = 1
        return {"json_schema": schema}
    if mode.kind == "auto" and structural_tags:
        structures = [{"begin": f'{TOOL_CALL_BEGIN}\n{{"name": "{t.function.name}", "arguments": ',
                       "schema": _params_schema(t), "end": f"}}\n{TOOL_CALL_END}"} for t in tools]
        return {"structural_tag": {"type": "structural_tag", "structures": structures,
                                   "triggers": [TOOL_CALL_BEGIN]}}
    return {}


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def make_call(name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": new_call_id(), "type": "function", "function": {"name": name, "arguments": args}}


def parse_output(mode: ToolMode, text: str, tools: list) -> tuple[str | None, list[dict[str, Any]]]:
    """-> (content, tool calls). A named call cut by max_tokens comes back with the raw
    text as its arguments (as OpenAI does); a ``required`` list cut by max_tokens keeps
    its complete calls, and is the content only when it holds none."""
    if mode.kind == "named":
        return None, [make_call(mode.name, text)]
    if mode.kind == "required":
        calls = required_calls(parse_call_array(text)[0])
        return (None, calls) if calls else (text, [])
    if mode.kind == "auto":
        return parse_hermes(text, {t.function.name for t in tools})
    return text, []


def calls_complete(mode: ToolMode, text: str, calls: list[dict[str, Any]]) -> bool:
    """Whether `calls` are whole calls (then the finish reason is ``tool_calls``, also when
    the text went on to max_tokens); only a named call can be cut short."""
    if mode.kind == "named":
        try:
            return isinstance(json.loads(text), dict)
        except json.JSONDecodeError:
            return False
    return bool(calls)


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def parse_call_array(text: str) -> tuple[list[Any], bool]:
    """The complete items of a JSON array, or of the prefix of one (cut by max_tokens)
    -> (items, whether the array was closed)."""
    decoder = json.JSONDecoder()
    i = _skip_ws(text, 0)
    if not text.startswith("[", i):
        return [], False
    items: list[Any] = []
    i += 1
    while True:
        i = _skip_ws(text, i)
        if text.startswith("]", i):
            return items, True
        try:
            item, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return items, False
        if not isinstance(item, (dict, list)):  # a scalar may be a cut-off prefix of itself
            return items, False
        items.append(item)
        i = _skip_ws(text, i)
        if text.startswith(",", i):
            i += 1
        elif text.startswith("]", i):
            return items, True
        else:
            return items, False


def required_calls(items: list[Any]) -> list[dict[str, Any]]:
    return [make_call(c["name"], c.get("parameters", {})) for c in items
            if isinstance(c, dict) and isinstance(c.get("name"), str)]


class RequiredCallStreamer:
    """Streams a ``required`` answer's calls one by one, each as soon as it is complete."""

    def __init__(self) -> None:
        self.text = ""
        self.sent = 0

    def feed(self, text: str) -> list[dict[str, Any]]:
        """-> the calls completed by `text` (in order)."""
        self.text += text
        if "}" not in text and "]" not in text:  # nothing can have completed
            return []
        items = parse_call_array(self.text)[0]
        new = required_calls(items[self.sent:])
        self.sent = len(items)
        return new


def parse_hermes(text: str, names: set[str]) -> tuple[str | None, list[dict[str, Any]]]:
    """Find ``<tool_call>{json}</tool_call>`` blocks naming a known tool; the rest is content."""
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    pos = 0
    for m in _BLOCK.finditer(text):
        call = _parse_call(m.group(1), names)
        if call is None:
            continue
        kept.append(text[pos:m.start()])
        pos = m.end()
        calls.append(call)
    kept.append(text[pos:])
    content = "".join(kept).strip() if calls else text
    return (content or None), calls


def _parse_call(body: str, names: set[str]) -> dict[str, Any] | None:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or obj.get("name") not in names:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return make_call(obj["name"], args)


class AutoToolStreamer:
    """Streams the text of an ``auto`` answer, holding back from ``<tool_call>`` on (and any
    tail that may begin it); ``finish()`` parses what was held back."""

    def __init__(self, names: set[str]):
        self.names = names
        self.held = ""
        self.in_call = False

    def feed(self, text: str) -> str:
        if self.in_call:
            self.held += text
            return ""
        buf = self.held + text
        at = buf.find(TOOL_CALL_BEGIN)
        if at >= 0:
            self.in_call, self.held = True, buf[at:]
            return buf[:at]
        keep = _partial_suffix(buf, TOOL_CALL_BEGIN)
        self.held = buf[len(buf) - keep:] if keep else ""
        return buf[: len(buf) - keep]

    def finish(self) -> tuple[str, list[dict[str, Any]]]:
        """-> (text still to send, tool calls)."""
        if not self.in_call:
            return self.held, []
        content, calls = parse_hermes(self.held, self.names)
        return (content or "") if calls else self.held, calls


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
