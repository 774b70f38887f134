"""Constraints for the engine, compiled off the event loop with a time limit.

`ConstrainBackend` is the engine's grammar backend (``create_matcher(params)``) built
on `furca.constrain`; the server installs it when the engine has none. The engine
builds matchers on the caller's thread, which for ``async_generate`` is the event
loop, so `Constraints.precompile` compiles first in a worker thread (bounded by
``grammar_timeout``); the engine's own ``create_matcher`` then hits the compiler's
cache and only creates the matcher.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from furca.errors import CompileError
from furca.runtime.sampling_params import SamplingParams

logger = logging.getLogger("furca.server")


class ConstrainBackend:
    """``create_matcher(params)`` for every constraint kind of `SamplingParams`."""

    def __init__(self, tokenizer: Any, vocab_size: int):
        from furca.constrain import GrammarCompiler, TokenizerInfo

        info = TokenizerInfo.from_huggingface(tokenizer.hf, vocab_size=vocab_size,
                                              eos_token_ids=list(tokenizer.eos_token_ids))
        self.compiler = GrammarCompiler(info)
        self._compile = {
            "regex": self.compiler.compile_regex,
            "json_schema": lambda v: self.compiler.compile_json_schema(v),
            "ebnf": lambda v: self.compiler.compile_grammar(v),
            "choices": lambda v: self.compiler.compile_choices(list(v)),
            "json_object": lambda _v: self.compiler.compile_json_object(),
            "structural_tag": self._structural_tag,
        }

    def _structural_tag(self, value: str):
        tag = json.loads(value)
        return self.compiler.compile_structural_tag(tag.get("structures", []), tag.get("triggers", []))

    def compile(self, params: SamplingParams):
        kind, value = params.constraint
        return self._compile[kind](value)

    def create_matcher(self, params: SamplingParams):
        return self.compile(params).matcher()

    def supports_structural_tags(self) -> bool:
        """Whether `compile_structural_tag` works (it may be a stub that raises)."""
        probe = {"structures": [{"begin": "<a>", "schema": {"type": "object"}, "end": "</a>"}],
                 "triggers": ["<a>"]}
        try:
            self._structural_tag(json.dumps(probe))
        except CompileError:
            return False
        except Exception:  # noqa: BLE001 - an unfinished implementation: treat as absent
            return False
        return True


class Constraints:
    """Compile the constraints of a request's params in a worker thread, with a limit."""

    def __init__(self, engine: Any, timeout: float, metrics: Any):
        self.engine, self.timeout, self.metrics = engine, timeout, metrics

    @property
    def available(self) -> bool:
        return self.engine.grammar_backend is not None

    async def precompile(self, params_list: list[SamplingParams]) -> None:
        backend = self.engine.grammar_backend
        todo = list({p.constraint: p for p in params_list if p.has_constraint}.values())
        if backend is None or not todo:
            return  # the engine reports "not available" itself
        compile_one = getattr(backend, "compile", None) or backend.create_matcher
        for p in todo:
            start = time.perf_counter()
            try:
                await asyncio.wait_for(asyncio.to_thread(compile_one, p), self.timeout)
            except asyncio.TimeoutError:
                # the worker thread finishes on its own; the result lands in the cache
                raise CompileError(f"the {p.constraint[0]} constraint did not compile within "
                                   f"{self.timeout:g} s; simplify it") from None
            self.metrics.grammar_compile.observe(time.perf_counter() - start)
