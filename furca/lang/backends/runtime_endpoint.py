"""`RuntimeEndpoint`: programs on a server speaking SGLang's native API (``/generate``),
so a ``furca serve`` and a real SGLang server alike.

Roles render with the chat template the server uses, found in this order: the
``chat_template`` argument, else ``chat_template`` in ``/get_model_info`` (furca
reports it with ``bos_token`` / ``eos_token``; null: the server renders ChatML), else,
for a server that does not report it (SGLang), the tokenizer files under the reported
``model_path`` when that is a directory on this machine; last ChatML (with a warning).

Each program run opens a server session (``/open_session``, SGLang's route; none where
the server lacks it), sends its id with every ``gen`` and closes it at the end, so the
run's KV stays pinned between its calls.

``select`` tokenizes through ``/tokenize`` when the server has it (furca's does), so
each option is scored on exactly its own tokens; otherwise it asks for a few tokens
more than the prefix and keeps the shortest run of trailing tokens that spells the
option.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterator

from furca.lang.backends.base import GenerateRequest, GenerateResult, SelectRequest, StreamChunk
from furca.lang.chat import CHATML_TEMPLATE, ChatFormat, TemplateChatFormat, jinja_renderer
from furca.lang.choices import ChoicesDecision, decide
from furca.lang.errors import BackendRequestError

logger = logging.getLogger("furca.lang")

_SCORE = {"max_new_tokens": 0, "temperature": 0.0}
_SESSION_CAPACITY = 1 << 20  # SGLang's required open_session field (furca ignores it)


def _common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _error_message(response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)
        return str(err)
    return str(body)


_SEGMENT_KEYS = ("output_token_logprobs", "output_top_logprobs")


def _merge_logprob_segments(merged: dict[str, list], meta: dict[str, Any]) -> dict[str, Any]:
    """A stream event's meta_info with its output logprobs made cumulative (``merged``
    keeps them between events). Events hold their own segment and
    ``output_token_logprobs_length``, the count so far: the list so far is
    ``merged[:length - len(segment)] + segment``, which is plain concatenation, drops
    entries a retraction took back, and equally reads a server that sends the whole list
    each time (SGLang without ``--incremental-streaming-output``)."""
    if "output_token_logprobs" not in meta:
        return meta
    out = dict(meta)
    segment = meta["output_token_logprobs"] or []
    length = meta.get("output_token_logprobs_length")
    if not isinstance(length, int):  # a server that sends the whole list only at the end
        length = len(merged.get("output_token_logprobs", [])) + len(segment)
    keep = max(length - len(segment), 0)
    for key in _SEGMENT_KEYS:
        if key in meta:
            so_far = merged.setdefault(key, [])
            del so_far[keep:]
            so_far.extend(meta[key] or [])
            out[key] = so_far
    return out


def _local_chat_template(model_path: str | None) -> str | None:
    """The chat template shipped beside a local model (tokenizer_config.json or
    chat_template.jinja), read as plain files."""
    if not model_path:
        return None
    path = Path(model_path)
    if not path.is_dir():
        return None
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    config = path / "tokenizer_config.json"
    if config.is_file():
        template = json.loads(config.read_text()).get("chat_template")
        if isinstance(template, str):
            return template
    return None


class RuntimeEndpoint:
    def __init__(self, base_url: str, api_key: str | None = None, *, chat_template: str | None = None,
                 timeout: float = 600.0, verify: Any = True):
        import httpx

        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout, verify=verify)
        self.model_info = self._get("/get_model_info")
        self._template = chat_template
        self._chat: ChatFormat | None = None
        self._can_tokenize: bool | None = None
        self._sessions: bool | None = None  # whether the server has /open_session (None: not tried)

    # -- HTTP --------------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        import httpx

        try:
            response = self._client.request(method, path, json=body)
        except httpx.HTTPError as e:
            raise BackendRequestError(f"{method} {self.base_url}{path} failed: {type(e).__name__}: {e}") from e
        if response.status_code != 200:
            raise BackendRequestError(
                f"{self.base_url}{path} answered {response.status_code}: {_error_message(response)}",
                status_code=response.status_code,
            )
        return response.json() if response.content else None

    def _get(self, path: str) -> Any:
        return self._call("GET", path)

    def _post(self, path: str, body: Any) -> Any:
        return self._call("POST", path, body)

    def get_model_name(self) -> str:
        return str(self.model_info.get("model_path"))

    # -- Backend -------------------------------------------------------------------------------

    def chat_format(self) -> ChatFormat:
        if self._chat is None:
            template = self._template
            if template is None:
                if "chat_template" in self.model_info:  # the server says which (furca serve)
                    template = self.model_info["chat_template"]
                else:  # a server that does not say: the model's files, if they are on this machine
                    template = _local_chat_template(self.model_info.get("model_path"))
            if template is None:
                logger.warning("no chat template from %s; roles are rendered as ChatML (pass chat_template=)",
                               self.base_url)
                template = CHATML_TEMPLATE
            specials = {k: self.model_info.get(k) for k in ("bos_token", "eos_token") if self.model_info.get(k)}
            self._chat = TemplateChatFormat(jinja_renderer(template, **specials))
        return self._chat

    def _generate_body(self, request: GenerateRequest, stream: bool) -> dict[str, Any]:
        params = request.params.to_dict()
        body: dict[str, Any] = {"text": request.text, "stream": stream}
        for key in ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs"):
            if key in params:  # top-level in SGLang's API
                body[key] = params.pop(key)
        body["sampling_params"] = params
        if request.session_id is not None:
            body["session_id"] = request.session_id
        return body

    def generate(self, request: GenerateRequest) -> GenerateResult:
        out = self._post("/generate", self._generate_body(request, stream=False))
        if isinstance(out, list):
            return GenerateResult(out[0]["text"], out[0]["meta_info"], tuple(o["text"] for o in out),
                                  tuple(o["meta_info"] for o in out))
        return GenerateResult(out["text"], out["meta_info"])

    def generate_stream(self, request: GenerateRequest) -> Iterator[StreamChunk]:
        import httpx

        body = self._generate_body(request, stream=True)
        try:
            with self._client.stream("POST", "/generate", json=body) as response:
                if response.status_code != 200:
                    response.read()
                    raise BackendRequestError(
                        f"{self.base_url}/generate answered {response.status_code}: {_error_message(response)}",
                        status_code=response.status_code)
                seen = 0
                merged: dict[str, list] = {}
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    event = json.loads(data)
                    if "error" in event:
                        raise BackendRequestError(f"{self.base_url}/generate stream failed: {event['error']}")
                    if event.get("index", 0) != 0:
                        continue
                    text = event["text"]  # cumulative
                    meta = event.get("meta_info")
                    if meta:
                        meta = _merge_logprob_segments(merged, meta)
                    done = bool(meta and meta.get("finish_reason"))
                    yield StreamChunk(text[seen:], meta if done else None)
                    seen = len(text)
        except httpx.HTTPError as e:
            raise BackendRequestError(f"POST {self.base_url}/generate (stream) failed: {e}") from e

    def select(self, request: SelectRequest) -> ChoicesDecision:
        entries = self._score_exact(request) if self._tokenize_ok() else None
        if entries is None:
            entries = self._score_by_text(request)
        unconditional = None
        if getattr(request.choices_method, "requires_unconditional_logprobs", False):
            outs = self._post("/generate", {
                "input_ids": [[e[1] for e in option] for option in entries], "sampling_params": dict(_SCORE),
                "return_logprob": True, "logprob_start_len": 0, "return_text_in_logprobs": True})
            unconditional = [list(o["meta_info"]["input_token_logprobs"]) for o in outs]
            for option, uncond in zip(entries, unconditional):
                if not uncond:
                    uncond.append([None, option[0][1], option[0][2]])
        return decide(request.choices_method, request.choices, entries, unconditional)

    def _tokenize_ok(self) -> bool:
        if self._can_tokenize is None:
            try:
                self._post("/tokenize", {"prompt": "a"})
                self._can_tokenize = True
            except BackendRequestError:
                self._can_tokenize = False
        return self._can_tokenize

    def _score_exact(self, request: SelectRequest) -> list[list[list[Any]]]:
        texts = [request.text + c for c in request.choices]
        tokens = self._post("/tokenize", {"prompt": [request.text or " "] + texts})["tokens"]
        prefix, fulls = (tokens[0] if request.text else []), tokens[1:]
        starts = [min(_common_prefix_len(prefix, ids), len(ids) - 1) for ids in fulls]
        first = min(starts)
        outs = self._post("/generate", {"input_ids": fulls, "sampling_params": dict(_SCORE), "return_logprob": True,
                                        "logprob_start_len": first, "return_text_in_logprobs": True})
        return [list(o["meta_info"]["input_token_logprobs"])[s - first:] for o, s in zip(outs, starts)]

    def _score_by_text(self, request: SelectRequest) -> list[list[list[Any]]]:
        prompt_len = self._post("/generate", {"text": request.text, "sampling_params": dict(_SCORE)})[
            "meta_info"]["prompt_tokens"] if request.text else 0
        outs = self._post("/generate", {
            "text": [request.text + c for c in request.choices], "sampling_params": dict(_SCORE),
            "return_logprob": True, "logprob_start_len": max(prompt_len - 2, 0), "return_text_in_logprobs": True})
        result = []
        for choice, out in zip(request.choices, outs):
            entries = list(out["meta_info"]["input_token_logprobs"])
            covered, keep = 0, 0
            while keep < len(entries) and covered < len(choice):  # shortest tail that spells the option
                keep += 1
                covered += len(entries[-keep][2] or "")
            result.append(entries[-max(keep, 1):])
        return result

    def cache_prefix(self, text: str) -> None:
        if text:
            self._post("/generate", {"text": text, "sampling_params": {"max_new_tokens": 0}})

    def flush_cache(self) -> bool:
        try:
            self._post("/flush_cache", {})
            return True
        except BackendRequestError as e:
            if e.status_code == 400:
                return False
            raise

    def open_session(self) -> str | None:
        """A server session for one program run (furca.lang.program_session): its KV stays
        pinned between the run's calls. None, from then on, where the server has no
        ``/open_session`` (404 or 405)."""
        if self._sessions is False:
            return None
        try:
            sid = self._post("/open_session", {"capacity_of_str_len": _SESSION_CAPACITY})
        except BackendRequestError as e:
            if e.status_code in (404, 405):
                self._sessions = False
                return None
            raise
        self._sessions = True
        return sid

    def close_session(self, session_id: str) -> None:
        self._post("/close_session", {"session_id": session_id})

    def get_server_info(self) -> dict[str, Any]:
        try:
            return self._get("/get_server_info")
        except BackendRequestError:
            return self._get("/server_info")

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"RuntimeEndpoint({self.base_url!r})"
