"""SSE chunk streams for /v1/chat/completions and /v1/completions.

Chat: each choice sends ``delta.role`` first, then text (or tool-call deltas), then one
chunk with its ``finish_reason``; every chunk has ``usage: null`` but, with
``stream_options.include_usage``, a last one with ``choices: []`` and the usage; the
stream ends with ``data: [DONE]``. A named tool call streams its arguments as deltas of
tool call 0; ``required`` sends each call whole as soon as it is complete; ``auto`` holds
back text from ``<tool_call>`` on and sends parsed calls at the end. With the legacy
``functions`` API, tool-call deltas go out as ``delta.function_call``. Logprobs ride on
each choice's finish chunk.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable

from furca.server import legacy_functions as legacy
from furca.server import openai_format as fmt
from furca.server import tools as toolmod
from furca.server.errors import stream_error_body
from furca.server.protocol import ChatCompletionRequest, CompletionRequest
from furca.server.state import EngineStream, ServerState
from furca.server.streaming import SSE_DONE, sse


class _ChatChoice:
    """Per choice of a streamed chat answer: role first, then text or tool-call deltas."""

    def __init__(self, index: int, mode: toolmod.ToolMode, tools: list):
        self.index, self.mode, self.tools = index, mode, tools
        self.started = False
        self.text = ""
        self.auto = toolmod.AutoToolStreamer({t.function.name for t in tools}) if mode.kind == "auto" else None
        self.required = toolmod.RequiredCallStreamer() if mode.kind == "required" else None
        self.call_id = toolmod.new_call_id()
        self.num_calls = 0

    def _call_delta(self, call: dict[str, Any]) -> dict[str, Any]:
        self.num_calls += 1
        return {"tool_calls": [{"index": self.num_calls - 1, **call}]}

    def deltas(self, text: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        kind = self.mode.kind
        if not self.started:
            self.started = True
            first: dict[str, Any] = {"role": "assistant", "content": "" if kind in ("none", "auto") else None}
            if kind == "named":
                first["tool_calls"] = [{"index": 0, "id": self.call_id, "type": "function",
                                        "function": {"name": self.mode.name, "arguments": ""}}]
            out.append(first)
        self.text += text
        if kind == "none" and text:
            out.append({"content": text})
        elif kind == "auto":
            shown = self.auto.feed(text)
            if shown:
                out.append({"content": shown})
        elif kind == "named" and text:
            out.append({"tool_calls": [{"index": 0, "function": {"arguments": text}}]})
        elif kind == "required":
            out.extend(self._call_delta(call) for call in self.required.feed(text))
        return out

    def final(self) -> tuple[list[dict[str, Any]], bool]:
        """-> (last deltas, whether whole tool calls were made)."""
        kind = self.mode.kind
        if kind == "named":
            return [], toolmod.calls_complete(self.mode, self.text, [None])
        if kind == "required":
            if self.num_calls:
                return [], True
            return ([{"content": self.text}] if self.text else []), False  # not even one whole call
        if kind == "auto":
            content, calls = self.auto.finish()
            out: list[dict[str, Any]] = [{"content": content}] if content else []
            out.extend(self._call_delta(call) for call in calls)
            return out, bool(calls)
        return [], False


async def chat_chunks(state: ServerState, stream: EngineStream, req: ChatCompletionRequest,
                      mode: toolmod.ToolMode, rid: str, include_usage: bool) -> AsyncIterator[str]:
    base = fmt.envelope("chat.completion.chunk", rid, state.model_name)
    choices = [_ChatChoice(i, mode, req.tools or []) for i in range(stream.num_outputs)]
    metas: list[dict[str, Any]] = [{} for _ in choices]
    old_api = req.legacy_functions

    def chunk(i: int, delta: dict[str, Any] | None, reason: str | None = None, **more: Any) -> str | None:
        if old_api and delta:
            delta = legacy.stream_delta(delta)
            if delta is None:
                return None
        return sse({**base, "choices": [{"index": i, "delta": delta or {}, "logprobs": more.pop("logprobs", None),
                                         "finish_reason": reason, **more}], "usage": None})

    try:
        async for i, delta in stream:
            ch = choices[i]
            for d in ch.deltas(delta.text):
                if (event := chunk(i, d)) is not None:
                    yield event
            if delta.finished:
                meta = metas[i] = delta.meta_info or {}
                last, called = ch.final()
                for d in last:
                    if (event := chunk(i, d)) is not None:
                        yield event
                lp = fmt.chat_logprobs(meta, req.top_logprobs or 0) if req.logprobs else None
                yield chunk(i, {}, fmt.tool_finish_reason(meta, called, old_api), logprobs=lp,
                            matched_stop=fmt.matched_stop(meta))
        if include_usage:
            yield sse({**base, "choices": [], "usage": fmt.usage(metas)})
    except Exception as e:  # noqa: BLE001 - the headers are sent: report in the stream
        yield sse(stream_error_body(e))
    finally:
        await stream.aclose()
    yield SSE_DONE


LogprobsFn = Callable[[int, dict[str, Any]], Any]


async def completion_chunks(state: ServerState, stream: EngineStream, req: CompletionRequest, rid: str,
                            echo: list[str], num_prompts: int, include_usage: bool,
                            logprobs: LogprobsFn) -> AsyncIterator[str]:
    """`logprobs(output index, meta_info)`: the finish chunk's logprobs (or None)."""
    base = fmt.envelope("text_completion", rid, state.model_name)
    metas: list[dict[str, Any]] = [{} for _ in range(stream.num_outputs)]
    started = [False] * stream.num_outputs

    def chunk(i: int, text: str, reason: str | None = None, **more: Any) -> str:
        return sse({**base, "choices": [{"index": i, "text": text, "logprobs": more.pop("logprobs", None),
                                         "finish_reason": reason, **more}], "usage": None})

    try:
        async for i, delta in stream:
            text = delta.text
            if not started[i]:
                started[i] = True
                text = echo[i // req.n] + text
            if text:
                yield chunk(i, text)
            if delta.finished:
                meta = metas[i] = delta.meta_info or {}
                # an echoed prompt's token texts: off the loop (a long prompt takes a while)
                lp = await asyncio.to_thread(logprobs, i, meta) if req.echo else logprobs(i, meta)
                yield chunk(i, "", fmt.finish_reason(meta), logprobs=lp, matched_stop=fmt.matched_stop(meta))
        if include_usage:
            yield sse({**base, "choices": [], "usage": fmt.usage(metas, num_prompts)})
    except Exception as e:  # noqa: BLE001 - the headers are sent: report in the stream
        yield sse(stream_error_body(e))
    finally:
        await stream.aclose()
    yield SSE_DONE
