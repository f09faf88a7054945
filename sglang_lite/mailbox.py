"""The scheduler thread's mailbox: what other threads ask of the scheduler, as small
messages, and the loop that serves them between steps (the scheduler itself is never touched
from another thread)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglang_lite.request import Req
    from sglang_lite.scheduler.scheduler import Scheduler

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AddRequest:
    req: Req


@dataclass(frozen=True, slots=True)
class AbortRequest:
    rid: str


@dataclass(frozen=True, slots=True)
class AbortAll:
    """Every request submitted so far, waiting or running."""

    message: str = "aborted by client"


@dataclass(slots=True)
class Call:
    """Run ``fn`` on the scheduler thread between steps; the caller waits on ``done``."""

    fn: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: Exception | None = None


@dataclass(frozen=True, slots=True)
class Stop:
    """Abort everything and end the loop."""

    message: str = "engine shut down"


Message = AddRequest | AbortRequest | AbortAll | Call | Stop


class Mailbox:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Message] = queue.SimpleQueue()

    def put(self, message: Message) -> None:
        self._queue.put(message)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the scheduler thread, between steps, and return its result."""
        message = Call(fn)
        self.put(message)
        message.done.wait()
        if message.error is not None:
            raise message.error
        return message.result

    def serve(self, scheduler: Scheduler) -> None:
        """The scheduler thread: handle every message waiting, run a step, repeat; block for
        a message only when there is no work. Returns after a Stop."""
        while True:
            try:
                message = self._queue.get(block=not scheduler.has_work)
                while True:
                    if not _handle(scheduler, message):
                        return
                    message = self._queue.get_nowait()
            except queue.Empty:
                pass
            try:
                scheduler.step()
            except Exception as e:  # a bug or OOM fails the batch, never the engine
                log.exception("scheduler step failed")
                scheduler.abort_all(f"engine error: {type(e).__name__}: {e}")


def _handle(scheduler: Scheduler, message: Message) -> bool:
    """Apply one message; False after a Stop."""
    if isinstance(message, AddRequest):
        scheduler.add_request(message.req)
    elif isinstance(message, AbortRequest):
        scheduler.abort(message.rid)
    elif isinstance(message, AbortAll):
        scheduler.abort_all(message.message)
    elif isinstance(message, Call):
        try:
            message.result = message.fn()
        except Exception as e:
            message.error = e
        message.done.set()
    elif isinstance(message, Stop):
        scheduler.abort_all(message.message)
        return False
    return True
