"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

Every invalid request is a 400 (FastAPI's 422 validation errors are remapped, with
``param`` taken from the error location, written ``messages[0].content[1]``); furca's own
request errors map by class. A request validator raises `FieldError` to say what is wrong
in plain words and which field (relative to where it validates); pydantic's union
internals (``content.str``, ``list[...]`` tags) never reach the client. An unknown route
is a 404 naming the routes furca serves. Bad input never produces a 500: only a bug does.
A body that is not JSON says where (``... at line L column C``, param null); one nested
past `request_fields.MAX_NESTING` says so and the limit. `ErrorResponse` and
`error_responses` declare these answers in the OpenAPI document (a 422 is never sent).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from furca.errors import CompileError, EngineClosedError, FurcaError, InvalidRequestError
from furca.server.streaming import ClientDisconnected

logger = logging.getLogger("furca.server")

_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
          405: "MethodNotAllowed", 408: "RequestTimeout", 413: "RequestTooLarge",
          429: "RateLimitError", 499: "ClientClosedRequest", 500: "InternalServerError",
          503: "ServiceUnavailableError"}


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: int | str | None


class ErrorResponse(BaseModel):
    """Every error answer's body (OpenAI's shape)."""

    error: ErrorDetail


_WHEN = {400: "The request is invalid (the message names the field, `param` its path)",
         401: "No API key, or a wrong one (when the server runs with --api-key)",
         404: "No such model, route or request id",
         413: "The request body is larger than --max-request-bytes",
         429: "The server is overloaded (more requests in flight than it queues); see Retry-After",
         503: "The model is loading, the server is shutting down, the engine stopped, or the request "
              "waited longer than --max-queue-time; see Retry-After"}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries for the error statuses a route can answer."""
    return {status: {"model": ErrorResponse, "description": _WHEN[status]} for status in statuses}


class APIError(Exception):
    """Raise anywhere in a handler; becomes an OpenAI-shaped error response."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers


