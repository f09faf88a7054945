"""Admission order: longest prefix match first under the threshold, FCFS beyond, no starvation."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from sglang_lite.mem.kv_pool import PageAllocator
from sglang_lite.mem.radix_cache import RadixCache
from sglang_lite.scheduler.policy import SchedulePolicy, order_waiting

PS = 4


@dataclass
class _Req:
    name: str
    fill_ids: list[int]
    arrival_time: float


def _cache_with(*sequences: list[int]) -> RadixCache:
    cache = RadixCache(PageAllocator(64, PS), PS)
    for tokens in sequences:
        pages = cache.allocator.allocate(len(tokens) // PS)
        slots = torch.tensor([p * PS + i for p in pages for i in range(PS)])
        present = cache.insert(tokens, slots)
        cache.allocator.free(pages[: present // PS])
    return cache


SYSTEM = list(range(100, 116))  # 16 tokens, 4 pages
OTHER = list(range(200, 208))  # 8 tokens, 2 pages


def _queue() -> list[_Req]:
    return [
        _Req("none", [1, 2, 3, 4, 5], 1.0),
        _Req("short", OTHER + [9], 2.0),
        _Req("long", SYSTEM + [9, 9], 3.0),
        _Req("long-early", SYSTEM + [8], 0.5),
        _Req("mid-page", SYSTEM[:6], 0.1),  # matches 6 tokens, truncated to 4
    ]


def _names(reqs) -> list[str]:
    return [r.name for r in reqs]


def test_without_cache_is_fcfs():
    assert _names(order_waiting(_queue(), None, now=4.0)) == [
        "mid-page",
        "long-early",
        "none",
        "short",
        "long",
    ]


def test_longest_prefix_first_ties_by_arrival():
    cache = _cache_with(SYSTEM, OTHER)
    queue = _queue()
    ordered = order_waiting(queue, cache, now=4.0)
    assert _names(ordered) == ["long-early", "long", "short", "mid-page", "none"]
    assert _names(queue) == _names(_queue())  # input untouched


def test_ordering_does_not_lock():
    cache = _cache_with(SYSTEM, OTHER)
    order_waiting(_queue(), cache, now=4.0)
    assert cache.protected_size == 0 and cache.evictable_size == cache.total_size == 24
    cache.check_invariants()


def test_fcfs_beyond_threshold():
    cache = _cache_with(SYSTEM, OTHER)
    assert _names(order_waiting(_queue(), cache, now=4.0, lpm_threshold=4)) == [
        "mid-page",
        "long-early",
        "none",
        "short",
        "long",
    ]
    assert _names(order_waiting(_queue(), cache, now=4.0, lpm_threshold=5))[0] == "long-early"


def test_starved_requests_go_first_in_fcfs_order():
    cache = _cache_with(SYSTEM, OTHER)
    # At now=6.5 with max_wait 5: "mid-page" (0.1), "long-early" (0.5) and "none" (1.0) starve.
    ordered = order_waiting(_queue(), cache, now=6.5, max_wait_s=5.0)
    assert _names(ordered) == ["mid-page", "long-early", "none", "long", "short"]
    # At now=5.8 only "mid-page" and "long-early" starve; the rest go by match length.
    ordered = order_waiting(_queue(), cache, now=5.8, max_wait_s=5.0)
    assert _names(ordered) == ["mid-page", "long-early", "long", "short", "none"]


def test_empty_queue():
    assert order_waiting([], _cache_with(), now=0.0) == []


def test_schedule_policy_applies_each_setting():
    cache = _cache_with(SYSTEM, OTHER)
    lpm = ["long-early", "long", "short", "mid-page", "none"]
    assert _names(SchedulePolicy()(_queue(), cache, now=4.0)) == lpm
    # A threshold below the queue length alone turns the order into FCFS.
    assert _names(SchedulePolicy(lpm_threshold=4)(_queue(), cache, now=4.0)) == [
        "mid-page", "long-early", "none", "short", "long"]
    # A wait bound alone: the three waiting longer than 2.5 s go first, the rest by match.
    assert _names(SchedulePolicy(max_wait_s=2.5)(_queue(), cache, now=4.0)) == [
        "mid-page", "long-early", "none", "long", "short"]


def test_schedule_policy_rejects_bad_settings():
    with pytest.raises(ValueError, match="lpm_threshold"):
        SchedulePolicy(lpm_threshold=-1)
    with pytest.raises(ValueError, match="max_wait_s"):
        SchedulePolicy(max_wait_s=-0.5)
