"""The engine's grammar backend over `furca.constrain`.

``ConstrainBackend(tokenizer, vocab_size, eos_token_ids)`` offers ``create_matcher(params)``
(the engine's `GrammarHook` factory) for every constraint kind of `SamplingParams`:
regex, json_schema, ebnf (GBNF or Lark), choices, json_object, structural_tag.

- The `TokenizerInfo` (every token's bytes, the token trie: ~1 s for a 50k-128k vocab)
  is built lazily, on the first constrained request, once, under a lock.
- Masks are as wide as the model's logits (``vocab_size``); EOS ids are the engine's.
- Compiling happens on the caller's thread: `Engine.generate`'s thread, or the executor
  thread of `async_generate` (never the scheduler thread, never an event loop). Compiled
  grammars are cached by the compiler (LRU), so ``n`` samples and repeated requests
  compile once; each request gets its own matcher.
- Every failure to compile is a `furca.errors.CompileError` (an unexpected exception
  inside the compiler too, chained as its cause), raised before the request is queued;
  an ill-typed field (a structural tag's ``structures: 5``) names the field, with no
  traceback in the log.
- ``compile(params, deadline=t, limit_s=s)``: the compile's work stops once
  ``time.monotonic()`` passes t (`furca.constrain.compile_deadline`: checked inside the
  compiler's loops), raising `furca.constrain.CompileTimeout` ("did not compile within s
  s"); nothing of it is cached, and the calling thread is free again.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Sequence

from furca.errors import CompileError, FurcaError
from furca.runtime.sampling_params import SamplingParams

logger = logging.getLogger("furca")


class ConstrainBackend:
    """``create_matcher(params)`` / ``compile(params)`` over furca.constrain."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: Sequence[int] | None = None,
                 cache_size: int = 256):
        self.tokenizer = tokenizer
        self.vocab_size = int(vocab_size)
        self.eos_token_ids = list(tokenizer.eos_token_ids if eos_token_ids is None else eos_token_ids)
        self.cache_size = cache_size
        self._compiler = None
        self._lock = threading.Lock()

    # -- the compiler, built on first use ---------------------------------------------------

    @property
    def compiler(self):
        """The `GrammarCompiler` (its `TokenizerInfo` is built on the first call)."""
        compiler = self._compiler
        if compiler is None:
            with self._lock:
                if self._compiler is None:
                    from furca.constrain import GrammarCompiler, TokenizerInfo

                    hf = getattr(self.tokenizer, "hf", self.tokenizer)
                    info = TokenizerInfo.from_huggingface(hf, vocab_size=self.vocab_size,
                                                          eos_token_ids=self.eos_token_ids)
                    self._compiler = GrammarCompiler(info, cache_size=self.cache_size)
                compiler = self._compiler
        return compiler

    @property
    def is_ready(self) -> bool:
        """Whether the tokenizer tables are built (the first constrained request pays ~1 s)."""
        return self._compiler is not None

    # -- compiling --------------------------------------------------------------------------

    def compile(self, params: SamplingParams, *, deadline: float | None = None, limit_s: float | None = None):
        """The cached `CompiledGrammar` of ``params``'s constraint. Raises CompileError.

        deadline: a ``time.monotonic()`` time past which the compile stops (CompileTimeout);
        limit_s: the limit it stands for, named in the message. None: no deadline.

        ``params.allow_extra_properties`` reaches the JSON-schema translator (json_schema and
        a structural tag's schemas) and is part of the compiler's cache key, so a strict and
        a lax compile of one schema never share an entry (``params.compile_key``); so does
        ``params.member_order`` (json_schema only)."""
        if params.constraint is None:
            raise CompileError("the request has no constraint to compile")
        kind, value = params.constraint
        if deadline is None:
            return self._compile(kind, value, params.allow_extra_properties, params.member_order)
        from furca.constrain.deadline import compile_deadline

        with compile_deadline(limit_s, at=deadline):
            return self._compile(kind, value, params.allow_extra_properties, params.member_order)

    def _compile(self, kind: str, value: Any, extra: bool | None, order: str | None = None):
        try:
            c = self.compiler
            if kind == "regex":
                return c.compile_regex(value)
            if kind == "json_schema":
                return c.compile_json_schema(value, allow_extra_properties=extra, member_order=order or "schema")
            if kind == "ebnf":
                return c.compile_grammar(value)
            if kind == "choices":
                return c.compile_choices(list(value))
            if kind == "json_object":
                return c.compile_json_object()
            if kind == "structural_tag":
                try:
                    tag = json.loads(value) if isinstance(value, str) else value
                except ValueError as e:
                    raise CompileError(f"structural_tag is not valid JSON: {e}") from None
                if not isinstance(tag, dict):
                    raise CompileError("structural_tag must be an object with 'structures' and 'triggers'")
                return c.compile_structural_tag(tag.get("structures", []), tag.get("triggers", []),
                                                allow_extra_properties=extra)
        except FurcaError:
            raise
        except RecursionError:
            raise CompileError(f"the {kind} constraint is nested too deeply to compile") from None
        except Exception as e:  # a bug in the compiler must not reach the caller as anything else
            logger.exception("compiling a %s constraint failed unexpectedly", kind)
            raise CompileError(f"the {kind} constraint could not be compiled: {type(e).__name__}: {e}") from e
        raise CompileError(f"unknown constraint kind {kind!r}")

    def create_matcher(self, params: SamplingParams):
        """A fresh matcher for one request (the compiled grammar is shared)."""
        return self.compile(params).matcher()

    def supports_structural_tags(self) -> bool:
        """Whether structural tags compile (tool calling with ``tool_choice=auto``)."""
        probe = {"structures": [{"begin": "<a>", "schema": {"type": "object"}, "end": "</a>"}],
                 "triggers": ["<a>"]}
        try:
            self.compile(SamplingParams(structural_tag=json.dumps(probe)))
        except Exception:  # noqa: BLE001 - unavailable, whatever the reason
            return False
        return True


def default_grammar_backend(tokenizer: Any, vocab_size: int, eos_token_ids: Sequence[int]) -> ConstrainBackend | None:
    """The backend `Engine` installs by default; None (constrained requests rejected) if
    the tokenizer is not a fast (tokenizers-backed) one."""
    hf = getattr(tokenizer, "hf", None)
    if hf is None or getattr(hf, "backend_tokenizer", None) is None:
        logger.warning("constrained decoding unavailable: the tokenizer is not tokenizers-backed")
        return None
    return ConstrainBackend(tokenizer, vocab_size, eos_token_ids)
