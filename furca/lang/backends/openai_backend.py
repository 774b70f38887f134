"""`OpenAI`: programs on any OpenAI-compatible endpoint, through the ``openai`` package.

A program that uses roles talks to ``/v1/chat/completions`` with ``messages()`` (a gen
inside an assistant turn that already has text continues it with
``continue_final_message``, which furca, SGLang and vLLM servers accept); a program
without roles uses ``/v1/completions`` with its text.

Constraints: ``json_schema`` goes as ``response_format``; ``regex`` and ``grammar`` go
as the ``regex`` / ``ebnf`` extras that furca and SGLang servers take (not to
api.openai.com, which cannot). ``select`` scores the options through ``/v1/completions``
with ``echo``, ``logprobs=0`` and ``max_tokens=0`` (one batched request: the prefix plus
each option), keeping the tokens that overlap the option's text by ``text_offset``; furca
and vLLM servers answer it, and a program selects through them as through the native API
(tests/lang/test_programs_remote.py checks the scores agree). A server that does not
return prompt logprobs (api.openai.com) gets a `BackendCapabilityError` that says so, as
does a select inside a chat turn (chat APIs return no prompt logprobs).
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator

from furca.lang.backends.base import GenerateRequest, GenerateResult, SelectRequest, StreamChunk
from furca.lang.chat import ChatFormat, PlainChatFormat
from furca.lang.choices import ChoicesDecision, decide
from furca.lang.errors import BackendCapabilityError, BackendRequestError
from furca.lang.ir import GenParams

# GenParams field -> furca/SGLang server extra (sent in extra_body, never to api.openai.com)
_EXTRAS = {"top_k": "top_k", "min_p": "min_p", "min_new_tokens": "min_tokens", "ignore_eos": "ignore_eos",
           "regex": "regex", "ebnf": "ebnf", "stop_token_ids": "stop_token_ids"}
_NEUTRAL = {"top_k": -1, "min_p": 0.0, "min_new_tokens": 0, "ignore_eos": False, "stop_token_ids": ()}


def _meta(response: Any, choice: Any) -> dict[str, Any]:
    usage = getattr(response, "usage", None)
    details = getattr(usage, "prompt_tokens_details", None) if usage else None
    reason = getattr(choice, "finish_reason", None) if choice is not None else None
    return {
        "id": getattr(response, "id", None),
        "finish_reason": {"type": reason} if reason else None,
        "prompt_tokens": getattr(usage, "prompt_tokens", None),
        "completion_tokens": getattr(usage, "completion_tokens", None),
        "cached_tokens": (getattr(details, "cached_tokens", None) or 0) if details else 0,
    }


class OpenAI:
    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, *,
                 is_chat_model: bool | None = None, **client_kwargs: Any):
        """``is_chat_model=False`` sends every gen to ``/v1/completions`` with the rendered
        text, roles included (for completion-only models); the default picks per gen."""
        import openai

        self._openai = openai
        self.model = model
        self.is_chat_model = is_chat_model
        self.base_url = base_url
        if api_key is None:
            api_key = os.environ.get("OPENAI_API_KEY") or ("EMPTY" if base_url else None)
        self.client = openai.OpenAI(api_key=api_key, base_url=base_url, **client_kwargs)
        self._chat = PlainChatFormat()

    @property
    def is_official(self) -> bool:
        return self.base_url is None or "api.openai.com" in str(self.base_url)

    def chat_format(self) -> ChatFormat:
        return self._chat

    # -- request building ---------------------------------------------------------------------

    def _kwargs(self, params: GenParams, chat: bool) -> dict[str, Any]:
        kw: dict[str, Any] = {"model": self.model}
        if params.max_new_tokens is not None:
            kw["max_tokens"] = params.max_new_tokens
        for name in ("temperature", "top_p", "frequency_penalty", "presence_penalty", "n"):
            if getattr(params, name) is not None:
                kw[name] = getattr(params, name)
        if params.stop:
            kw["stop"] = list(params.stop)
        if params.return_logprob:
            if chat:
                kw["logprobs"] = True
                kw["top_logprobs"] = params.top_logprobs_num or 0
            else:
                kw["logprobs"] = params.top_logprobs_num or 0
        extra: dict[str, Any] = {}
        for field, key in _EXTRAS.items():
            value = getattr(params, field)
            if value is not None and value != _NEUTRAL.get(field, object()):
                if self.is_official:
                    raise BackendCapabilityError(
                        f"api.openai.com does not take {field}; drop it from the gen, or use a furca/SGLang server "
                        f"(OpenAI(model, base_url=...) or RuntimeEndpoint(url))")
                extra[key] = list(value) if isinstance(value, tuple) else value
        if params.json_schema is not None:
            schema = json.loads(params.json_schema)
            if chat or self.is_official:
                kw["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "output", "schema": schema}}
            else:
                extra["json_schema"] = params.json_schema
        if extra:
            kw["extra_body"] = extra
        return kw

    def _messages(self, request: GenerateRequest | SelectRequest) -> tuple[list[dict[str, str]], dict[str, Any]]:
        messages = [m.to_dict() for m in request.messages]
        extra: dict[str, Any] = {}
        if request.open_role is not None and request.open_role != "assistant":
            raise BackendCapabilityError(
                f"a gen inside a {request.open_role!r} turn cannot go to a chat API; end the turn first "
                f"(generate in an assistant turn), or use a backend that renders text (Engine, RuntimeEndpoint)")
        if request.open_role == "assistant" and request.open_content.strip():
            if self.is_official:
                raise BackendCapabilityError(
                    "api.openai.com cannot continue a partly written assistant turn; put the gen at the start "
                    "of the assistant turn")
            messages.append({"role": "assistant", "content": request.open_content})
            extra = {"continue_final_message": True, "add_generation_prompt": False}
        return messages, extra

    def _uses_chat(self, request: GenerateRequest | SelectRequest) -> bool:
        if self.is_chat_model is False:
            return False
        return bool(request.messages) or request.open_role is not None

    def _call(self, fn, **kwargs: Any) -> Any:
        openai = self._openai
        try:
            return fn(**kwargs)
        except openai.APIStatusError as e:
            message = e.message
            try:
                message = e.response.json()["error"]["message"]
            except Exception:  # noqa: BLE001 - keep the client's message
                pass
            raise BackendRequestError(f"{self.base_url or 'api.openai.com'} answered {e.status_code}: {message}",
                                      status_code=e.status_code) from e
        except openai.APIError as e:
            raise BackendRequestError(f"{self.base_url or 'api.openai.com'}: {type(e).__name__}: {e}") from e

    def _create(self, request: GenerateRequest, stream: bool) -> tuple[Any, bool]:
        chat = self._uses_chat(request)
        kw = self._kwargs(request.params, chat)
        if stream:
            kw["stream"] = True
            kw["stream_options"] = {"include_usage": True}
        if chat:
            messages, extra = self._messages(request)
            if extra:
                kw["extra_body"] = {**kw.get("extra_body", {}), **extra}
            return self._call(self.client.chat.completions.create, messages=messages, **kw), True
        return self._call(self.client.completions.create, prompt=request.text, **kw), False

    # -- Backend ---------------------------------------------------------------------------------

    def generate(self, request: GenerateRequest) -> GenerateResult:
        response, chat = self._create(request, stream=False)
        texts = [(c.message.content or "") if chat else c.text for c in response.choices]
        metas = tuple(_meta(response, c) for c in response.choices)
        if len(texts) > 1:
            return GenerateResult(texts[0], metas[0], tuple(texts), metas)
        return GenerateResult(texts[0], metas[0])

    def generate_stream(self, request: GenerateRequest) -> Iterator[StreamChunk]:
        response, chat = self._create(request, stream=True)
        last_choice = None
        for chunk in response:
            for choice in chunk.choices:
                if choice.index != 0:
                    continue
                text = (choice.delta.content or "") if chat else (choice.text or "")
                if choice.finish_reason:
                    last_choice = choice
                if text:
                    yield StreamChunk(text)
            if not chunk.choices and getattr(chunk, "usage", None):
                yield StreamChunk("", _meta(chunk, last_choice))
                last_choice = None
        if last_choice is not None:
            yield StreamChunk("", _meta(None, last_choice))

    def select(self, request: SelectRequest) -> ChoicesDecision:
        if self._uses_chat(request):
            raise BackendCapabilityError(
                "select needs prompt logprobs, which chat APIs do not return; select outside roles on a "
                "completions model, or use Engine / RuntimeEndpoint")
        if getattr(request.choices_method, "requires_unconditional_logprobs", False):
            raise BackendCapabilityError("unconditional_likelihood_normalized needs token ids; use Engine or "
                                         "RuntimeEndpoint for it")
        try:
            response = self._call(self.client.completions.create, model=self.model, max_tokens=0, temperature=0,
                                  echo=True, logprobs=0, prompt=[request.text + c for c in request.choices])
        except BackendRequestError as e:
            raise BackendCapabilityError(
                f"select needs prompt logprobs (completions with echo and logprobs), which this server refused: "
                f"{e}; use RuntimeEndpoint(url) on furca/SGLang servers") from e
        entries = []
        for choice in sorted(response.choices, key=lambda c: c.index):
            lp = choice.logprobs
            if lp is None or not lp.token_logprobs or lp.text_offset is None:
                raise BackendCapabilityError("the server returned no prompt logprobs for select; use "
                                             "RuntimeEndpoint(url) on furca/SGLang servers")
            option = [[lp_, None, tok] for tok, lp_, off in zip(lp.tokens, lp.token_logprobs, lp.text_offset)
                      if off + len(tok) > len(request.text)]
            entries.append(option)
        return decide(request.choices_method, request.choices, entries)

    def cache_prefix(self, text: str) -> None:
        return None  # no cache to warm through this API

    def flush_cache(self) -> bool:
        return False

    def get_server_info(self) -> dict[str, Any]:
        return {"model": self.model, "base_url": self.base_url}

    def __repr__(self) -> str:
        return f"OpenAI({self.model!r}, base_url={self.base_url!r})"