class FieldError(ValueError):
    """A request validator's error: ``message`` for a person, ``param`` the field it names,
    relative to the validated object (``"content[1]"``, ``"[2]"``, ``"stop"``; None: the
    object itself)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message, self.param = message, param


def error_body(status: int, message: str, param: str | None = None, code: Any = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": _TYPES.get(status, "Error"), "param": param,
                      "code": code if code is not None else status}}


def error_response(status: int, message: str, param: str | None = None, code: Any = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status, headers=headers)


# SamplingParams' names of the parameters the OpenAI API spells otherwise
_OPENAI_PARAM = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens", "top_logprobs_num": "logprobs"}


def from_furca_error(e: FurcaError) -> APIError:
    """Map a FurcaError raised while building or running a request."""
    if isinstance(e, CompileError):
        return APIError(400, f"the constraint does not compile: {e}", code="invalid_constraint")
    if isinstance(e, InvalidRequestError):
        param = getattr(e, "param", None)
        return APIError(400, str(e), param=_OPENAI_PARAM.get(param, param))
    if isinstance(e, EngineClosedError):
        return APIError(503, f"the engine is not running: {e}")
    from furca.errors import QueueTimeoutError  # runtime's max_queue_time

    if isinstance(e, QueueTimeoutError):
        return APIError(503, str(e), code="queue_timeout", headers={"Retry-After": "5"})
    return APIError(400, f"{type(e).__name__}: {e}")


def stream_error_body(e: BaseException) -> dict[str, Any]:
    """The error event of a stream whose headers are already sent."""
    if isinstance(e, APIError):
        return error_body(e.status, e.message, e.param, e.code)
    if isinstance(e, FurcaError):
        api = from_furca_error(e)
        return error_body(api.status, api.message, api.param, api.code)
    logger.error("stream failed (a bug)", exc_info=e)
    return error_body(500, f"internal error: {type(e).__name__}: {e}")


# pydantic names a union member in the error location ('str', 'list[str]', "literal['a']",
# 'function-after[...]', a model's class name); request fields are lower snake case
_UNION_TAG = re.compile(r"^(str|int|float|bool|none|dict\[.*|list\[.*|literal\[.*|function-.*|[A-Z]\w*)$")


def _param(loc: tuple, rel: str | None = None) -> str | None:
    """``("body", "messages", 0, "content")`` -> ``messages[0].content`` (+ `rel`)."""
    out = ""
    for part in loc:
        if part == "body" and not out:
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        elif _UNION_TAG.match(str(part)):
            continue
        else:
            out += f".{part}" if out else str(part)
    if rel:
        out += rel if rel.startswith("[") or not out else f".{rel}"
    return out or None


_EXPECTED = {"int_type": "an integer", "float_type": "a number", "string_type": "a string",
             "bool_type": "true or false", "list_type": "an array", "dict_type": "a JSON object",
             "model_type": "a JSON object", "model_attributes_type": "a JSON object",
             "finite_number": "a finite number"}


def json_type(value: Any) -> str:
    """The JSON type of a parsed value, in words ("a string", "an integer", ...)."""
    if value is None:
        return "null"
    for kind, words in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
                        (list, "an array"), (dict, "an object")):
        if isinstance(value, kind):
            return words
    return type(value).__name__


def _got(value: Any) -> str:
    if isinstance(value, (bool, int, float)) or value is None:
        text = "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)
        return f"{json_type(value)}, {text[:40]}"
    if isinstance(value, str):
        return f"a string, {value[:40]!r}" if len(value) <= 40 else "a string"
    return json_type(value)


def _describe(err: dict[str, Any]) -> tuple[str | None, str]:
    """One pydantic error -> (param, message for a person)."""
    loc = tuple(err.get("loc", ()))
    kind = err.get("type")
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):
        return _param(loc, cause.param), cause.message
    if kind == "json_invalid":
        return None, f"the request body is not valid JSON: {cause or err.get('msg')}"
    param = _param(loc)
    msg = str(err.get("msg", "invalid"))
    msg = msg[len("Value error, "):] if msg.startswith("Value error, ") else msg
    value = err.get("input")
    if kind == "missing" and loc == ("body",):
        return None, "the request needs a JSON body (an object, with Content-Type: application/json)"
    if kind == "missing":
        msg = "this field is required"
    elif isinstance(value, (bytes, bytearray)) and not param:
        return None, "the request body must be a JSON object, sent with Content-Type: application/json"
    elif kind in _EXPECTED:
        msg = f"must be {_EXPECTED[kind]}, got {_got(value)}"
    elif kind in _BOUNDS and _BOUNDS[kind][1] in (err.get("ctx") or {}):
        words, key = _BOUNDS[kind]
        msg = f"must be {words} {err['ctx'][key]}, got {_got(value)}"
    elif kind == "extra_forbidden":
        field = str(loc[-1]) if loc else "?"
        return param, f"{param}: unknown key {field!r}" + (
            f"; accepted: {', '.join(_SAMPLING_KEYS())}" if "sampling_params" in (param or "") else "")
    elif kind in ("union_tag_not_found", "union_tag_invalid"):
        msg = "must be a JSON object of one of the accepted kinds"
    return param, f"{param or 'body'}: {msg}"


_BOUNDS = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("<=", "le"),
           "less_than": ("<", "lt")}
_TYPE_ERRORS = {"int_type", "float_type", "string_type", "bool_type", "list_type", "dict_type", "model_type",
                "model_attributes_type", "none_required", "literal_error"}


def _SAMPLING_KEYS() -> list[str]:  # noqa: N802 - a late import: protocol imports this module
    from furca.server.protocol_native import NativeSamplingParams

    return sorted(NativeSamplingParams.model_fields)


def _deepest(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop a union member's type mismatch when another member got further into the value
    (``sampling_params: must be an array`` beside ``sampling_params.bogus: unknown key``)."""
    params = [(_param(tuple(e.get("loc", ()))) or "", e) for e in errors]
    keep = []
    for p, e in params:
        deeper = any(q != p and (q.startswith(p + ".") or q.startswith(p + "[")) for q, _ in params)
        if not (e.get("type") in _TYPE_ERRORS and deeper):
            keep.append(e)
    return keep or errors


