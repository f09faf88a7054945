"""Every typed request error maps, by its type, to one HTTP status and OpenAI error body.

A real FastAPI app with the server's error handlers and a route that raises the error: no
engine needed. A new RequestError type without an expectation here fails the test."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from sglang_lite import errors
from sglang_lite.server.errors import api_error, install_error_handlers

SCHEMA_DETAIL = "JSON Schema keyword 'not' at /properties/a/not is not supported"

# (error, engine field names?) -> (status, type, param, code, message, Retry-After?, extra fields)
_RANK_DIED = "tensor parallelism: rank 1 (pid 7) died (killed by signal 9); the engine is shut down"
CASES = {
    "invalid": (errors.InvalidRequest("temperature", "must be >= 0.0, got -1"), False,
                (400, "invalid_request_error", "temperature", "invalid_value",
                 "temperature: must be >= 0.0, got -1", False, {})),
    "invalid_coded": (errors.InvalidRequest("suffix", "not supported", code="unsupported"), False,
                      (400, "invalid_request_error", "suffix", "unsupported", "suffix: not supported", False, {})),
    "openai_name": (errors.InvalidRequest("max_new_tokens", "must be >= 0, got -2"), False,
                    (400, "invalid_request_error", "max_tokens", "invalid_value",
                     "max_tokens: must be >= 0, got -2", False, {})),
    "engine_name": (errors.InvalidRequest("max_new_tokens", "must be >= 0, got -2"), True,
                    (400, "invalid_request_error", "max_new_tokens", "invalid_value",
                     "max_new_tokens: must be >= 0, got -2", False, {})),
    "context": (errors.ContextLengthExceeded("prompt", "9000 tokens does not fit the context length 8192"), False,
                (413, "invalid_request_error", "prompt", "context_length_exceeded",
                 "prompt: 9000 tokens does not fit the context length 8192", False, {})),
    "schema_keyword": (errors.ConstraintRefused("json_schema", SCHEMA_DETAIL, "unsupported", keyword="not",
                                                pointer="/properties/a/not"), False,
                       (400, "invalid_request_error", "json_schema", "invalid_value",
                        f"json_schema: {SCHEMA_DETAIL}", False,
                        {"keyword": "not", "pointer": "/properties/a/not"})),
    "schema_keyword_as_tools": (errors.ConstraintRefused("json_schema", SCHEMA_DETAIL, "unsupported", keyword="not",
                                                         pointer="/properties/a/not").for_field("tools"), False,
                                (400, "invalid_request_error", "tools", "invalid_value", f"tools: {SCHEMA_DETAIL}",
                                 False, {"keyword": "not", "pointer": "/properties/a/not"})),
    "constraint_limit": (errors.ConstraintRefused("regex", "longer than 8192 characters", "limit"), False,
                         (400, "invalid_request_error", "regex", "constraint_too_large",
                          "regex: longer than 8192 characters", False, {})),
    "constraint_timeout": (errors.ConstraintRefused("ebnf", "compile exceeded 1.0 s", "timeout"), False,
                           (400, "invalid_request_error", "ebnf", "constraint_timeout",
                            "ebnf: compile exceeded 1.0 s", False, {})),
    "constraint_complex": (errors.ConstraintRefused("regex", "nested too deeply to compile", "too_complex"), False,
                           (400, "invalid_request_error", "regex", "constraint_too_complex",
                            "regex: nested too deeply to compile", False, {})),
    "constraint_invalid": (errors.ConstraintRefused("regex", "unbalanced parenthesis", "invalid"), False,
                           (400, "invalid_request_error", "regex", "invalid_value",
                            "regex: unbalanced parenthesis", False, {})),
    "queue_full": (errors.QueueFullError("queue: more than 4 waiting requests"), False,
                   (429, "rate_limit_error", None, "rate_limit_exceeded",
                    "queue: more than 4 waiting requests", True, {})),
    "compile_busy": (errors.CompileBusyError("constraint compiles: 8 already waiting; retry later"), False,
                     (429, "rate_limit_error", None, "compile_queue_full",
                      "constraint compiles: 8 already waiting; retry later", True, {})),
    "compile_worker": (errors.CompileWorkerError("constraint compile worker did not start"), False,
                       (503, "service_unavailable", None, "compile_unavailable",
                        "constraint compile worker did not start", True, {})),
    "shut_down": (errors.EngineShutDown(), False,
                  (503, "service_unavailable", None, "unavailable", "server is shutting down", True, {})),
    "rank_failed": (errors.RankFailed(_RANK_DIED), False,
                    (503, "service_unavailable", None, "rank_failed", _RANK_DIED, True, {})),
    "unavailable": (errors.Unavailable("busy"), False,
                    (503, "service_unavailable", None, "unavailable", "busy", True, {})),
    "base": (errors.RequestError("rid", "a request with rid 'x' is already running", code="duplicate_rid"), False,
             (400, "invalid_request_error", "rid", "duplicate_rid",
              "rid: a request with rid 'x' is already running", False, {})),
}


def _all_types(cls=errors.RequestError) -> set[type]:
    out = {cls}
    for sub in cls.__subclasses__():
        out |= _all_types(sub)
    return out


def test_every_request_error_type_has_a_case():
    covered = {type(e) for e, _, _ in CASES.values()}
    assert _all_types() - covered == set()


@pytest.fixture(scope="module")
def client():
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/raise/{name}")
    async def raise_case(name: str, request: Request):
        error, engine_names, _ = CASES[name]
        if engine_names:
            request.state.engine_field_names = True
        raise error

    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("name", sorted(CASES))
def test_request_error_maps_to_status_and_body(client, name):
    error, _, (status, type_, param, code, message, retry, extra) = CASES[name]
    r = client.get(f"/raise/{name}")
    assert r.status_code == status, r.text
    assert r.json() == {"error": {"message": message, "type": type_, "param": param, "code": code, **extra}}
    assert (r.headers.get("retry-after") == "1") == retry


@pytest.mark.parametrize("name", sorted(CASES))
def test_python_api_sees_the_same_error_by_type(name):
    """str(e) names the field as the engine does; bad values are ValueErrors, busy or closed
    engines RuntimeErrors."""
    error = CASES[name][0]
    assert str(error) == (f"{error.field}: {error.detail}" if error.field else error.detail)
    assert isinstance(error, RuntimeError) == isinstance(error, errors.Unavailable)
    assert isinstance(error, ValueError) == isinstance(error, errors.InvalidRequest)


def test_anything_untyped_is_a_500():
    e = api_error(KeyError("boom"))
    assert (e.status, e.type, e.param, e.code) == (500, "internal_error", None, None)
