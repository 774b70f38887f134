"""Fuzz every operation of /openapi.json (schemathesis): no 5xx, every answer conforms to
the document (its status code is declared, its media type too, its body matches the
declared schema: errors are `ErrorResponse`), and every error is OpenAI-shaped.
Generated bodies are capped (max_tokens, n) so this fits in CI; the examples are
derandomized (the same cases every run) and bounded per operation and mode."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import Unsatisfiable

from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = pytest.mark.default_model

# status code declared, media type declared, body valid against the declared schema
CONFORMANCE = (status_code_conformance, content_type_conformance, response_schema_conformance)

MAX_EXAMPLES = 10  # per operation and mode; with the conformance checks, about the time 12 took without


# schemathesis' pytest plugin (from_fixture / parametrize) does not work with pytest 9, so the
# operations are fuzzed with their hypothesis strategies directly.
# Operations with side effects on other tests' state are left out.
SKIP = {("POST", "/flush_cache"), ("GET", "/flush_cache")}


def _cap_sampling(d: dict) -> None:
    if not isinstance(d, dict):
        return
    if "max_new_tokens" not in d or not isinstance(d["max_new_tokens"], int) or d["max_new_tokens"] > 4:
        d["max_new_tokens"] = 4
    if isinstance(d.get("n"), (int, float)) and d["n"] > 2:
        d["n"] = 2


def cap(body) -> None:
    """Keep generation short: max_tokens <= 4, n <= 2, at most 4 prompts, for every endpoint's shape."""
    if not isinstance(body, dict):
        return
    for key in ("prompt", "text", "input_ids"):
        if isinstance(body.get(key), list) and len(body[key]) > 4 and not isinstance(body[key][0], int):
            body[key] = body[key][:4]
    if "messages" in body or "prompt" in body:
        if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] > 4:
            body["max_tokens"] = 4
        body.pop("max_completion_tokens", None)
        for key in ("n", "best_of"):  # floats like 111.0 validate as ints
            if isinstance(body.get(key), (int, float)) and body[key] > 2:
                body[key] = 2
    if "text" in body or "input_ids" in body:
        sp = body.get("sampling_params")
        if isinstance(sp, list):
            for d in sp:
                _cap_sampling(d)
        elif isinstance(sp, dict):
            _cap_sampling(sp)
        else:
            body["sampling_params"] = {"max_new_tokens": 4}


def test_no_server_errors_and_answers_as_documented(server):
    from hypothesis import given

    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json", headers=server.headers)
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) >= 12
    modes = [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
    for op, mode in [(op, mode) for op in operations for mode in modes]:
        if (op.method.upper(), op.path) in SKIP:
            continue

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                  database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate])  # no shrinking: report as found
        def fuzz(case):
            cap(case.body)
            resp = case.call(base_url=server.url, headers=server.headers, timeout=120)
            assert resp.status_code < 500, (
                f"{case.method} {case.path} {case.body!r} -> {resp.status_code} {resp.text[:500]}")
            try:
                case.validate_response(resp, checks=list(CONFORMANCE), headers=server.headers)
            except FailureGroup as e:  # a BaseExceptionGroup: hypothesis wants an Exception
                raise AssertionError(f"{case.method} {case.path} {case.body!r}:\n{e}") from None
            if resp.status_code >= 400:
                err = resp.json()["error"]
                assert set(err) == {"message", "type", "param", "code"}, resp.text

        try:
            fuzz()
        except Unsatisfiable:  # nothing to make invalid (an operation without parameters)
            assert mode == schemathesis.GenerationMode.NEGATIVE
