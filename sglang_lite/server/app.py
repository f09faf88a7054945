"""The FastAPI app factory. All server state lives on ``app.state`` (engine, served model
names, API key, serving options, metrics registry, client rids, draining flag), so several
apps can share a process."""

from __future__ import annotations

import time
from collections.abc import Sequence

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import Response

from sglang_lite.server import abort_api, native_api, openai_api, tokenize_api, ui
from sglang_lite.server.abort_api import RequestIds
from sglang_lite.server.auth import authorized
from sglang_lite.server.errors import RETRY_AFTER_SECONDS, error_response, install_error_handlers
from sglang_lite.server.generation import ClientGone
from sglang_lite.server.limits import BodyLimitMiddleware, BodyLimits
from sglang_lite.server.metrics import ServerMetrics
from sglang_lite.server.parsers import reasoning_parser as pick_reasoning_parser
from sglang_lite.server.parsers import select_tool_call_parser
from sglang_lite.server.serving_options import ServingOptions

# Reachable without an API key: probes, the API's description and the /ui page (its calls
# carry the key typed into it); /metrics too with open_metrics, for scrapers that carry no key.
_OPEN_PATHS = frozenset({"/health", "/openapi.json", "/docs", "/ui"})
# Refused with 503 while draining: everything that would start new work. The code tells a
# router this replica is leaving (a full queue is a 503 too, but a passing one).
DRAINING_CODE = "server_draining"
_ADMISSION_PATHS = frozenset({"/v1/completions", "/v1/chat/completions", "/generate", "/health_generate"})


def create_app(engine, served_model_name: str | Sequence[str] | None = None,
               api_key: str | Sequence[str] | None = None, limits: BodyLimits | None = None,
               cache_salt_by: str = "none", open_metrics: bool = False, *,
               tool_call_parser: str | None = None, reasoning_parser: str | None = None,
               serving_options: ServingOptions | None = None) -> FastAPI:
    """``served_model_name``: one name or several (vLLM); requests may use any, responses
    and metrics carry the first unless the request named another. ``api_key``: one key or
    several (any of them is accepted)."""
    app = FastAPI(title="sglang-lite", docs_url="/docs", redoc_url=None, openapi_url="/openapi.json")
    state = app.state
    state.engine = engine
    names = [served_model_name] if isinstance(served_model_name, str) else list(served_model_name or [])
    state.served_model_names = tuple(names) or (engine.source.name,)
    state.served_model_name = state.served_model_names[0]
    state.serving_options = options = serving_options or ServingOptions()
    state.request_ids = RequestIds()
    state.api_keys = (api_key,) if isinstance(api_key, str) else tuple(api_key or ())
    state.open_metrics = open_metrics
    state.metrics = ServerMetrics(state.served_model_name)
    state.draining = False
    state.open_groups = set()  # StreamGroups answering now (shutdown stops them)
    state.cache_salt_by = cache_salt_by  # none | api_key | user (server/tenancy.py)
    state.created = int(time.time())
    state.token_text = _TokenText(engine.tokenizer)
    state.engine_alive = lambda: _engine_alive(engine)
    state.tool_parser = select_tool_call_parser(tool_call_parser, getattr(engine.tokenizer, "chat_template", None))
    state.reasoning_parser = pick_reasoning_parser(reasoning_parser)
    install_error_handlers(app)
    app.add_exception_handler(ClientGone, _client_gone)
    app.include_router(tokenize_api.router)
    app.include_router(abort_api.router)
    app.include_router(openai_api.router)
    app.include_router(native_api.router)
    app.include_router(ui.router)
    app.add_middleware(BodyLimitMiddleware, limits=limits or BodyLimits())
    app.add_middleware(_Gate, state=state)  # refuses before any body is read
    if options.allowed_origins:  # outside the gate: preflights carry no API key
        app.add_middleware(CORSMiddleware, allow_origins=list(options.allowed_origins),
                           allow_methods=list(options.allowed_methods),
                           allow_headers=list(options.allowed_headers),
                           allow_credentials=options.allow_credentials)
    return app


class _Gate:
    """API-key and draining checks, as plain ASGI (no body buffering, disconnects pass through)."""

    def __init__(self, app, state):
        self.app = app
        self.state = state

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            response = self._refusal(scope)
            if response is not None:
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope) -> Response | None:
        path, state = scope["path"], self.state
        open_path = path in _OPEN_PATHS or (path == "/metrics" and state.open_metrics)
        if state.api_keys and not open_path:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not authorized(given, state.api_keys):
                return error_response(401, "Incorrect or missing API key (expected 'Authorization: "
                                      "Bearer <key>')", "authentication_error", code="invalid_api_key")
        if state.draining and path in _ADMISSION_PATHS:
            state.metrics.on_rejected()
            return error_response(503, "server is shutting down", "service_unavailable",
                                  code=DRAINING_CODE, headers={"Retry-After": RETRY_AFTER_SECONDS})
        return None


class _TokenText:
    """Token id -> its text (for logprobs), cached."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self.cache.get(token_id)
        if text is None:
            text = self.tokenizer.decode([token_id]) if self.tokenizer is not None else str(token_id)
            self.cache[token_id] = text
        return text


def _engine_alive(engine) -> bool:
    thread = getattr(engine, "_thread", None)
    return thread is None or thread.is_alive()


async def _client_gone(request: Request, exc: ClientGone) -> Response:
    return Response(status_code=499)  # nginx's "client closed request"; nobody reads it
