"""The server's compile pool (furca/server/grammar.py) over the real grammar backend.

A tiny BPE tokenizer (300 tokens) with the real `ConstrainBackend`: slow schemas are slow
in their translation and automaton, whatever the vocabulary. No timing assertions: the
deadline's effect is checked by state (the pool's counters, the compiler's cache).
"""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace

import pytest

from furca.constrain.json_schema.schema_keys import schema_key
from furca.errors import CompileError
from furca.runtime.grammar_backend import ConstrainBackend
from furca.runtime.sampling_params import SamplingParams
from furca.server.grammar import Constraints
from furca.server.metrics import Metrics

from tests.server.conftest import _runtime_fixtures


def _props(n: int, seed: int) -> dict:
    return {"type": "object", "properties": {f"property_number_{i}_{seed}_é": {"type": ["string", "integer", "null"]}
                                             for i in range(n)}}


def slow_schema(seed: int) -> str:
    """Seconds to compile on any machine (an anyOf of 40 objects of 80 optional properties)."""
    import json

    return json.dumps({"anyOf": [_props(80, 100 * seed + k) for k in range(40)]})


@pytest.fixture(scope="module")
def backend():
    tok = _runtime_fixtures().build_tiny_hf_tokenizer()
    b = ConstrainBackend(tok, len(tok), [tok.convert_tokens_to_ids("<|im_end|>")])
    b.compiler  # build the tokenizer tables once
    return b


def constraints(backend, timeout: float, workers: int) -> Constraints:
    return Constraints(SimpleNamespace(grammar_backend=backend), timeout, Metrics(), workers)


async def wait_idle(c: Constraints, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not c.idle:
        assert time.monotonic() < deadline, "the compile pool never became idle"
        await asyncio.sleep(0.05)


def cached(backend, p: SamplingParams) -> bool:
    c = backend.compiler
    key = schema_key(json.loads(p.constraint[1]))  # the compile cache's key of a schema
    return any(k[0] == "json_schema" and k[1] == key for k in list(c._cache))


def test_slow_compile_gets_the_timeout_and_its_thread_stops(backend):
    c = constraints(backend, timeout=0.2, workers=1)
    p = SamplingParams(json_schema=slow_schema(1))

    async def run():
        with pytest.raises(CompileError, match=r"the json_schema constraint did not compile within 0.2 s"):
            await c.precompile([p])
        await wait_idle(c)  # the thread stopped at the deadline (not after the whole compile)

    asyncio.run(run())
    assert c.started == 1 and c.busy == 0
    assert not cached(backend, p)  # stopped: nothing partial in the cache
    c.close()


def test_a_compile_queued_behind_a_full_pool_counts_its_wait(backend):
    """One worker, two slow constraints in one request: the second waits in the queue
    while the first uses the request's whole deadline, so it never starts."""
    c = constraints(backend, timeout=0.3, workers=1)
    a, b = SamplingParams(json_schema=slow_schema(2)), SamplingParams(json_schema=slow_schema(3))

    async def run():
        with pytest.raises(CompileError, match="did not compile within 0.3 s"):
            await c.precompile([a, b])
        await wait_idle(c)

    asyncio.run(run())
    assert c.started == 1  # b's deadline passed while it was queued
    assert not cached(backend, a) and not cached(backend, b)
    c.close()


def test_identical_concurrent_compiles_compile_once(backend):
    c = constraints(backend, timeout=600, workers=2)
    schema = '{"type": "object", "properties": {"a": {"type": "string", "maxLength": 40}, "b": {"enum": [1, 2, 3]}}}'
    p1, p2 = SamplingParams(json_schema=schema), SamplingParams(json_schema=schema, temperature=0.5)
    assert p1.compile_key == p2.compile_key

    async def run():
        await asyncio.gather(c.precompile([p1]), c.precompile([p2]))
        await wait_idle(c)

    asyncio.run(run())
    assert c.started == 1 and cached(backend, p1)
    c.close()


def test_compiles_run_on_the_pool_threads(backend):
    """Not on the event loop's default executor (where /tokenize and chat rendering run)."""
    c = constraints(backend, timeout=600, workers=2)
    seen = []
    compile_real = backend.compile

    class Recording:
        def compile(self, params, *, deadline=None, limit_s=None):
            import threading

            seen.append((threading.current_thread().name, deadline is not None, limit_s))
            return compile_real(params, deadline=deadline, limit_s=limit_s)

    c.engine = SimpleNamespace(grammar_backend=Recording())
    asyncio.run(c.precompile([SamplingParams(regex="[a-z]{1,9}@pool")]))
    assert len(seen) == 1 and seen[0][0].startswith("furca-grammar") and seen[0][1] and seen[0][2] == 600
    c.close()


def test_bad_constraints_are_compile_errors_not_timeouts(backend):
    c = constraints(backend, timeout=600, workers=1)
    with pytest.raises(CompileError, match=r"structures must be an array of objects, got integer"):
        asyncio.run(c.precompile([SamplingParams(structural_tag='{"structures": 5, "triggers": ["<a"]}')]))
    with pytest.raises(CompileError, match=r"structures\[0\].begin must be a non-empty string"):
        asyncio.run(c.precompile([SamplingParams(
            structural_tag='{"structures": [{"begin": 1, "schema": {}, "end": "x"}], "triggers": ["<a"]}')]))
    c.close()
