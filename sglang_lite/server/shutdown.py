"""Graceful shutdown: on SIGTERM (or SIGINT) the server keeps listening while it drains.

- New work is answered 503 with Retry-After (``app.state.draining``), not refused at the
  socket, so clients and load balancers learn to go elsewhere.
- Running requests get ``shutdown_timeout`` seconds to finish; past it every open
  StreamGroup is stopped: its engine requests are aborted and each client gets an answer,
  an error event then ``[DONE]`` on a stream, a 503 otherwise.
- Only then does uvicorn stop; the engine is shut down after it, so the scheduler thread
  finishes with nothing left to deliver to a closed event loop. A second signal exits now.
"""

from __future__ import annotations

import asyncio
import logging
import time

import uvicorn

log = logging.getLogger(__name__)

_POLL_S = 0.05
_FLUSH_S = 5.0  # for stopped streams to send their last events


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state, shutdown_timeout: float):
        super().__init__(config)
        self.app_state = state
        self.shutdown_timeout = shutdown_timeout
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig, frame) -> None:
        if self.app_state.draining or self._loop is None:  # a second signal: stop now
            super().handle_exit(sig, frame)
            return
        self.app_state.draining = True
        self._loop.call_soon_threadsafe(lambda: self._loop.create_task(self._drain()))

    async def _drain(self) -> None:
        groups = self.app_state.open_groups
        log.info("draining: %d open responses, up to %.1f s", len(groups), self.shutdown_timeout)
        deadline = time.monotonic() + self.shutdown_timeout
        while groups and time.monotonic() < deadline:
            await asyncio.sleep(_POLL_S)
        if groups:
            log.warning("shutdown timeout: stopping %d open responses", len(groups))
            for group in list(groups):
                group.stop("server is shutting down (shutdown timeout reached)")
            flush = time.monotonic() + _FLUSH_S
            while groups and time.monotonic() < flush:
                await asyncio.sleep(_POLL_S)
        self.should_exit = True
