"""Constraints compiled off the event loop with a time limit.

The grammar backend is the engine's own (``engine.grammar_backend``: by default
`furca.runtime.grammar_backend.ConstrainBackend`; None when the engine has constrained
decoding off, and then the engine rejects constrained requests itself). The engine
compiles a request's constraint while building it, without a time limit, so
`Constraints.precompile` compiles first in a worker thread through the backend's
``compile(params)``, bounded by ``--grammar-timeout`` (over the limit: a 400); the
engine's own ``create_matcher`` then hits the compiler's cache and only creates the
matcher.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from furca.errors import CompileError
from furca.runtime.sampling_params import SamplingParams

logger = logging.getLogger("furca.server")


class Constraints:
    """Compile the constraints of a request's params in a worker thread, with a limit."""

    def __init__(self, engine: Any, timeout: float, metrics: Any):
        self.engine, self.timeout, self.metrics = engine, timeout, metrics

    @property
    def available(self) -> bool:
        return self.engine.grammar_backend is not None

    async def precompile(self, params_list: list[SamplingParams]) -> None:
        backend = self.engine.grammar_backend
        todo = list({p.compile_key: p for p in params_list if p.has_constraint}.values())
        if backend is None or not todo:
            return  # the engine reports "not available" itself
        # the runtime backend's compile(params); a custom backend may only make matchers
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
