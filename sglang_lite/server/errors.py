"""Errors in OpenAI's JSON shape: ``{"error": {"message", "type", "param", "code"}}``, plus
the structured facts of a typed request error (a schema keyword's ``keyword`` and ``pointer``).

``api_error`` is the one mapping from the engine's typed errors (sglang_lite/errors.py) to
these bodies; the app's exception handlers and in-band stream errors both go through it."""

from __future__ import annotations

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from sglang_lite.errors import RequestError

RETRY_AFTER_SECONDS = "1"

# Engine (SGLang) field names -> the OpenAI names a client sent.
_OPENAI_FIELD_NAMES = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens"}
# A code for every 4xx, so clients can branch on it.
_DEFAULT_CODES = {401: "invalid_api_key", 404: "not_found", 405: "method_not_allowed",
                  413: "request_too_large", 429: "rate_limit_exceeded", 503: "unavailable"}


class APIError(Exception):
    """An HTTP error as the client will see it (status, OpenAI body fields, headers)."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict | None = None,
                 details: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code if code is not None else _default_code(status)
        self.headers = headers
        self.details = details or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code, **self.details}}


def _default_code(status: int) -> str | None:
    return _DEFAULT_CODES.get(status, "invalid_value" if 400 <= status < 500 else None)


def error_response(status: int, message: str, type: str = "invalid_request_error",
                   param: str | None = None, code: str | None = None,
                   headers: dict | None = None) -> JSONResponse:
    return _response(APIError(status, message, type, param, code, headers))


def _response(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


def api_error(e: BaseException, openai_names: bool = True) -> APIError:
    """The HTTP error for an exception raised while serving a request: a typed request error
    by its type's status, code and field (renamed to OpenAI's spelling with
    ``openai_names``), anything else a 500."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, RequestError):
        param = e.field
        if param is not None and openai_names:
            param = _OPENAI_FIELD_NAMES.get(param, param)
        message = e.client_message or (f"{param}: {e.detail}" if param else e.detail)
        headers = {"Retry-After": RETRY_AFTER_SECONDS} if e.retry else None
        return APIError(e.status, message, type=e.type, param=param, code=e.code, headers=headers,
                        details=e.details())
    return APIError(500, f"{type(e).__name__}: {e}", type="internal_error")


async def _api_error_handler(request: Request, exc: APIError) -> JSONResponse:
    return _response(exc)


async def _request_error_handler(request: Request, exc: RequestError) -> JSONResponse:
    # Native routes (/generate) name fields as the engine does; the OpenAI ones as OpenAI does.
    engine_names = getattr(request.state, "engine_field_names", False)
    return _response(api_error(exc, openai_names=not engine_names))


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
    app.add_exception_handler(RequestError, _request_error_handler)
    app.add_exception_handler(RequestValidationError, _validation_handler)
    app.add_exception_handler(StarletteHTTPException, _http_error_handler)
    app.add_exception_handler(Exception, _internal_error_handler)
