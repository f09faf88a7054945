"""Admission order of the waiting queue: cache-aware (longest prefix match) or FCFS.

Policy only: it reads the radix tree through ``match_prefix`` and never locks, inserts or
evicts. The scheduler admits requests in the order returned here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sglang_lite.mem.radix_cache import RadixCache

DEFAULT_LPM_THRESHOLD = 128
DEFAULT_MAX_WAIT_S = 5.0


class Waiting(Protocol):
    """What ordering needs of a request: the tokens it will prefill and when it arrived."""

    fill_ids: list[int]
    arrival_time: float


W = TypeVar("W", bound=Waiting)


def order_waiting(
    waiting: Sequence[W],
    cache: RadixCache | None,
    now: float,
    *,
    lpm_threshold: int = DEFAULT_LPM_THRESHOLD,
    max_wait_s: float = DEFAULT_MAX_WAIT_S,
) -> list[W]:
    """Return ``waiting`` in admission order; the input is not modified.

    1. Starved requests (waiting longer than ``max_wait_s``) first, oldest first.
    2. Then, when ``cache`` is set and ``len(waiting) <= lpm_threshold``: longest cached
       prefix of ``fill_ids`` first (one ``match_prefix`` per request, so the cost is
       bounded by the threshold). Otherwise oldest first (FCFS).
    Ties break by arrival time, then by queue position (the sort is stable).
    """
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


@dataclass(frozen=True, slots=True)
class SchedulePolicy:
    """The ordering settings, validated once; calling it applies ``order_waiting``, so it
    plugs in wherever a ``(waiting, cache, now) -> list`` callable is expected."""

    lpm_threshold: int = DEFAULT_LPM_THRESHOLD
    max_wait_s: float = DEFAULT_MAX_WAIT_S

    def __post_init__(self) -> None:
        if self.lpm_threshold < 0:
            raise ValueError(f"lpm_threshold: must be >= 0, got {self.lpm_threshold}")
        if self.max_wait_s < 0:
            raise ValueError(f"max_wait_s: must be >= 0, got {self.max_wait_s}")

    def __call__(self, waiting: Sequence[W], cache: RadixCache | None, now: float) -> list[W]:
        return order_waiting(
            waiting, cache, now, lpm_threshold=self.lpm_threshold, max_wait_s=self.max_wait_s
        )
