"""The OpenAPI document (``/openapi.json``) as the server behaves.

Routes declare their answers with `errors.error_responses` (400, 401, 404, 413, 429, 503:
`errors.ErrorResponse`, OpenAI's error shape) and their success media types (`JSON_OR_SSE`:
``application/json``, or ``text/event-stream`` with ``"stream": true``; `NO_BODY` for
/health's empty 200). FastAPI adds a 422 "Validation Error" to every route with a body,
but furca answers validation errors with 400 (errors.py), so `install` takes the 422s and
their schemas out of the document. tests/server/test_openapi_contract.py and
tests/server/test_schemathesis.py hold the server to the document.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from furca.server.errors import error_responses

SSE = "text/event-stream"

# one server-sent event (before OpenAPI 3.2, a text/event-stream schema describes an event)
SSE_EVENT = {"type": "object", "required": ["data"],
             "properties": {"data": {"type": "string", "description": "a JSON chunk, or [DONE] last"},
                            "event": {"type": "string"}, "id": {"type": "string"}}}

# 200 of a route that streams with "stream": true
JSON_OR_SSE: dict[int | str, dict[str, Any]] = {
    200: {"description": "The answer (application/json), or with \"stream\": true a stream of server-sent events "
                         "ending with `data: [DONE]`",
          "content": {"application/json": {}, SSE: {"schema": SSE_EVENT}}}}
NO_BODY: dict[int | str, dict[str, Any]] = {200: {"description": "OK (no body)"}}

# what each kind of route can answer besides its 200 (401: only with --api-key; 413: past
# --max-request-bytes; 429: past --max-queued-requests; 503: loading, draining, engine gone)
GENERATES = error_responses(400, 401, 404, 413, 429, 503)
TAKES_BODY = error_responses(400, 401, 413, 503)
READS = error_responses(401, 503)
READS_BY_ID = error_responses(401, 404, 503)


def _drop_422(doc: dict[str, Any]) -> dict[str, Any]:
    for path in doc.get("paths", {}).values():
        for op in path.values():
            if isinstance(op, dict):
                op.get("responses", {}).pop("422", None)
    schemas = doc.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    return doc


def install(app: FastAPI) -> None:
    """Build the document once, without the 422s FastAPI adds."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _drop_422(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
