"""Why a request failed, as types: raised where the problem is found, mapped once to an HTTP
error body by the server (server/errors.py), caught by type in the Python API.

Every error names the request field at fault as the engine spells it (``max_new_tokens``; the
server renames it for OpenAI clients), a machine-readable ``code``, the ``detail`` after the
field, its ``cause``, and the HTTP ``status`` that answers it. ``str(e)`` is
``"field: detail"`` (just the detail without a field).

Errors of the request itself are also ``ValueError`` (a bad value); errors of the moment
(a full queue, a busy compiler, a shutdown) are also ``RuntimeError``: retrying may succeed.
"""

from __future__ import annotations

from typing import Any, ClassVar


class RequestError(Exception):
    """Base of every typed request error."""

    status: ClassVar[int] = 400
    type: ClassVar[str] = "invalid_request_error"
    default_code: ClassVar[str] = "invalid_value"
    retry: ClassVar[bool] = False  # whether the client should retry later (Retry-After)
    client_message: ClassVar[str | None] = None  # what a server tells its client, if not str(e)

    def __init__(self, field: str | None, detail: str, *, code: str | None = None,
                 cause: BaseException | None = None):
        super().__init__(f"{field}: {detail}" if field else detail)
        self.field = field
        self.detail = detail
        self.code = code or self.default_code
        if cause is not None:
            self.__cause__ = cause

    @property
    def message(self) -> str:
        return str(self)

    @property
    def cause(self) -> BaseException | None:
        return self.__cause__

    def details(self) -> dict[str, Any]:
        """Structured facts beyond field, code and message (a schema error's keyword and
        pointer); they reach the client as fields of its error body."""
        return {}

    def for_field(self, field: str) -> RequestError:
        """The same error, blamed on ``field`` (a request field that produced the one named)."""
        other = type(self).__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.field = field
        other.args = (f"{field}: {self.detail}",)
        other.__cause__ = self.__cause__
        return other


class InvalidRequest(RequestError, ValueError):
    """A field's value is wrong (400, code ``invalid_value`` unless said otherwise)."""


class ContextLengthExceeded(InvalidRequest):
    """The prompt (or messages) cannot fit the model's context."""

    status = 413
    default_code = "context_length_exceeded"


class ConstraintRefused(InvalidRequest):
    """A regex / JSON schema / EBNF / choices constraint that will not be compiled.

    ``reason`` (limit | timeout | too_complex | unsupported | invalid) labels the refusal
    metric and picks the code; a JSON Schema keyword we cannot enforce comes with the
    ``keyword`` and its JSON ``pointer``."""

    _CODES: ClassVar[dict[str, str]] = {"limit": "constraint_too_large", "timeout": "constraint_timeout",
                                        "too_complex": "constraint_too_complex"}

    def __init__(self, field: str, detail: str, reason: str, *, keyword: str = "", pointer: str = "",
                 cause: BaseException | None = None):
        super().__init__(field, detail, code=self._CODES.get(reason, self.default_code), cause=cause)
        self.reason = reason
        self.keyword = keyword
        self.pointer = pointer

    def details(self) -> dict[str, Any]:
        return {"keyword": self.keyword, "pointer": self.pointer} if self.keyword else {}


class Unavailable(RequestError, RuntimeError):
    """The engine cannot take the request now; the same request may succeed later."""

    status = 503
    type = "service_unavailable"
    default_code = "unavailable"
    retry = True

    def __init__(self, detail: str, *, code: str | None = None, cause: BaseException | None = None):
        super().__init__(None, detail, code=code, cause=cause)


class QueueFullError(Unavailable):
    """The waiting queue is over ``max_queue_size``; retry later."""

    status = 429
    type = "rate_limit_error"
    default_code = "rate_limit_exceeded"


class CompileBusyError(Unavailable):
    """Every compile worker is busy and the wait queue is full; retry later."""

    status = 429
    type = "rate_limit_error"
    default_code = "compile_queue_full"


class CompileWorkerError(Unavailable):
    """A compile worker process could not be started."""

    default_code = "compile_unavailable"


class EngineShutDown(Unavailable):
    """The engine was shut down (or is shutting down) before the request could run."""

    client_message = "server is shutting down"

    def __init__(self, detail: str = "engine: shut down"):
        super().__init__(detail)


class RankFailed(EngineShutDown):
    """A tensor-parallel rank died or its collectives failed: the engine is shut down (the
    ranks cannot continue out of step), and every request fails with this message."""

    default_code = "rank_failed"
    client_message = None

    def __init__(self, detail: str):
        super().__init__(detail)


__all__ = [
    "CompileBusyError", "CompileWorkerError", "ConstraintRefused", "ContextLengthExceeded",
    "EngineShutDown", "InvalidRequest", "QueueFullError", "RankFailed", "RequestError", "Unavailable",
]
