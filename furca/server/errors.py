"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

Every invalid request is a 400 (FastAPI's 422 validation errors are remapped, with
``param`` taken from the error location); furca's own request errors map by class.
Bad input never produces a 500: only a bug does.
"""

from __future__ import annotations

import logging
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


def error_body(status: int, message: str, param: str | None = None, code: Any = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": _TYPES.get(status, "Error"), "param": param,
                      "code": code if code is not None else status}}


def error_response(status: int, message: str, param: str | None = None, code: Any = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status, headers=headers)


def from_furca_error(e: FurcaError) -> APIError:
    """Map a FurcaError raised while building or running a request."""
    if isinstance(e, CompileError):
        return APIError(400, f"the constraint does not compile: {e}", code="invalid_constraint")
    if isinstance(e, InvalidRequestError):
        return APIError(400, str(e))
    if isinstance(e, EngineClosedError):
        return APIError(503, f"the engine is not running: {e}")
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


def _param(loc: tuple) -> str | None:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or None


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, e: APIError):
        return error_response(e.status, e.message, e.param, e.code, e.headers)

    @app.exception_handler(FurcaError)
    async def _furca_error(_: Request, e: FurcaError):
        api = from_furca_error(e)
        return error_response(api.status, api.message, api.param, api.code)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError):
        errors = e.errors()
        first = errors[0] if errors else {}
        param = _param(tuple(first.get("loc", ())))
        msgs = []
        for err in errors[:5]:
            where = _param(tuple(err.get("loc", ()))) or "body"
            msgs.append(f"{where}: {err.get('msg', 'invalid')}")
        return error_response(400, "; ".join(msgs) or "invalid request", param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException):
        return error_response(e.status_code, str(e.detail), headers=getattr(e, "headers", None))

    @app.exception_handler(ClientDisconnected)
    async def _gone(_: Request, e: ClientDisconnected):
        return error_response(499, "the client closed the connection; the request was aborted")

    @app.exception_handler(Exception)
    async def _bug(_: Request, e: Exception):
        logger.exception("unhandled error (a bug)")
        return error_response(500, f"internal error: {type(e).__name__}: {e}")
