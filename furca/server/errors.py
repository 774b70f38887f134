"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

Every invalid request is a 400 (FastAPI's 422 validation errors are remapped, with
``param`` taken from the error location, written ``messages[0].content[1]``); furca's own
request errors map by class. A request validator raises `FieldError` to say what is wrong
in plain words and which field (relative to where it validates); pydantic's union
internals (``content.str``, ``list[...]`` tags) never reach the client. An unknown route
is a 404 naming the routes furca serves. Bad input never produces a 500: only a bug does.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from furca.errors import CompileError, EngineClosedError, FurcaError, InvalidRequestError
from furca.server.streaming import ClientDisconnected

logger = logging.getLogger("furca.server")

_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
          405: "MethodNotAllowed", 408: "RequestTimeout", 413: "RequestTooLarge",
          429: "RateLimitError", 499: "ClientClosedRequest", 500: "InternalServerError",
          503: "ServiceUnavailableError"}


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


def _describe(err: dict[str, Any]) -> tuple[str | None, str]:
    """One pydantic error -> (param, message for a person)."""
    loc = tuple(err.get("loc", ()))
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):
        return _param(loc, cause.param), cause.message
    if err.get("type") == "json_invalid":
        return None, f"the request body is not valid JSON: {cause or err.get('msg')}"
    param = _param(loc)
    msg = str(err.get("msg", "invalid"))
    msg = msg[len("Value error, "):] if msg.startswith("Value error, ") else msg
    if err.get("type") == "missing":
        msg = "this field is required"
    elif err.get("type") in ("model_type", "dict_type", "model_attributes_type"):
        msg = "must be a JSON object"
    return param, f"{param or 'body'}: {msg}"


def validation_error(errors: list[dict[str, Any]]) -> tuple[str | None, str]:
    """pydantic errors -> (param of the first, one message); errors of one field (a union's
    members) are reported once."""
    seen: dict[str | None, str] = {}
    for err in errors:
        param, msg = _describe(err)
        seen.setdefault(param, msg)
    if not seen:
        return None, "invalid request"
    first = next(iter(seen))
    return first, "; ".join(list(seen.values())[:5])


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
        param, message = validation_error(list(e.errors()))
        return error_response(400, message, param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException):
        where = f"{request.method} {request.url.path}"
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
