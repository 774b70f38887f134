"""SSE chunk streams for /v1/chat/completions and /v1/completions.

Chat: each choice sends ``delta.role`` first, then text (or tool-call deltas), then one
chunk with its ``finish_reason``; with ``stream_options.include_usage`` a last chunk has
``choices: []`` and ``usage``; the stream ends with ``data: [DONE]``. A named tool call
streams its arguments as deltas of tool call 0; ``auto`` holds back text from
``<tool_call>`` on and sends parsed calls at the end; ``required`` sends whole calls at
the end. Logprobs ride on each choice's finish chunk.
"""

from __future__ import annotations

from typing import Any, AsyncIterator

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
        self.call_id = toolmod.new_call_id()

    def deltas(self, text: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not self.started:
            self.started = True
            first: dict[str, Any] = {"role": "assistant", "content": "" if self.mode.kind in ("none", "auto") else None}
            if self.mode.kind == "named":
                first["tool_calls"] = [{"index": 0, "id": self.call_id, "type": "function",
                                        "function": {"name": self.mode.name, "arguments": ""}}]
            out.append(first)
        self.text += text
        if self.mode.kind == "none" and text:
            out.append({"content": text})
        elif self.mode.kind == "auto":
            shown = self.auto.feed(text)
            if shown:
                out.append({"content": shown})
        elif self.mode.kind == "named" and text:
            out.append({"tool_calls": [{"index": 0, "function": {"arguments": text}}]})
        return out

    def final(self) -> tuple[list[dict[str, Any]], bool]:
        """-> (last deltas, whether tool calls were made)."""
        if self.mode.kind == "named":
            return [], True
        if self.mode.kind == "required":
            content, calls = toolmod.parse_output(self.mode, self.text, self.tools)
        elif self.mode.kind == "auto":
            content, calls = self.auto.finish()
        else:
            return [], False
        out: list[dict[str, Any]] = [{"content": content}] if content else []
        for k, call in enumerate(calls):
            out.append({"tool_calls": [{"index": k, **call}]})
        return out, bool(calls)


async def chat_chunks(state: ServerState, stream: EngineStream, req: ChatCompletionRequest,
                       mode: toolmod.ToolMode, rid: str, include_usage: bool) -> AsyncIterator[str]:
    base = fmt.envelope("chat.completion.chunk", rid, state.model_name)
    choices = [_ChatChoice(i, mode, req.tools or []) for i in range(stream.num_outputs)]
    metas: list[dict[str, Any]] = [{} for _ in choices]

    def chunk(i: int, delta: dict[str, Any], reason: str | None = None, **more: Any) -> str:
        return sse({**base, "choices": [{"index": i, "delta": delta, "logprobs": more.get("logprobs"),
                                         "finish_reason": reason, **more}]})

    try:
        async for i, delta in stream:
            ch = choices[i]
            for d in ch.deltas(delta.text):
                yield chunk(i, d)
            if delta.finished:
                meta = metas[i] = delta.meta_info or {}
                last, called = ch.final()
                for d in last:
                    yield chunk(i, d)
                reason = fmt.finish_reason(meta)
                if called and reason == "stop":
                    reason = "tool_calls"
                lp = fmt.chat_logprobs(meta, req.top_logprobs or 0) if req.logprobs else None
                yield chunk(i, {}, reason, logprobs=lp, matched_stop=fmt.matched_stop(meta))
        if include_usage:
            yield sse({**base, "choices": [], "usage": fmt.usage(metas)})
    except Exception as e:  # noqa: BLE001 - the headers are sent: report in the stream
        yield sse(stream_error_body(e))
    finally:
        await stream.aclose()
    yield SSE_DONE


async def completion_chunks(state: ServerState, stream: EngineStream, req: CompletionRequest, rid: str,
                             echo: list[str], num_prompts: int, include_usage: bool) -> AsyncIterator[str]:
    base = fmt.envelope("text_completion", rid, state.model_name)
    metas: list[dict[str, Any]] = [{} for _ in range(stream.num_outputs)]
    started = [False] * stream.num_outputs

    def chunk(i: int, text: str, reason: str | None = None, **more: Any) -> str:
        return sse({**base, "choices": [{"index": i, "text": text, "logprobs": more.pop("logprobs", None),
                                         "finish_reason": reason, **more}]})

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
                lp = fmt.completion_logprobs(meta, req.logprobs or 0) if req.logprobs is not None else None
                yield chunk(i, "", fmt.finish_reason(meta), logprobs=lp, matched_stop=fmt.matched_stop(meta))
        if include_usage:
            yield sse({**base, "choices": [], "usage": fmt.usage(metas, num_prompts)})
    except Exception as e:  # noqa: BLE001 - the headers are sent: report in the stream
        yield sse(stream_error_body(e))
    finally:
        await stream.aclose()
    yield SSE_DONE
