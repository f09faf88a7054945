"""Fork groups: ``forks = s.fork(n)``, ``forks += ...``, ``forks[i] += ...``, ``forks.join()``;
and the worker thread that runs one branch's appends in order."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from frontend_dsl.ir import Seq

if TYPE_CHECKING:
    from frontend_dsl.state import ProgramState

_DONE = object()


class ForkGroup:
    """The branches of ``s.fork(n)`` (SGLang's ProgramStateGroup)."""

    def __init__(self, parent: ProgramState, forks: list[ProgramState]):
        self.parent = parent
        self.forks = forks

    @property
    def states(self) -> list[ProgramState]:
        return self.forks

    def __getitem__(self, i: int) -> ProgramState:
        return self.forks[i]

    def __setitem__(self, i: int, state: ProgramState) -> None:
        # ``forks[i] += expr`` stores the branch back after appending to it in place.
        if state is not self.forks[i]:
            raise TypeError("fork: a branch can only be appended to, not replaced")

    def __len__(self) -> int:
        return len(self.forks)

    def __iter__(self) -> Iterator[ProgramState]:
        return iter(self.forks)

    def __iadd__(self, expr: Any) -> ForkGroup:
        """``forks += lambda i: ...`` appends ``f(i)`` to branch i; a list (one item per branch)
        appends item i to branch i; anything else is appended to every branch."""
        if callable(expr):
            for i, f in enumerate(self.forks):
                f += expr(i)
        elif isinstance(expr, list) or (isinstance(expr, tuple) and not isinstance(expr, Seq)):
            if len(expr) != len(self.forks):
                raise ValueError(f"forks += list: {len(expr)} items for {len(self.forks)} branches")
            for f, item in zip(self.forks, expr):
                f += item
        else:
            for f in self.forks:
                f += expr
        return self

    def join(self, mode: str = "gather_variable") -> None:
        """Wait for every branch. ``gather_variable``: each variable a branch set becomes the
        list of the branches' values in the parent. ``concate_and_append``: the branches' new
        text, concatenated in order, is appended to the parent and prefilled, so the parent's
        next call hits the cache for it. Request metadata always joins the parent's."""
        self.parent._join(self.forks, mode)


class Worker:
    """One thread running a branch's appends in order; the first error stops the rest."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def submit(self, fn: Callable[[], None]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True, name="dsl-fork")
            self._thread.start()
        self._queue.put(fn)

    def _loop(self) -> None:
        while True:
            fn = self._queue.get()
            try:
                if fn is _DONE:
                    return
                if self.error is None:
                    fn()
            except BaseException as e:  # surfaces at the next read of the state
                self.error = e
            finally:
                self._queue.task_done()

    def drain(self) -> None:
        """Wait until everything submitted so far has run (or been skipped after an error)."""
        if self._thread is not None and self._thread is not threading.current_thread():
            self._queue.join()

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(_DONE)