def validation_error(errors: list[dict[str, Any]]) -> tuple[str | None, str]:
    """pydantic errors -> (param of the first, one message); errors of one field (a union's
    members) are reported once."""
    seen: dict[str | None, str] = {}
    for err in _deepest(errors):
        param, msg = _describe(err)
        seen.setdefault(param, msg)
    if not seen:
        return None, "invalid request"
    first = next(iter(seen))
    return first, "; ".join(list(seen.values())[:5])


def invalid_json(err: dict[str, Any], doc: Any) -> str:
    """"the request body is not valid JSON: <reason> at line L column C"."""
    reason = (err.get("ctx") or {}).get("error") or "JSON decode error"
    loc = err.get("loc") or ()
    pos = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else None
    if pos is None or not isinstance(doc, str):
        return f"the request body is not valid JSON: {reason}"
    line = doc.count("\n", 0, pos) + 1
    column = pos - doc.rfind("\n", 0, pos)
    return f"the request body is not valid JSON: {reason} at line {line} column {column}"


def unreadable_body(cause: BaseException | None) -> str:
    """Why FastAPI could not read a body ("There was an error parsing the body")."""
    from furca.server.request_fields import MAX_NESTING

    if isinstance(cause, RecursionError):
        return (f"the request body is nested too deeply: at most {MAX_NESTING} levels of arrays and objects "
                f"(limit {MAX_NESTING})")
    if isinstance(cause, UnicodeDecodeError):
        bad = cause.object[cause.start:cause.start + 1]
        return f"the request body is not valid UTF-8: byte {cause.start} ({bad!r})"
    return f"the request body could not be read: {type(cause).__name__ if cause else 'unknown error'}: {cause}"


def _route_list(app: Any) -> list[str]:
    """The app's API routes (its OpenAPI paths, which FastAPI builds once and keeps)."""
    try:
        return sorted(app.openapi()["paths"])
    except Exception:  # noqa: BLE001 - the 404 must not fail for it
        return []


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, e: APIError):
        return error_response(e.status, e.message, e.param, e.code, e.headers)

    @app.exception_handler(FurcaError)
    async def _furca_error(_: Request, e: FurcaError):
        api = from_furca_error(e)
        return error_response(api.status, api.message, api.param, api.code, api.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError):
        errs = list(e.errors())
        if errs and errs[0].get("type") == "json_invalid":  # FastAPI: loc ("body", offset), body: the text
            return error_response(400, invalid_json(errs[0], e.body))
        param, message = validation_error(errs)
        return error_response(400, message, param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException):
        where = f"{request.method} {request.url.path}"
        if e.status_code == 400 and e.detail == "There was an error parsing the body":
            return error_response(400, unreadable_body(e.__cause__))
        if e.status_code == 404 and e.detail == "Not Found":
            return error_response(404, f"{where} is not served by furca; it serves "
                                       f"{', '.join(_route_list(request.app))}", code="unknown_route")
        if e.status_code == 405:
            return error_response(405, f"{where}: method not allowed", headers=getattr(e, "headers", None))
        return error_response(e.status_code, str(e.detail), headers=getattr(e, "headers", None))

    @app.exception_handler(ClientDisconnected)
    async def _gone(_: Request, e: ClientDisconnected):
        return error_response(499, "the client closed the connection; the request was aborted")

    @app.exception_handler(Exception)
    async def _bug(_: Request, e: Exception):
        logger.exception("unhandled error (a bug)")
        return error_response(500, f"internal error: {type(e).__name__}: {e}")
