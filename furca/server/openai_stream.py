"""SSE chunk streams for /v1/chat/completions and /v1/completions.

Chat: each choice sends ``delta.role`` first, then text (or tool-call deltas), then one
chunk with its ``finish_reason``; every chunk has ``usage: null`` but, with
``stream_options.include_usage``, a last one with ``choices: []`` and the usage; the
stream ends with ``data: [DONE]``. A named tool call streams its arguments as deltas of
tool call 0; ``required`` sends each call whole as soon as it is complete; ``auto`` holds
back text from ``<tool_call>`` on and sends parsed calls at the end. With the legacy
``functions`` API, tool-call deltas go out as ``delta.function_call``. Logprobs ride on
the chunk of their tokens (`stream_logprobs.py`): chat chunks carry ``logprobs.content``
items, completion chunks ``tokens`` / ``token_logprobs`` / ``top_logprobs`` /
``text_offset`` (the echoed prompt's with the echo); entries a constrained request may
still re-tokenize, or with no chunk of their own, go out with a later chunk of the choice.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from furca.server import legacy_functions as legacy
from furca.server import openai_format as fmt
from furca.server import tools as toolmod
from furca.server.errors import stream_error_body
from furca.server.protocol import ChatCompletionRequest, CompletionRequest
from furca.server.state import EngineStream, ServerState
from furca.server.stream_logprobs import CompletionLogprobs, SettledLogprobs, chat_logprobs_chunk
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
    num_top = req.top_logprobs or 0
    feeds = [SettledLogprobs(top=num_top > 0) for _ in choices] if req.logprobs else None
    unsent: list[list[dict[str, Any]]] = [[] for _ in choices]  # logprob items waiting for a chunk

    def body(i: int, delta: dict[str, Any] | None, reason: str | None = None, **more: Any) -> dict | None:
        if old_api and delta:
            delta = legacy.stream_delta(delta)
            if delta is None:
                return None
        return {**base, "choices": [{"index": i, "delta": delta or {}, "logprobs": None, "finish_reason": reason,
                                     **more}], "usage": None}

    def events(i: int, bodies: list[dict | None]) -> list[str]:
        """The chunks of one engine delta; the last one carries the logprobs released so far."""
        out = [b for b in bodies if b is not None]
        if out and unsent[i]:
            out[-1]["choices"][0]["logprobs"] = {"content": unsent[i], "refusal": None}
            unsent[i] = []
        return [sse(b) for b in out]

    try:
        async for i, delta in stream:
            ch = choices[i]
            if feeds is not None:
                unsent[i] += chat_logprobs_chunk(feeds[i], delta, num_top)
            for event in events(i, [body(i, d) for d in ch.deltas(delta.text)]):
                yield event
            if delta.finished:
                meta = metas[i] = delta.meta_info or {}
                last, called = ch.final()
                finish = body(i, {}, fmt.tool_finish_reason(meta, called, old_api), matched_stop=fmt.matched_stop(meta))
                for event in events(i, [body(i, d) for d in last] + [finish]):
                    yield event
        if include_usage:
            yield sse({**base, "choices": [], "usage": fmt.usage(metas)})
    except Exception as e:  # noqa: BLE001 - the headers are sent: report in the stream
        yield sse(stream_error_body(e))
    finally:
        await stream.aclose()
    yield SSE_DONE


async def completion_chunks(state: ServerState, stream: EngineStream, req: CompletionRequest, rid: str,
                            echo: list[str], num_prompts: int, include_usage: bool,
                            prompt_ids: list[list[int]]) -> AsyncIterator[str]:
    """``prompt_ids``: each prompt's tokens (the echoed prompt's logprobs, the left context of
    the first output token's text)."""
    base = fmt.envelope("text_completion", rid, state.model_name)
    metas: list[dict[str, Any]] = [{} for _ in range(stream.num_outputs)]
    started = [False] * stream.num_outputs
    lps = None
    if req.logprobs is not None:
        lps = [CompletionLogprobs(state.tokenizer, prompt_ids[i // req.n], req.logprobs, req.echo)
               for i in range(stream.num_outputs)]

    def chunk(i: int, text: str, reason: str | None = None, **more: Any) -> str:
        return sse({**base, "choices": [{"index": i, "text": text, "logprobs": more.pop("logprobs", None),
                                         "finish_reason": reason, **more}], "usage": None})

    try:
        async for i, delta in stream:
            lp = None
            if lps is not None:
                # an echoed prompt's token texts: off the loop (a long prompt takes a while)
                lp = (await asyncio.to_thread(lps[i].chunk, delta) if lps[i].needs_prompt(delta)
                      else lps[i].chunk(delta))
            text = delta.text
            if not started[i]:
                started[i] = True
                text = echo[i // req.n] + text
            if text:
                yield chunk(i, text, logprobs=lp)
                lp = None
            if delta.finished:
                meta = metas[i] = delta.meta_info or {}
                yield chunk(i, "", fmt.finish_reason(meta), logprobs=lp, matched_stop=fmt.matched_stop(meta))
            elif lp is not None:  # entries without text of their own (held back by a stop check)
                yield chunk(i, "", logprobs=lp)
        if include_usage:
            yield sse({**base, "choices": [], "usage": fmt.usage(metas, num_prompts)})
    except Exception as e:  # noqa: BLE001 - the headers are sent: report in the stream
        yield sse(stream_error_body(e))
    finally:
        await stream.aclose()
    yield SSE_DONE
