"""Admission order of the waiting queue: cache-aware (longest prefix match) or FCFS, under
request priorities when priority scheduling is on; and, for priorities, which running
requests give way when memory is short.

Policy only: it reads the radix tree through ``match_prefix`` and never locks, inserts or
evicts. The scheduler admits requests in the order returned here and retracts the requests
``PriorityRule`` names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sglang_lite.mem.radix_cache import RadixCache

DEFAULT_LPM_THRESHOLD = 128
DEFAULT_MAX_WAIT_S = 5.0


class Waiting(Protocol):
    """What ordering needs of a request: the tokens it will prefill and when it arrived."""

    fill_ids: list[int]
    arrival_time: float
    priority: int


W = TypeVar("W", bound=Waiting)


def order_waiting(
    waiting: Sequence[W],
    cache: RadixCache | None,
    now: float,
    *,
    lpm_threshold: int = DEFAULT_LPM_THRESHOLD,
    max_wait_s: float = DEFAULT_MAX_WAIT_S,
    rank: Callable[[W], int] | None = None,
) -> list[W]:
    """Return ``waiting`` in admission order; the input is not modified.

    With ``rank`` (priority scheduling) the highest rank comes first, and the rules below
    order each rank's requests among themselves.
    1. Starved requests (waiting longer than ``max_wait_s``) first, oldest first.
    2. Then, when ``cache`` is set and ``len(waiting) <= lpm_threshold``: longest cached
       prefix of ``fill_ids`` first (one ``match_prefix`` per request, so the cost is
       bounded by the threshold). Otherwise oldest first (FCFS).
    Ties break by arrival time, then by queue position (the sort is stable).
    """
    if rank is not None:
        levels: dict[int, list[W]] = {}
        for r in waiting:
            levels.setdefault(rank(r), []).append(r)
        return [r for level in sorted(levels, reverse=True)
                for r in order_waiting(levels[level], cache if len(waiting) <= lpm_threshold else None,
                                       now, lpm_threshold=lpm_threshold, max_wait_s=max_wait_s)]
    starved = [r for r in waiting if now - r.arrival_time > max_wait_s]
    rest = [r for r in waiting if now - r.arrival_time <= max_wait_s]
    starved.sort(key=_arrival)
    if cache is None or len(waiting) > lpm_threshold:
        rest.sort(key=_arrival)
    else:
        matched = {id(r): cache.match_prefix(getattr(r, "cache_ids", r.fill_ids)).prefix_len for r in rest}
        rest.sort(key=lambda r: (-matched[id(r)], r.arrival_time))
    return starved + rest


def _arrival(req: Waiting) -> float:
    return req.arrival_time


class Running(Protocol):
    arrival_time: float
    priority: int


R = TypeVar("R", bound=Running)


@dataclass(frozen=True, slots=True)
class PriorityRule:
    """How request priorities rank (SGLang's convention by default: higher values first;
    ``low_values_first`` is vLLM's), and when one request may preempt another: its rank must
    exceed the other's by more than ``preemption_threshold``."""

    low_values_first: bool = False
    preemption_threshold: int = 10

    def rank(self, req: Running) -> int:
        """Larger is more urgent."""
        return -req.priority if self.low_values_first else req.priority

    def victim(self, running: Sequence[R]) -> R:
        """The request to retract first: the lowest rank, the youngest among those."""
        return min(running, key=lambda r: (self.rank(r), -r.arrival_time))

    def may_preempt(self, waiting: Running, running: Running) -> bool:
        return self.rank(waiting) - self.rank(running) > self.preemption_threshold


@dataclass(frozen=True, slots=True)
class SchedulePolicy:
    """The ordering settings, validated once; calling it applies ``order_waiting``, so it
    plugs in wherever a ``(waiting, cache, now) -> list`` callable is expected.
    ``use_prefix=False`` is FCFS; ``priority`` ranks requests before anything else."""

    lpm_threshold: int = DEFAULT_LPM_THRESHOLD
    max_wait_s: float = DEFAULT_MAX_WAIT_S
    use_prefix: bool = True
    priority: PriorityRule | None = None

    def __post_init__(self) -> None:
        if self.lpm_threshold < 0:
            raise ValueError(f"lpm_threshold: must be >= 0, got {self.lpm_threshold}")
        if self.max_wait_s < 0:
            raise ValueError(f"max_wait_s: must be >= 0, got {self.max_wait_s}")

    def __call__(self, waiting: Sequence[W], cache: RadixCache | None, now: float) -> list[W]:
        return order_waiting(
            waiting, cache if self.use_prefix else None, now, lpm_threshold=self.lpm_threshold,
            max_wait_s=self.max_wait_s, rank=self.priority.rank if self.priority else None,
        )
