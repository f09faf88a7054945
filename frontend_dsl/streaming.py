"""What a ``run(stream=True)`` program has appended so far, read by any number of iterators.

Every append is logged as ``(variable, delta)``: constant text under ``None``, a ``gen``'s
tokens and a ``select``'s choice under the call's variable, closed by ``(variable, None)``.
``text_iter()`` replays all deltas; ``text_iter("x")`` only those of ``x`` (SGLang's shape).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator


class StreamLog:
    def __init__(self) -> None:
        self._items: list[tuple[str | None, str | None]] = []
        self._cond = threading.Condition()
        self._closed = False

    def put(self, var: str | None, delta: str | None) -> None:
        with self._cond:
            self._items.append((var, delta))
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _batches(self) -> Iterator[list[tuple[str | None, str | None]]]:
        seen = 0
        while True:
            with self._cond:
                while len(self._items) <= seen and not self._closed:
                    self._cond.wait()
                batch, closed = self._items[seen:], self._closed
            seen += len(batch)
            yield batch
            if closed and not batch:
                return

    def iter_text(self) -> Iterator[str]:
        """Every delta, in order, until the program ends."""
        for batch in self._batches():
            yield from (delta for _, delta in batch if delta)

    def iter_var(self, name: str) -> Iterator[str]:
        """The deltas of variable ``name`` until its call finishes; ``""`` once if the program
        ends without it (as SGLang does)."""
        seen_var = False
        for batch in self._batches():
            for var, delta in batch:
                if var != name:
                    continue
                if delta is None:
                    return
                seen_var = True
                if delta:
                    yield delta
        if not seen_var:
            yield ""
