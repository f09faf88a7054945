"""Priority scheduling (SGLang's --enable-priority-scheduling): the queue is served by
priority, and when KV memory is short a request that outranks a running one preempts it
(retracted, recomputed later, completed in full)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from sglang_lite import Engine
from sglang_lite.scheduler.policy import PriorityRule, order_waiting
from sglang_lite.server import create_app
from tests.server.conftest import LiveServer, assert_no_leaked_pages, server_info

# 16 pages of 16 tokens: two long prompts cannot be resident together.
OPTIONS = {"max_total_tokens": 256, "max_running_requests": 2, "enable_priority_scheduling": True}


@pytest.fixture(scope="module")
def prio_server(model_dir):
    eng = Engine(**OPTIONS)
    live = LiveServer(create_app(eng)).start()
    yield live
    live.stop()
    eng.shutdown()


@pytest.fixture()
def phttp(prio_server):
    with httpx.Client(base_url=prio_server.base_url, timeout=120) as c:
        yield c


def _submit(base: str, done: list, text: str, max_new: int, priority: int | None) -> threading.Thread:
    def run():
        body = {"text": text, "sampling_params": {"max_new_tokens": max_new, "temperature": 0,
                                                  "ignore_eos": True}}
        if priority is not None:
            body["priority"] = priority
        r = httpx.post(base + "/generate", json=body, timeout=120).json()
        done.append((priority, time.monotonic(), r))

    t = threading.Thread(target=run)
    t.start()
    return t


def _wait(http, key: str, at_least: int) -> None:
    deadline = time.monotonic() + 60
    while server_info(http)[key] < at_least:
        assert time.monotonic() < deadline, server_info(http)
        time.sleep(0.01)


def test_queue_is_served_by_priority(prio_server, phttp):
    done: list = []
    base = prio_server.base_url
    blockers = [_submit(base, done, "Count to one hundred:", n, 0) for n in (30, 60)]
    _wait(phttp, "num_running_reqs", 2)
    waiting = []
    for p in (1, 5, 3):  # arrive in this order, each while both slots are busy
        waiting.append(_submit(base, done, f"Say {p}:", 3, p))
        time.sleep(0.05)
    _wait(phttp, "num_queue_reqs", 3)
    for t in blockers + waiting:
        t.join(120)
    order = [p for p, _, _ in sorted(done, key=lambda d: d[1]) if p != 0]
    assert order == [5, 3, 1], done
    assert_no_leaked_pages(phttp)


def test_higher_priority_preempts_when_memory_is_short(prio_server, phttp):
    done: list = []
    base = prio_server.base_url
    long_prompt = "The history of the city, told year by year: " * 12  # ~130 tokens
    low = _submit(base, done, long_prompt, 80, 0)
    _wait(phttp, "num_running_reqs", 1)
    time.sleep(0.3)  # it is decoding now
    high = _submit(base, done, "A different long text about rivers and seas. " * 12, 4, 50)
    for t in (low, high):
        t.join(120)
    by_priority = {p: (t, r) for p, t, r in done}
    (t_low, r_low), (t_high, r_high) = by_priority[0], by_priority[50]
    assert t_high < t_low  # it did not wait for the low one to finish
    assert r_low["meta_info"]["num_retractions"] >= 1
    assert r_low["meta_info"]["completion_tokens"] == 80  # recomputed and completed in full
    assert r_low["meta_info"]["finish_reason"]["type"] == "length"
    assert r_high["meta_info"]["completion_tokens"] == 4
    assert_no_leaked_pages(phttp)


def test_no_preemption_that_would_not_let_the_request_start(prio_server, phttp):
    """The memory is held by a request that outranks the newcomer: retracting the low one
    would not make room, so it keeps running (no thrashing)."""
    done: list = []
    base = prio_server.base_url
    top = _submit(base, done, "The history of the city, told year by year: " * 12, 60, 100)
    low = _submit(base, done, "Hi", 30, 0)
    _wait(phttp, "num_running_reqs", 2)
    mid = _submit(base, done, "A different long text about rivers and seas. " * 12, 4, 50)
    for t in (top, low, mid):
        t.join(120)
    results = {p: r for p, _, r in done}
    assert results[0]["meta_info"]["num_retractions"] == 0
    assert results[0]["meta_info"]["completion_tokens"] == 30
    assert results[50]["meta_info"]["completion_tokens"] == 4
    assert_no_leaked_pages(phttp)


def test_priority_must_be_an_integer(phttp):
    r = phttp.post("/generate", json={"text": "x", "priority": "high", "sampling_params": {"max_new_tokens": 1}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "priority"


class _R:
    def __init__(self, priority, arrival, ids=()):
        self.priority, self.arrival_time, self.fill_ids = priority, arrival, list(ids)


@pytest.mark.parametrize("low_first,expected", [(False, [5, 3, 1, 1]), (True, [1, 1, 3, 5])])
def test_priority_rule_orders_and_picks_victims(low_first, expected):
    rule = PriorityRule(low_values_first=low_first, preemption_threshold=1)
    reqs = [_R(1, 0.0), _R(5, 1.0), _R(3, 2.0), _R(1, 3.0)]
    ordered = order_waiting(reqs, None, now=4.0, rank=rule.rank)
    assert [r.priority for r in ordered] == expected
    assert [r.arrival_time for r in ordered if r.priority == 1] == [0.0, 3.0]  # FCFS within a level
    victim = rule.victim(reqs)
    assert victim.priority == expected[-1] and victim.arrival_time == max(
        r.arrival_time for r in reqs if r.priority == expected[-1])
    top = ordered[0]
    assert rule.may_preempt(top, victim) == (abs(top.priority - victim.priority) > 1)
