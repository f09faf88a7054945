"""Forwarding one client request to a replica, with one retry elsewhere when the replica did
not answer before anything reached the client.

- Not answering means: the connection failed or broke before the response (or, on a stream,
  before its first chunk), or the replica said 503 (draining, or its queue is full). The
  request is sent once more to another healthy replica; a replica that broke, or said it is
  draining (``server_draining``), also leaves rotation until a health check finds it back.
- A stream is relayed only after its first chunk arrived (the server sends nothing before its
  first token), so a retry never repeats output. A stream that breaks after that ends with an
  OpenAI-shaped error event and ``[DONE]``; a stream that ends without ``[DONE]`` does too.
- Every answer, error or not, is counted once in the metrics under the replica that gave it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import anyio
import httpx
from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from sglang_lite.router.health import HealthChecker
from sglang_lite.router.metrics import RouterMetrics
from sglang_lite.router.policy import Decision, RoutingPolicy
from sglang_lite.router.replica import Replica, ReplicaSet
from sglang_lite.router.request_key import RequestKey
from sglang_lite.router.sessions import SessionTable
from sglang_lite.server.app import DRAINING_CODE

REPLICA_HEADER = "X-Sglang-Lite-Replica"
_HOP_BY_HOP = frozenset({"host", "connection", "keep-alive", "transfer-encoding", "te", "trailer",
                         "upgrade", "proxy-authorization", "proxy-connection", "content-length",
                         "accept-encoding", "content-encoding", "date", "server"})
_DONE = b"data: [DONE]"


class _Unanswered(Exception):
    """The replica gave no answer the client may see; another one may be tried. ``answer``:
    what it said instead (a 503), passed on if no other replica answers either."""

    def __init__(self, message: str, answer: Response | None = None):
        super().__init__(message)
        self.answer = answer


@dataclass(slots=True)
class _Lease:
    """One attempt's share of a replica's load, given back exactly once."""
    replica: Replica
    held: bool = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.replica.in_flight -= 1


@dataclass(slots=True)
class Forwarder:
    replicas: ReplicaSet
    policy: RoutingPolicy
    sessions: SessionTable
    health: HealthChecker
    metrics: RouterMetrics
    client: httpx.AsyncClient
    max_attempts: int = 2

    def route(self, key: RequestKey, exclude: tuple[Replica, ...]) -> Decision | None:
        candidates = self.replicas.healthy(exclude)
        if not candidates:
            return None
        if key.session is not None:
            pinned = self.sessions.pinned(key.session, candidates)
            if pinned is not None:
                self.policy.observe(key.text, pinned)
                return Decision(pinned, "session")
        decision = self.policy.choose(key.text, candidates)
        if key.session is not None:
            self.sessions.pin(key.session, decision.replica)
        return decision

    async def forward(self, request: Request, method: str, path: str, body: bytes,
                      key: RequestKey) -> Response:
        headers = _upstream_headers(request)
        tried: list[Replica] = []
        why, answer = "no replica is healthy", None
        for _ in range(self.max_attempts):
            decision = self.route(key, tuple(tried))
            if decision is None:
                break
            self.metrics.on_decision(decision, len(key.text))
            if tried:
                self.metrics.retries.labels(replica=tried[-1].name).inc()
            tried.append(decision.replica)
            try:
                return await self._attempt(request, decision.replica, method, path, body, headers,
                                           key.stream)
            except _Unanswered as e:
                why, answer = str(e), e.answer
        self.metrics.on_answered(tried[-1].name if tried else "none", "error")
        if answer is not None:
            return answer
        return JSONResponse({"error": {"message": f"no replica answered: {why}", "type": "service_unavailable",
                                       "param": None, "code": "no_healthy_replica"}},
                            status_code=503, headers={"Retry-After": "1"})

    async def _attempt(self, request: Request, replica: Replica, method: str, path: str,
                       body: bytes, headers: dict, stream: bool) -> Response:
        replica.in_flight += 1
        lease = _Lease(replica)
        self.metrics.attempts.labels(replica=replica.name).inc()
        upstream = None
        try:
            req = self.client.build_request(method, replica.url + path, content=body or None,
                                            headers=headers)
            upstream = await _unless_client_leaves(request, self.client.send(req, stream=True))
            if upstream.status_code == 503:
                content = await upstream.aread()
                if _error_code(content) == DRAINING_CODE:
                    self.health.mark_failed(replica, "draining (answered 503 server_draining)")
                answer = Response(content, 503, _downstream_headers(upstream, replica))
                raise _Unanswered(f"{replica.url} answered 503", answer)
            if not (stream and upstream.status_code == 200):
                content = await _unless_client_leaves(request, upstream.aread())
                await _close(upstream)
                lease.release()
                self.metrics.on_answered(replica.name, "ok" if upstream.status_code < 400 else "error")
                return Response(content, upstream.status_code, _downstream_headers(upstream, replica))
            chunks = upstream.aiter_raw()
            first = await _unless_client_leaves(request, anext(chunks, b""))
        except httpx.TransportError as e:
            self.health.mark_failed(replica, f"{type(e).__name__}: {e}")
            await _close(upstream)
            lease.release()
            raise _Unanswered(f"{replica.url} did not answer ({type(e).__name__})") from e
        except BaseException as e:  # a 503, or the client left
            await _close(upstream)
            lease.release()
            if isinstance(e, ClientGone):
                self.metrics.on_answered(replica.name, "client_gone")
            raise
        return StreamingResponse(self._relay(replica, lease, upstream, chunks, first),
                                 status_code=200, headers=_downstream_headers(upstream, replica))

    async def _relay(self, replica: Replica, lease: _Lease, upstream: httpx.Response, chunks,
                     first: bytes):
        tail, outcome = first[-64:], "ok"
        try:
            if first:
                yield first
            async for chunk in chunks:
                tail = (tail + chunk)[-64:]
                yield chunk
            if _DONE not in tail:
                raise _Unanswered(f"{replica.url} ended the stream without [DONE]")
        except (httpx.TransportError, _Unanswered) as e:
            outcome = "stream_error"
            if isinstance(e, httpx.TransportError):
                self.health.mark_failed(replica, f"stream broke: {type(e).__name__}: {e}")
            yield (b"" if tail.endswith(b"\n\n") else b"\n\n") + _error_event(replica, e)
        except BaseException:  # the client left: the replica sees the closed connection
            # after [DONE] the answer was whole: a client that closes while the upstream's last
            # empty read is still pending (the openai client does) got everything
            outcome = "ok" if _DONE in tail else "client_gone"
            raise
        finally:
            await _close(upstream)
            lease.release()
            self.metrics.on_answered(replica.name, outcome)


async def _unless_client_leaves(request: Request, awaitable):
    """``awaitable``'s result (or its exception); ClientGone if the client disconnects first
    (the upstream request is then abandoned, which the replica sees as a disconnect and aborts)."""
    work = asyncio.ensure_future(awaitable)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((work, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (work, watch):
            if not task.done():
                task.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        if not work.done() or work.cancelled():
            await asyncio.gather(work, return_exceptions=True)
    if work.cancelled():
        raise ClientGone()
    return work.result()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


async def _close(upstream: httpx.Response | None) -> None:
    if upstream is not None:
        with anyio.CancelScope(shield=True):
            await upstream.aclose()


def _upstream_headers(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}


def _downstream_headers(upstream: httpx.Response, replica: Replica) -> dict[str, str]:
    headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP}
    headers[REPLICA_HEADER] = replica.name
    return headers


def _error_code(body: bytes) -> str | None:
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    return error.get("code") if isinstance(error, dict) else None


def _error_event(replica: Replica, e: Exception) -> bytes:
    detail = str(e) if isinstance(e, _Unanswered) else f"{type(e).__name__}"
    event = {"error": {"message": f"replica {replica.url} stopped answering mid-stream ({detail}); "
                                  "the output above is incomplete",
                       "type": "service_unavailable", "param": None, "code": "replica_failed"}}
    return f"data: {json.dumps(event)}\n\n".encode() + _DONE + b"\n\n"
