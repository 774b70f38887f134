"""``Tokenizer``: a thin wrapper over an HF fast tokenizer with what the runtime needs.

``encode(text, add_special_tokens=True)`` equals ``hf(text)["input_ids"]`` (whether a
BOS is prepended is the tokenizer's own post-processor's decision, as in
transformers); the runtime encodes chat-rendered prompts with
``add_special_tokens=False`` because chat templates write their special tokens.
Chat templates are rendered with jinja2 in the same sandbox transformers uses.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from furca.errors import InvalidRequestError, ModelLoadError


class Tokenizer:
    def __init__(self, hf: Any, *, extra_eos_token_ids: Iterable[int] = ()):
        """``hf``: a transformers fast tokenizer; ``extra_eos_token_ids``: EOS ids from
        ``generation_config.json`` / ``config.json``, merged after the tokenizer's."""
        self.hf = hf
        self._backend = hf.backend_tokenizer
        eos = [hf.eos_token_id] if hf.eos_token_id is not None else []
        self.eos_token_ids: list[int] = list(dict.fromkeys([*eos, *map(int, extra_eos_token_ids)]))
        self.bos_token_id: int | None = hf.bos_token_id
        self.pad_token_id: int | None = hf.pad_token_id
        special = set(hf.all_special_ids)
        special.update(i for i, t in hf.added_tokens_decoder.items() if t.special)
        self.special_token_ids: set[int] = special
        self.vocab_size: int = len(hf)
        self.chat_template: str | None = hf.chat_template if isinstance(hf.chat_template, str) else None

    @classmethod
    def from_pretrained(cls, path: str | Path, *, extra_eos_token_ids: Iterable[int] = ()) -> "Tokenizer":
        """Load from a local directory (offline; never touches the network)."""
        from transformers import AutoTokenizer

        try:
            hf = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception as e:  # transformers raises OSError/ValueError/... variously
            raise ModelLoadError(f"cannot load the tokenizer from {path}: {e}") from e
        if not getattr(hf, "is_fast", False) or not hasattr(hf, "backend_tokenizer"):
            raise ModelLoadError(f"the tokenizer in {path} is not a fast (tokenizers) tokenizer")
        return cls(hf, extra_eos_token_ids=extra_eos_token_ids)

    @property
    def bos_token(self) -> str | None:
        """The BOS token's text (what chat templates see as ``bos_token``), or None."""
        return self.hf.bos_token

    @property
    def eos_token(self) -> str | None:
        """The EOS token's text (chat templates' ``eos_token``), or None."""
        return self.hf.eos_token

    @property
    def add_bos_token(self) -> bool:
        """Whether ``encode(text, add_special_tokens=True)`` prepends the BOS token."""
        return self.bos_token_id is not None and self._backend.encode(
            "a", add_special_tokens=True).ids[:1] == [self.bos_token_id]

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return self.hf.convert_ids_to_tokens(list(ids))

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                            tools: list[dict[str, Any]] | None = None, *, chat_template: str | None = None,
                            **kwargs: Any) -> str:
        """Render ``messages`` with the model's chat template, or with ``chat_template``
        (jinja text, e.g. a server's ``--chat-template``) when given: a string, not tokens.
        Either renders in the sandbox transformers uses, with the tokenizer's special
        tokens (``bos_token``, ``eos_token``, ...) as variables. Extra keyword arguments are
        template variables (e.g. ``enable_thinking``). Raises ``InvalidRequestError`` when
        there is no template or the template rejects the messages (its
        ``raise_exception``, or e.g. non-string content)."""
        template = self.chat_template if chat_template is None else chat_template
        if template is None:
            raise InvalidRequestError("this model has no chat template; send a plain prompt instead")
        variables = {
            name: getattr(self.hf, name, None)
            for name in ("bos_token", "eos_token", "unk_token", "pad_token")
        }
        variables.update(kwargs)
        from jinja2.exceptions import TemplateError

        try:
            return _compile(template).render(
                messages=messages, tools=tools, add_generation_prompt=add_generation_prompt, **variables
            )
        except (TemplateError, TypeError, KeyError, AttributeError) as e:
            # raise_exception() in the template, or messages of a shape it cannot render
            whose = "the model's chat template" if chat_template is None else "the chat template"
            raise InvalidRequestError(f"{whose} rejected the messages: {e}") from e


@lru_cache(maxsize=16)
def _compile(template: str):
    """The jinja2 environment transformers renders chat templates in."""
    from jinja2.exceptions import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)
