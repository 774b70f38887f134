"""Chat messages -> prompt text: the model's chat template, or a ChatML fallback.

The model's template is used whenever it can render the request. A template that
does not know tools (no ``tools`` / ``tool_call`` in its source: SmolLM2's) cannot
render tool definitions, assistant tool calls or tool results, so for such requests
the fallback renders ChatML with tools in the Hermes style (as Qwen2.5 and
NousResearch's Hermes models do) and the server logs it once.

``template_kwargs`` (a request's ``chat_template_kwargs``) become template variables;
names the renderer passes itself (`RESERVED_TEMPLATE_KWARGS`: the messages, the tools,
the template...) are refused, never silently overridden.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from furca.errors import InvalidRequestError

logger = logging.getLogger("furca.server")

# the renderer's own arguments to Tokenizer.apply_chat_template and the template
RESERVED_TEMPLATE_KWARGS = ("self", "messages", "conversation", "tools", "add_generation_prompt", "chat_template",
                            "continue_final_message", "tokenize")


def reserved_kwargs(kwargs: dict[str, Any] | None) -> list[str]:
    """The keys of `kwargs` the renderer sets itself."""
    return [k for k in kwargs or {} if k in RESERVED_TEMPLATE_KWARGS]


TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


def render_chatml_hermes(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                         add_generation_prompt: bool = True) -> str:
    """ChatML with Hermes-style tools: tool definitions in the system turn, assistant
    calls as ``<tool_call>{json}</tool_call>``, results as ``<tool_response>`` in a user turn."""
    out: list[str] = []
    system = None
    rest = messages
    if messages and messages[0]["role"] == "system":
        system, rest = messages[0]["content"] or "", messages[1:]
    if tools:
        head = (system + "\n\n" if system else "") + TOOLS_PREAMBLE
        head += "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools) + TOOLS_POSTAMBLE
        out.append(f"<|im_start|>system\n{head}<|im_end|>\n")
    elif system is not None:
        out.append(f"<|im_start|>system\n{system}<|im_end|>\n")
    for i, m in enumerate(rest):
        role, content = m["role"], m.get("content")
        if role == "assistant":
            parts = [content] if content else []
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                body = json.dumps({"name": fn["name"], "arguments": fn["arguments"]}, ensure_ascii=False)
                parts.append(f"<tool_call>\n{body}\n</tool_call>")
            out.append("<|im_start|>assistant\n" + "\n".join(parts) + "<|im_end|>\n")
        elif role == "tool":
            first = i == 0 or rest[i - 1]["role"] != "tool"
            last = i == len(rest) - 1 or rest[i + 1]["role"] != "tool"
            out.append(("<|im_start|>user" if first else "") + f"\n<tool_response>\n{content}\n</tool_response>"
                       + ("<|im_end|>\n" if last else ""))
        else:
            out.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
    return "".join(out)


def _load_template(value: str) -> str:
    path = Path(value)
    if len(value) < 4096 and "\n" not in value and path.is_file():
        return path.read_text()
    return value


class ChatRenderer:
    """``render(messages, tools, ...) -> prompt text``; thread-safe (call it off the loop)."""

    def __init__(self, tokenizer: Any, chat_template: str | None = None):
        self.tokenizer = tokenizer
        self.template = _load_template(chat_template) if chat_template else tokenizer.chat_template
        src = self.template or ""
        self.supports_tools = "tools" in src and "tool_call" in src
        self._warned = False

    def needs_fallback(self, messages: list[dict[str, Any]], tools: list | None) -> bool:
        if self.template is None:
            return True
        uses_tools = bool(tools) or any(m["role"] == "tool" or m.get("tool_calls") for m in messages)
        return uses_tools and not self.supports_tools

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
               add_generation_prompt: bool = True, continue_final_message: bool = False,
               template_kwargs: dict[str, Any] | None = None) -> str:
        gen = add_generation_prompt and not continue_final_message
        if reserved_kwargs(template_kwargs):
            raise InvalidRequestError(f"chat_template_kwargs may not set {reserved_kwargs(template_kwargs)[0]!r}: "
                                      f"the server sets {', '.join(RESERVED_TEMPLATE_KWARGS)} itself")
        if self.needs_fallback(messages, tools):
            if not self._warned:
                self._warned = True
                why = "has no chat template" if self.template is None else "has a chat template that cannot render tools"
                logger.warning("the model %s: using the ChatML + Hermes tools fallback template", why)
            text = render_chatml_hermes(messages, tools, gen)
        else:
            text = self._render_model(messages, tools, gen, template_kwargs or {})
        if continue_final_message:
            text = _cut_after_final(text, messages[-1].get("content") or "")
        return text

    def _render_model(self, messages, tools, add_generation_prompt, kwargs) -> str:
        # a --chat-template renders in the same sandbox, with the same special tokens
        custom = None if self.template is self.tokenizer.chat_template else self.template
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                                  tools=tools, chat_template=custom, **kwargs)


def _cut_after_final(text: str, final: str) -> str:
    """Drop what the template wrote after the last assistant message's content."""
    if not final:
        return text
    at = text.rfind(final)
    if at < 0:
        raise InvalidRequestError("continue_final_message: the template does not keep the last message's content")
    return text[: at + len(final)]
