"""Tool calling: constraints for tool_choice, and parsing the model's calls.

- named function: the output is that tool's arguments, constrained by its parameter schema;
- ``required``: a JSON list ``[{"name": ..., "parameters": {...}}, ...]`` constrained by
  an ``anyOf`` over the tools (vLLM's schema; ``maxItems: 1`` unless parallel calls);
- ``auto``: free text, or calls in the Hermes format ``<tool_call>{"name": ..., "arguments":
  ...}</tool_call>``. With structural tags the call is constrained once ``<tool_call>``
  appears; without them the text is parsed afterwards (and a malformed call stays text).
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
    """-> (content, tool calls). A forced call that does not parse (cut by max_tokens)
    comes back as the raw text in the call's arguments."""
    if mode.kind == "named":
        return None, [make_call(mode.name, text)]
    if mode.kind == "required":
        try:
            calls = json.loads(text)
        except json.JSONDecodeError:
            return text, []
        if not isinstance(calls, list):
            return text, []
        return None, [make_call(c["name"], c.get("parameters", {})) for c in calls
                      if isinstance(c, dict) and isinstance(c.get("name"), str)]
    if mode.kind == "auto":
        return parse_hermes(text, {t.function.name for t in tools})
    return text, []


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
