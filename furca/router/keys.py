"""The routing key of a request: the text its prompt starts with, read from the JSON body
the way each route spells its prompt (chat ``messages``, completions ``prompt``, native
``text`` / ``input_ids``). A body the router cannot read gives the empty key: the request
is routed by load alone and the replica answers it (with its own 400 when it is invalid).

The router does not validate requests (the replicas do, and their answers pass through);
it reads only what routing needs.
"""

from __future__ import annotations

from typing import Any


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: the text ones
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _prompt_text(prompt: Any) -> str:
    """A completions prompt or native text / input_ids: a string, token ids, or a batch of
    either (the first one routes it)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) for t in prompt):
            return " ".join(map(str, prompt))
        return _prompt_text(prompt[0])
    return ""


def routing_key(path: str, body: Any) -> str:
    """The key for a request to `path` with parsed JSON `body` ("" when there is none)."""
    if not isinstance(body, dict):
        return ""
    if path.endswith("/chat/completions"):
        messages = body.get("messages")
        if not isinstance(messages, list):
            return ""
        return "".join(f"<{m.get('role')}>{_content_text(m.get('content'))}\n"
                       for m in messages if isinstance(m, dict))
    if path.endswith("/completions"):
        return _prompt_text(body.get("prompt"))
    if path == "/generate":
        return _prompt_text(body.get("text") if body.get("text") is not None else body.get("input_ids"))
    return ""
