"""The router's FastAPI app. Its state (replicas, policy, sessions, metrics, the HTTP client
and the health-check task) lives on ``app.state``; the client and the task live as long as
the app's lifespan, so run it with ``lifespan="on"``."""

from __future__ import annotations

import asyncio
import contextlib
import json

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from sglang_lite.router.args import RouterConfig
from sglang_lite.router.health import HealthChecker
from sglang_lite.router.metrics import RouterMetrics
from sglang_lite.router.policy import make_policy
from sglang_lite.router.proxy import ClientGone, Forwarder
from sglang_lite.router.replica import ReplicaSet
from sglang_lite.router.request_key import RequestKey, request_key
from sglang_lite.router.sessions import SessionTable
from sglang_lite.server.limits import BodyLimitMiddleware, BodyLimits

GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions", "/generate")
_CONTENT_TYPE_PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


def create_router_app(config: RouterConfig) -> FastAPI:
    replicas = ReplicaSet(list(config.worker_urls))
    policy = make_policy(config.policy, config.cache_threshold, config.balance_abs_threshold,
                         config.balance_rel_threshold, config.max_tree_size)
    metrics = RouterMetrics(replicas, config.policy)
    health = HealthChecker(replicas, policy, metrics, config.health_check_interval,
                           config.health_check_timeout, config.health_failure_threshold,
                           config.worker_dns)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        timeout = httpx.Timeout(config.request_timeout, connect=5.0)
        limits = httpx.Limits(max_connections=4096, max_keepalive_connections=256,
                              keepalive_expiry=4.0)  # below uvicorn's 5 s: no stale reuse
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
            app.state.forwarder = Forwarder(replicas, policy, SessionTable(config.max_sessions),
                                            health, metrics, client)
            await health.check_all(client)  # replicas start out of rotation until they answer
            task = asyncio.create_task(health.run(client))
            try:
                yield
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    app = FastAPI(title="sglang-lite router", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.replicas, app.state.metrics, app.state.config = replicas, metrics, config
    app.add_exception_handler(ClientGone, _client_gone)
    # The replicas check bodies too; the router must not buffer or parse an unbounded one first.
    limits = BodyLimits() if config.max_request_bytes is None else BodyLimits(config.max_request_bytes)
    app.add_middleware(BodyLimitMiddleware, limits=limits)
    for path in GENERATION_PATHS:
        app.add_api_route(path, _generation, methods=["POST"])
    app.add_api_route("/v1/models", _passthrough, methods=["GET"])
    app.add_api_route("/health_generate", _passthrough, methods=["GET"])
    app.add_api_route("/health", _health, methods=["GET"])
    app.add_api_route("/metrics", _metrics, methods=["GET"])
    app.add_api_route("/workers", _workers, methods=["GET"])
    app.add_api_route("/flush_cache", _flush_cache, methods=["POST"])
    return app


async def _generation(request: Request) -> Response:
    body = await request.body()
    try:
        parsed = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return _error(400, f"body: invalid JSON: {e}", "body", "invalid_json")
    if not isinstance(parsed, dict):
        return _error(400, "body: expected a JSON object", "body", "invalid_type")
    key = request_key(request.url.path, parsed, dict(request.headers))
    return await request.app.state.forwarder.forward(request, "POST", request.url.path, body, key)


async def _passthrough(request: Request) -> Response:
    """A GET any healthy replica answers alike (least loaded first)."""
    return await request.app.state.forwarder.forward(request, "GET", request.url.path, b"",
                                                     RequestKey("", False, None))


async def _health(request: Request) -> Response:
    healthy = len(request.app.state.replicas.healthy())
    return JSONResponse({"healthy_replicas": healthy}, status_code=200 if healthy else 503)


async def _metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type=_CONTENT_TYPE_PROMETHEUS)


async def _workers(request: Request) -> Response:
    return JSONResponse({"policy": request.app.state.config.policy, "workers": [
        {"url": r.url, "healthy": r.healthy, "load": r.in_flight}
        for r in request.app.state.replicas.all]})


async def _flush_cache(request: Request) -> Response:
    """Flush every healthy replica's prefix cache, and forget what was sent where."""
    forwarder: Forwarder = request.app.state.forwarder
    statuses = {}
    for replica in forwarder.replicas.healthy():
        try:
            statuses[replica.url] = (await forwarder.client.post(replica.url + "/flush_cache",
                                                                 headers=_auth(request))).status_code
        except httpx.HTTPError as e:
            statuses[replica.url] = f"{type(e).__name__}"
        forwarder.policy.forget(replica)
    ok = all(s == 200 for s in statuses.values())
    return JSONResponse({"replicas": statuses}, status_code=200 if ok else 502)


def _auth(request: Request) -> dict[str, str]:
    value = request.headers.get("authorization")
    return {"Authorization": value} if value else {}


def _error(status: int, message: str, param: str | None, code: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error",
                                   "param": param, "code": code}}, status_code=status)


async def _client_gone(request: Request, exc: ClientGone) -> Response:
    return Response(status_code=499)
