"""Errors in OpenAI's JSON shape: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from sglang_lite.compile_pool import CompileBusyError, CompileWorkerError
from sglang_lite.engine import QueueFullError

RETRY_AFTER_SECONDS = "1"

# Engine (SGLang) field names -> the OpenAI names a client sent.
_OPENAI_FIELD_NAMES = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens"}
# A code for every 4xx, so clients can branch on it.
_DEFAULT_CODES = {401: "invalid_api_key", 404: "not_found", 405: "method_not_allowed",
                  413: "request_too_large", 429: "rate_limit_exceeded", 503: "unavailable"}


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
    if code is None:
        code = _DEFAULT_CODES.get(status, "invalid_value" if 400 <= status < 500 else None)
    body = {"error": {"message": message, "type": type, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def from_engine_error(e: Exception, openai_names: bool = True) -> APIError:
    """Map an exception raised by ``Engine.async_generate`` (or its stream) to an APIError."""
    if isinstance(e, CompileWorkerError):
        return APIError(503, str(e), type="service_unavailable", code="compile_unavailable",
                        headers={"Retry-After": RETRY_AFTER_SECONDS})
    if isinstance(e, CompileBusyError):
        return APIError(429, str(e), type="rate_limit_error", code="compile_queue_full",
                        headers={"Retry-After": RETRY_AFTER_SECONDS})
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
        if param in ("prompt", "messages") and "context length" in message:
            return APIError(413, message, param=param, code="context_length_exceeded")
        reason = getattr(e, "reason", None)  # a refused constraint: limit, timeout, ...
        code = {"limit": "constraint_too_large", "timeout": "constraint_timeout",
                "too_complex": "constraint_too_complex"}.get(reason, "invalid_value")
        return APIError(400, message, param=param, code=code)
    if isinstance(e, RuntimeError) and str(e).startswith("engine: shut down"):
        return APIError(503, "server is shutting down", type="service_unavailable",
                        headers={"Retry-After": RETRY_AFTER_SECONDS})
    return APIError(500, f"{type(e).__name__}: {e}", type="internal_error")


async def _api_error_handler(request: Request, exc: APIError) -> JSONResponse:
    return error_response(exc.status, exc.message, exc.type, exc.param, exc.code, exc.headers)


def from_validation_errors(errors: list[dict]) -> APIError:
    """The first of pydantic's (or FastAPI's) validation errors as a 400 naming the field."""
    err = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    if err.get("type") == "json_invalid":  # loc holds a byte offset, not a field
        return APIError(400, f"body: invalid JSON: {err.get('msg')}", param="body", code="invalid_json")
    loc = [str(x) for x in err.get("loc", ()) if x != "body" and not _is_union_tag(x)]
    param = ".".join(loc) or "body"
    kind = "invalid_type" if str(err.get("type", "")).endswith(("_type", "_parsing")) else "invalid_value"
    return APIError(400, f"{param}: {err.get('msg')}", param=param, code=kind)


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "none", "list", "dict", "literal"})


def _is_union_tag(x) -> bool:
    """pydantic names the union member tried (``str``, ``list[int]``, a model's class name)
    in an error's location; our fields are lower-case names and list indices."""
    return isinstance(x, str) and (x in _TYPE_TAGS or "[" in x or x[:1].isupper())


async def _validation_handler(request: Request, exc: RequestValidationError) -> JSONResponse:
    return await _api_error_handler(request, from_validation_errors(list(exc.errors())))


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
