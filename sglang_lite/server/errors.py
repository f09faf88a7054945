"""Errors in OpenAI's JSON shape: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from sglang_lite.engine import QueueFullError

RETRY_AFTER_SECONDS = "1"

# Engine (SGLang) field names -> the OpenAI names a client sent.
_OPENAI_FIELD_NAMES = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens"}


class APIError(Exception):
    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers


def error_response(status: int, message: str, type: str = "invalid_request_error",
                   param: str | None = None, code: str | None = None,
                   headers: dict | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": type, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def from_engine_error(e: Exception, openai_names: bool = True) -> APIError:
    """Map an exception raised by ``Engine.async_generate`` (or its stream) to an APIError."""
    if isinstance(e, QueueFullError):
        return APIError(429, str(e), type="rate_limit_error", code="rate_limit_exceeded",
                        headers={"Retry-After": RETRY_AFTER_SECONDS})
    if isinstance(e, ValueError):
        message = str(e)
        param, _, rest = message.partition(":")
        param = param.strip() if rest and " " not in param.strip() else None
        if param and openai_names and param in _OPENAI_FIELD_NAMES:
            param = _OPENAI_FIELD_NAMES[param]
            message = f"{param}:{rest}"
        if param == "prompt" and "context length" in message:
            return APIError(413, message, param="prompt", code="context_length_exceeded")
        return APIError(400, message, param=param, code="invalid_value")
    if isinstance(e, RuntimeError) and str(e).startswith("engine: shut down"):
        return APIError(503, "server is shutting down", type="service_unavailable",
                        headers={"Retry-After": RETRY_AFTER_SECONDS})
    return APIError(500, f"{type(e).__name__}: {e}", type="internal_error")


async def _api_error_handler(request: Request, exc: APIError) -> JSONResponse:
    return error_response(exc.status, exc.message, exc.type, exc.param, exc.code, exc.headers)


async def _validation_handler(request: Request, exc: RequestValidationError) -> JSONResponse:
    err = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    loc = [str(x) for x in err.get("loc", ()) if x != "body"]
    param = ".".join(loc) or None
    message = f"{param}: {err.get('msg')}" if param else str(err.get("msg"))
    return error_response(400, message, param=param, code="invalid_value")


async def _http_error_handler(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    type_ = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    return error_response(exc.status_code, str(exc.detail), type_, headers=getattr(exc, "headers", None))


async def _internal_error_handler(request: Request, exc: Exception) -> JSONResponse:
    return error_response(500, f"{type(exc).__name__}: {exc}", "internal_error")


def install_error_handlers(app) -> None:
    app.add_exception_handler(APIError, _api_error_handler)
    app.add_exception_handler(RequestValidationError, _validation_handler)
    app.add_exception_handler(StarletteHTTPException, _http_error_handler)
    app.add_exception_handler(Exception, _internal_error_handler)
