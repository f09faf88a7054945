"""One HTTP request's engine streams: one per (prompt, choice), opened together, primed so
admission errors (bad params, full queue) surface before the response starts, merged in
arrival order, recorded in the metrics, and aborted when the client goes away.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio

from sglang_lite.errors import CompileBusyError, ConstraintRefused, QueueFullError
from sglang_lite.outputs import ABORT, OutputAccumulator
from sglang_lite.server.errors import RETRY_AFTER_SECONDS, APIError


class ClientGone(Exception):
    """The client disconnected; its requests were aborted."""


@dataclass(slots=True)
class Job:
    input_ids: list[int]
    sampling_params: dict[str, Any]
    index: int = 0  # choice index in the response
    prompt_index: int = 0
    cache_salt: str | None = None  # prefix-cache namespace (server/tenancy.py)
    rid: str | None = None  # the engine request's id (a client's rid), else the engine picks
    priority: int | None = None


@dataclass(slots=True, kw_only=True)
class Output(OutputAccumulator):
    """What one engine stream has produced so far (the Python API's accumulator), and the
    response's bookkeeping of it."""

    job: Job
    started: bool = False  # submitted to the engine
    ended: bool = False  # recorded in the metrics
    last_time: float | None = None

    @property
    def index(self) -> int:
        return self.job.index


class StreamGroup:
    def __init__(self, state, request, jobs: list[Job], agens: list, start: float):
        self.state = state
        self.request = request
        self.outputs = [Output(job=job) for job in jobs]
        self.agens = agens
        self.start = start
        self._primed: list[dict] = []
        self._waiter: asyncio.Task | None = None
        self._closed = False
        self.shutdown_message: str | None = None  # set by ``stop``: the server is going down
        state.open_groups.add(self)
        self.on_close: list = []  # callables run once the group is closed

    @classmethod
    async def open(cls, state, request, jobs: list[Job], return_logprob: bool = False,
                   top_logprobs_num: int = 0,
                   logprob_start_len: int | None = None) -> StreamGroup:
        """Validate and submit every job; on failure, nothing is left running and the engine's
        typed error (a RequestError) propagates, for the app's handler to map."""
        engine, start = state.engine, time.monotonic()
        agens: list = []
        try:
            for job in jobs:
                submit = engine.async_generate(
                    input_ids=job.input_ids, sampling_params=job.sampling_params,
                    return_logprob=return_logprob, top_logprobs_num=top_logprobs_num, stream=True,
                    rid=job.rid, priority=job.priority,
                    **({"cache_salt": job.cache_salt} if job.cache_salt is not None else {}),
                    **({"logprob_start_len": logprob_start_len} if logprob_start_len is not None else {}))
                constrained = _constrained(job.sampling_params)
                # A compile can take seconds: a client that leaves meanwhile stops it.
                agens.append(await (_unless_client_leaves(request, submit) if constrained else submit))
                if len(agens) == 1 and constrained:
                    state.metrics.on_grammar_compile(time.monotonic() - start)
        except Exception as e:
            for agen in agens:
                await agen.aclose()
            if isinstance(e, ClientGone):
                raise
            state.metrics.on_grammar_refused(_refusal_reason(e))
            raise
        group = cls(state, request, jobs, agens, start)
        await group._prime()
        return group

    # ---- priming ----------------------------------------------------------------------------
    async def _prime(self) -> None:
        self._waiter = asyncio.ensure_future(_wait_disconnect(self.request))
        tasks = []
        for out, agen in zip(self.outputs, self.agens):
            out.started = True
            tasks.append(asyncio.ensure_future(agen.__anext__()))
        try:
            await _wait_all_or_error(tasks, self._waiter)
        except BaseException:  # cancelled (server shutdown): abort everything submitted
            for t in tasks:
                t.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(*tasks, return_exceptions=True)
                await self.close()
            raise
        pending = [t for t in tasks if not t.done()]
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        errors = [t.exception() for t in tasks if not t.cancelled() and t.exception() is not None]
        for out, t in zip(self.outputs, tasks):
            if not t.cancelled() and isinstance(t.exception(), QueueFullError):
                out.started = False
        gone = self._waiter.done()
        if gone or errors or any(t.cancelled() for t in tasks):
            await self.close()
            if gone and not errors:
                raise ClientGone()
            first = next((e for e in errors if not isinstance(e, StopAsyncIteration)), None)
            if isinstance(first, QueueFullError):
                self.state.metrics.on_rejected()
            raise first or RuntimeError("engine: stream ended early")
        self._primed = [t.result() for t in tasks]
        for i, chunk in enumerate(self._primed):
            self._absorb(i, chunk)

    # ---- consumption ------------------------------------------------------------------------
    async def chunks(self) -> AsyncIterator[tuple[Output, dict]]:
        """(cumulative output, delta chunk) pairs in arrival order, the primed ones first.

        For streaming responses: the caller runs inside the response, which cancels it when
        the client disconnects; ``close`` (in ``finally``) then aborts what is still running.
        """
        self._stop_waiter()
        try:
            for i, chunk in enumerate(self._primed):
                yield self.outputs[i], chunk
            live = [i for i, out in enumerate(self.outputs) if not out.finished]
            if len(live) == 1:
                i = live[0]
                async for chunk in self.agens[i]:
                    yield self._absorb(i, chunk), chunk
            elif live:
                async for i, chunk in _merge({i: self.agens[i] for i in live}):
                    yield self._absorb(i, chunk), chunk
            if self.shutdown_message is not None:  # streams: an error event, then [DONE]
                raise APIError(503, self.shutdown_message, type="service_unavailable",
                               code="server_shutdown", headers={"Retry-After": RETRY_AFTER_SECONDS})
        finally:
            await self.close()

    async def collect(self) -> list[Output]:
        """Run every stream to completion; ClientGone (all aborted) if the client leaves."""
        async def drain():
            async for _ in self.chunks():
                pass

        waiter = self._waiter
        self._waiter = None  # chunks() must not cancel it: it watches the client meanwhile
        task = asyncio.ensure_future(drain())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            if not waiter.done():
                waiter.cancel()
        if task.cancelled() or (waiter.done() and not task.done()):
            raise ClientGone()
        task.result()
        await self.close()
        return self.outputs

    def _absorb(self, i: int, chunk: dict) -> Output:
        out, now = self.outputs[i], time.monotonic()
        metrics = self.state.metrics
        if out.last_time is None:
            metrics.on_first_token(now - self.start)
        else:
            metrics.on_chunk(now - out.last_time, len(chunk["output_ids"]))
        out.last_time = now
        out.add(chunk)
        if chunk["finished"]:
            self._end(out, aborted=(out.finish_reason or {}).get("type") == ABORT)
        return out

    def _end(self, out: Output, aborted: bool) -> None:
        if out.ended or not out.started:
            return
        out.ended = True
        meta = out.meta or {"prompt_tokens": len(out.job.input_ids)}
        self.state.metrics.on_end(meta, time.monotonic() - self.start, aborted)

    def _stop_waiter(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.cancel()
        self._waiter = None

    def stop(self, message: str) -> None:
        """Server shutdown past its timeout: abort what still runs; the consumer ends with
        ``message`` (an error event on a stream, a 503 otherwise)."""
        self.shutdown_message = message
        for out, agen in zip(self.outputs, self.agens):
            if not out.finished:
                self.state.engine.abort(agen.rid)

    async def close(self) -> None:
        """Abort every stream still running (its KV pages are freed by the engine)."""
        if self._closed:
            return
        self._closed = True
        self.state.open_groups.discard(self)
        self._stop_waiter()
        with anyio.CancelScope(shield=True):
            for out, agen in zip(self.outputs, self.agens):
                try:
                    await agen.aclose()
                except RuntimeError:  # still running in a cancelled merge task: it aborts itself
                    pass
                if not out.finished:
                    self._end(out, aborted=True)
            for callback in self.on_close:
                callback()


async def _wait_all_or_error(tasks: list[asyncio.Future], waiter: asyncio.Future) -> None:
    """Return when every task is done, one of them failed, or the waiter finished."""
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending | {waiter}, return_when=asyncio.FIRST_COMPLETED)
        if waiter in done or any(t.exception() is not None for t in done if not t.cancelled()):
            return
        pending.discard(waiter)


async def _wait_disconnect(request) -> None:
    """Raise ClientGone once the client disconnects (the body was already read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()


async def _merge(agens: dict[int, Any]) -> AsyncIterator[tuple[int, dict]]:
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i, agen):
        try:
            async for chunk in agen:
                await queue.put((i, chunk, None))
        except Exception as e:
            await queue.put((i, None, e))
        await queue.put((i, None, None))

    tasks = [asyncio.ensure_future(pump(i, a)) for i, a in agens.items()]
    try:
        remaining = len(tasks)
        while remaining:
            i, chunk, error = await queue.get()
            if error is not None:
                raise error
            if chunk is None:
                remaining -= 1
                continue
            yield i, chunk
    finally:
        for t in tasks:
            t.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.gather(*tasks, return_exceptions=True)


async def _unless_client_leaves(request, submit):
    """Await ``submit``; if the client disconnects first, cancel it and raise ClientGone."""
    task = asyncio.ensure_future(submit)
    waiter = asyncio.ensure_future(_wait_disconnect(request))
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise ClientGone()
    return task.result()


def _refusal_reason(e: Exception) -> str | None:
    """The compile-refusal metric's label for an intake error, None if not a refusal."""
    if isinstance(e, CompileBusyError):
        return "busy"
    return e.reason if isinstance(e, ConstraintRefused) else None


def _constrained(params: dict) -> bool:
    return any(params.get(k) is not None for k in ("regex", "json_schema", "ebnf"))
