"""Rendering roles as text.

A backend gives the interpreter a `ChatFormat`: ``markers(history, role)`` returns the
text written before a role's content and after it. `TemplateChatFormat` derives them
from the model's own chat template (a function ``render(messages,
add_generation_prompt) -> str``, usually the tokenizer's jinja template): it renders
the history, then the history plus a message whose content is a sentinel, and cuts the
difference at the sentinel. Whatever the template adds (a default system prompt, a
BOS token, separators) lands in the markers, so ``s.text()`` is exactly what the
template would produce for ``s.messages()``.

`PlainChatFormat` is for backends that take messages (OpenAI): the text only shows
roles as ``ROLE: content`` lines; the backend sends ``messages``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

logger = logging.getLogger("furca.lang")

_SENTINEL = "\u2063FURCA-CONTENT\u2063"  # invisible separators around a marker no template alters


@dataclass(frozen=True)
class Message:
    role: str
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


History = tuple[Message, ...]


class ChatFormat:
    #: True when the backend consumes ``messages`` rather than the rendered text
    uses_messages: bool = False

    def markers(self, history: History, role: str) -> tuple[str, str]:
        """``(prefix, suffix)`` around the content of a ``role`` message that follows
        ``history`` (the completed messages so far). Pure; cached."""
        raise NotImplementedError


class TemplateChatFormat(ChatFormat):
    def __init__(self, render: Callable[[list[dict[str, Any]], bool], str]):
        self._render = render
        self.markers = lru_cache(maxsize=1024)(self._markers)  # type: ignore[method-assign]

    def _markers(self, history: History, role: str) -> tuple[str, str]:
        messages = [m.to_dict() for m in history]
        before = self._render(messages, False) if messages else ""
        full = self._render(messages + [{"role": role, "content": _SENTINEL}], False)
        cut = full.find(_SENTINEL)
        if cut < 0:
            raise ValueError(f"the chat template dropped the content of a {role!r} message")
        if full.startswith(before):
            start = len(before)
        else:  # the template re-renders earlier turns differently; keep what is common
            start = len(os.path.commonprefix([before, full]))
            logger.warning("chat template is not prefix-stable at a %r turn; role markers are approximate", role)
        return full[start:cut], full[cut + len(_SENTINEL):]


class PlainChatFormat(ChatFormat):
    uses_messages = True

    def markers(self, history: History, role: str) -> tuple[str, str]:
        return f"{role.upper()}: ", "\n"


CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def jinja_renderer(template: str, **variables: Any) -> Callable[[list[dict[str, Any]], bool], str]:
    """``render(messages, add_generation_prompt)`` for a jinja chat template (as
    transformers renders it: sandboxed, ``raise_exception``, ``tojson``, ``strftime_now``)."""
    import json
    from datetime import datetime

    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        from jinja2.exceptions import TemplateError

        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    compiled = env.from_string(template)

    def render(messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return compiled.render(messages=messages, add_generation_prompt=add_generation_prompt, **variables)

    return render
