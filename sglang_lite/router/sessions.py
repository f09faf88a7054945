"""Sessions pinned to a replica: every request of one session (the ``user`` field or the
``X-Session-ID`` header) goes where the first one went while that replica is healthy, so a
conversation's growing prefix stays in one cache."""

from __future__ import annotations

from collections import OrderedDict

from sglang_lite.router.replica import Replica

SESSION_HEADER = "x-session-id"


class SessionTable:
    def __init__(self, max_sessions: int = 100_000):
        self.max_sessions = max_sessions
        self._pins: OrderedDict[str, Replica] = OrderedDict()

    def pinned(self, session: str, candidates: list[Replica]) -> Replica | None:
        """The session's replica if it is among ``candidates``, else None."""
        replica = self._pins.get(session)
        if replica is None or replica not in candidates:
            return None
        self._pins.move_to_end(session)
        return replica

    def pin(self, session: str, replica: Replica) -> None:
        self._pins[session] = replica
        self._pins.move_to_end(session)
        while len(self._pins) > self.max_sessions:
            self._pins.popitem(last=False)

    def __len__(self) -> int:
        return len(self._pins)
