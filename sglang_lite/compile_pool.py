"""Constraint compiles in worker processes, so a hostile schema never holds the engine's
interpreter (the scheduler thread, the event loop, other compiles).

- A few workers (``python -m constraints.compile_worker``), each one compile at a time; a
  bounded number of callers may wait for one (``CompileBusyError`` past it).
- A real deadline: a compile still running ``timeout_s`` after it started has its process
  killed (and replaced); the caller gets ``CompileTimeoutError``.
- Cancellation: a caller's ``cancel`` event (the client went away) kills the compile too.
- Results cross the pipe without the vocabulary (``dumps_grammar``) and are cached here by
  (kind, spec), so a repeated schema costs a dict lookup.

Callers are threads (the engine compiles at intake in executor threads); nothing here runs
on the scheduler thread.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from multiprocessing.connection import Connection

import constraints
from constraints import CompileTimeoutError, ConstraintLimits
from constraints import errors as constraint_errors
from constraints.compile_worker import loads_grammar
from sglang_lite.errors import CompileBusyError, CompileWorkerError, EngineShutDown

log = logging.getLogger(__name__)

_POLL_S = 0.02
_KILL_GRACE_S = 0.5  # past the worker's own (cooperative) budget, before the kill
_START_TIMEOUT_S = 120.0
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(constraints.__file__)))


class CompileCancelled(Exception):
    """The caller gave up (client disconnected); the compile was stopped."""


@dataclass(slots=True)
class CompilePoolStats:
    compiles: int = 0
    cache_hits: int = 0
    timeouts: int = 0  # workers killed past the deadline
    cancelled: int = 0  # workers killed because the caller left
    busy: int = 0  # callers refused: queue full
    restarts: int = 0


class _Worker:
    """One worker process (``python -m constraints.compile_worker``) and its socket;
    ``restart`` replaces a killed one (from a thread: the caller never waits for the new
    interpreter, only a later compile waits until it is ready)."""

    def __init__(self, setup: tuple):
        self._setup = setup
        self.process: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.ready = False
        self._started = threading.Event()
        self.start()

    def start(self) -> None:
        self._started.clear()
        self.ready = False
        threading.Thread(target=self._spawn, name="sglang-lite-compile-spawn", daemon=True).start()

    def _spawn(self) -> None:
        try:
            self._start_process()
        except Exception:
            log.exception("starting a constraint compile worker failed")
            self.process, self.conn = None, None
        finally:
            self._started.set()

    def _start_process(self) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [_PACKAGE_ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]))
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "constraints.compile_worker", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL)
        self.conn = Connection(ours.detach())
        self.conn.send(self._setup)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, cancel: threading.Event | None) -> None:
        """Until the process has loaded (not part of any compile's deadline)."""
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not self._started.wait(_POLL_S):
            if cancel is not None and cancel.is_set():
                raise CompileCancelled()
        if self.process is None:
            raise CompileWorkerError("constraint compile worker did not start")
        while not self.ready:
            if self.conn.poll(_POLL_S):
                self.ready = self.conn.recv() == ("ready",)
            elif cancel is not None and cancel.is_set():
                raise CompileCancelled()
            elif time.monotonic() > deadline or not self.alive:
                raise CompileWorkerError("constraint compile worker did not start")

    def kill(self) -> None:
        self._started.wait()
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=5)
            self.conn.close()

    def close(self) -> None:
        self._started.wait(_START_TIMEOUT_S)
        if self.process is None:
            return
        self.conn.close()  # the worker sees EOF and returns
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)


class CompilePool:
    def __init__(self, info, workers: int = 2, max_queue: int = 32, timeout_s: float = 10.0,
                 max_states: int = 20_000, limits: ConstraintLimits | None = None,
                 cache_size: int = 256):
        self.info = info
        self.timeout_s = timeout_s
        self.max_queue = max_queue
        self.stats = CompilePoolStats()
        setup = (pickle.dumps(info), max_states, timeout_s, limits or ConstraintLimits())
        self._workers = [_Worker(setup) for _ in range(workers)]
        self._idle = list(self._workers)
        self._cond = threading.Condition()
        self._waiting = 0
        self._closed = False
        self._cache: OrderedDict[tuple[str, str], object] = OrderedDict()
        self._cache_size = cache_size

    @property
    def pids(self) -> list[int | None]:
        return [w.process.pid if w.process is not None else None for w in self._workers]

    def wait_ready(self) -> None:
        """Until every idle worker has loaded (tests, and callers that time compiles)."""
        with self._cond:
            idle = list(self._idle)
        for w in idle:
            w.wait_ready(None)

    def compile(self, kind: str, spec: str, cancel: threading.Event | None = None):
        """The CompiledGrammar for (kind, spec); a ConstraintError subclass if the worker
        refused it or ran past the deadline, CompileBusyError, or CompileCancelled."""
        key = (kind, tuple(spec) if isinstance(spec, list) else spec)  # choices come as a list
        with self._cond:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.stats.cache_hits += 1
                return hit
        worker = self._acquire(cancel)
        try:
            grammar = self._run(worker, kind, spec, cancel)
        finally:
            self._release(worker)
        with self._cond:
            self._cache[key] = grammar
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return grammar

    def _acquire(self, cancel: threading.Event | None) -> _Worker:
        with self._cond:
            if self._closed:
                raise EngineShutDown()
            if not self._idle and self._waiting >= self.max_queue:
                self.stats.busy += 1
                raise CompileBusyError(f"constraint compiles: {self.max_queue} already waiting; retry later")
            self._waiting += 1
            try:
                while not self._idle:
                    self._cond.wait(_POLL_S * 5)
                    if cancel is not None and cancel.is_set():
                        raise CompileCancelled()
                    if self._closed:
                        raise EngineShutDown()
                return self._idle.pop()
            finally:
                self._waiting -= 1

    def _release(self, worker: _Worker) -> None:
        with self._cond:
            self._idle.append(worker)
            self._cond.notify()

    def _run(self, worker: _Worker, kind: str, spec: str, cancel: threading.Event | None):
        worker.wait_ready(cancel)
        self.stats.compiles += 1
        worker.conn.send((kind, spec))
        deadline = time.monotonic() + self.timeout_s + _KILL_GRACE_S
        while not worker.conn.poll(_POLL_S):
            gone = cancel is not None and cancel.is_set()
            if gone or time.monotonic() > deadline or not worker.alive:
                self._replace(worker, "cancelled" if gone else "timeouts")
                if gone:
                    raise CompileCancelled()
                raise CompileTimeoutError(f"constraint compilation exceeded {self.timeout_s:.1f} s "
                                          "(its worker process was stopped)")
        status, *rest = worker.conn.recv()
        if status == "ok":
            return loads_grammar(rest[0], self.info)
        name, message, facts = rest
        cls = getattr(constraint_errors, name, constraint_errors.InvalidConstraintError)
        error = cls(message)
        for key, value in facts.items():  # limit; keyword and pointer of a schema keyword
            setattr(error, key, value)
        raise error

    def _replace(self, worker: _Worker, reason: str) -> None:
        setattr(self.stats, reason, getattr(self.stats, reason) + 1)
        self.stats.restarts += 1
        log.warning("compile worker %s stopped (%s)", worker.process.pid, reason)
        worker.kill()
        worker.start()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for w in self._workers:
            w.close()
