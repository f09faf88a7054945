"""Admission planning (PrefillAdder) and retraction policy on their own: a real KV pool,
request-to-token table and radix tree on CPU, no engine, no thread."""

from __future__ import annotations

import torch

from sglang_lite.mem.kv_pool import KVPool
from sglang_lite.mem.radix_cache import RadixCache
from sglang_lite.mem.req_to_token import ReqToTokenPool
from sglang_lite.request import Req
from sglang_lite.sampling_params import SamplingParams
from sglang_lite.scheduler.admission import DEDUP_TOKENS, PrefillAdder
from sglang_lite.scheduler.cache import KVCacheManager
from sglang_lite.scheduler.policy import PriorityRule
from sglang_lite.scheduler.retraction import make_room_for_decode

PAGE = 4


def _cache(num_pages: int = 33, radix: bool = True) -> KVCacheManager:
    pool = KVPool(num_pages=num_pages, page_size=PAGE, num_layers=1, num_kv_heads=1, head_dim=2,
                  dtype=torch.float32, device="cpu")
    rows = ReqToTokenPool(max_reqs=8, max_context_len=256, device="cpu")
    return KVCacheManager(pool, rows, RadixCache(pool.allocator, PAGE) if radix else None)


def _req(ids, rid: str, max_new: int = 8, arrival: float = 0.0, priority: int = 0) -> Req:
    return Req(rid, list(ids), SamplingParams(max_new_tokens=max_new), seed=0, on_output=None,
               arrival_time=arrival, priority=priority)


def _adder(cache, tokens=64, committed=0, running=(), chunk=32, max_running=8) -> PrefillAdder:
    return PrefillAdder(cache, tokens, committed, chunk_size=chunk, running=list(running),
                        max_running=max_running, new_token_ratio=1.0, context_length=256)


def _state(cache: KVCacheManager) -> tuple:
    return (cache.allocator.num_free_pages, cache.radix.evictable_size, cache.req_pool.num_free_rows,
            cache.req_pool.req_to_token.clone())


def test_a_plan_takes_nothing_and_its_commit_costs_what_it_said():
    cache = _cache()
    old = _req(range(18), "old")
    cache.admit(old)
    cache.allocate_batch([old], [18])
    old.kv_len = 18
    cache.release(old)  # 18 tokens: the 16 page-aligned ones cached
    req = _req([*range(18), *[5] * 6], "new")
    adder = _adder(cache)
    before = _state(cache)
    match = cache.match(req)
    plan = adder.plan(req, match, chunk_busy=False)
    after = _state(cache)
    assert before[:3] == after[:3] and torch.equal(before[3], after[3])  # planned only
    assert (plan.match.length, plan.num_tokens, plan.pages, plan.is_chunk) == (16, 8, 2, False)
    available = cache.available_after(match)
    cache.admit(req, match)
    assert cache.available_pages == available and cache.pages_needed(req, plan.num_tokens) == plan.pages
    adder.add(plan)
    assert (adder.tokens, adder.committed, adder.picked) == (64 - 8, 2, [(req, 8)])
    cache.discard(req)


def test_a_request_computing_the_same_new_tokens_waits_one_step():
    cache = _cache()
    prompt = list(range(100, 100 + DEDUP_TOKENS + 8))
    a, b, c = _req(prompt, "a"), _req(prompt, "b"), _req([7, *prompt], "c")
    adder = _adder(cache, tokens=200, chunk=64)
    plan = adder.plan(a, cache.match(a), chunk_busy=False)
    cache.admit(a, plan.match)
    adder.add(plan)
    assert adder.waits_for_in_flight(b, cache.match(b))  # same uncached tokens as a
    assert not adder.waits_for_in_flight(c, cache.match(c))  # different ones
    cache.discard(a)


def test_the_decode_reserve_and_a_chunk_in_progress_stop_admission():
    cache = _cache(num_pages=9)  # 8 usable pages
    running = _req(range(4), "running", max_new=16)  # reserves 16 tokens = 4 pages
    cache.admit(running)
    cache.allocate_batch([running], [4])
    running.kv_len = 4
    small, big = _req(range(50, 58), "small"), _req(range(60, 76), "big")
    adder = _adder(cache, running=[running])
    assert adder.plan(small, cache.match(small), chunk_busy=False) is not None  # 2 + 4 <= 7
    assert adder.plan(big, cache.match(big), chunk_busy=False) is None  # 4 + 4 > 7
    alone = _adder(_cache(num_pages=9))  # nothing running: no reserve to keep
    assert alone.plan(big, alone.cache.match(big), chunk_busy=False) is not None
    chunky = _adder(_cache(), chunk=8)
    plan = chunky.plan(big, chunky.cache.match(big), chunk_busy=False)
    assert plan.is_chunk and plan.num_tokens == 8
    assert chunky.plan(big, chunky.cache.match(big), chunk_busy=True) is None  # one chunked prefill at a time


def test_the_next_chunk_of_a_prompt_in_progress_comes_first():
    cache = _cache()
    req = _req(range(40), "long")
    cache.admit(req)
    cache.allocate_batch([req], [16])
    req.kv_len = 16
    adder = _adder(cache, tokens=64, chunk=16)
    assert not adder.add_chunk(req)  # 16 more of 24: not its last chunk, nothing else this step
    assert adder.picked == [(req, 16)] and adder.tokens == 48
    req.kv_len = 32
    last = _adder(cache, tokens=64, chunk=16)
    assert last.add_chunk(req) and last.picked == [(req, 8)]  # the last: others may follow
    cache.discard(req)


def test_room_for_decode_retracts_the_youngest_or_the_lowest_ranked_first():
    for rule, expected in ((None, ["young"]), (PriorityRule(), ["low"])):
        cache = _cache(num_pages=7, radix=False)  # 6 usable pages
        reqs = [_req(range(8), "old", arrival=1.0, priority=5), _req(range(8), "low", arrival=2.0, priority=0),
                _req(range(8), "young", arrival=3.0, priority=5)]
        for r in reqs:
            cache.admit(r)
            cache.allocate_batch([r], [8])
            r.kv_len = 8
        for r in reqs:
            r.output_ids.append(1)  # each needs a third page for its next token: 3 > 0 free
        retracted = []

        def retract(r, retracted=retracted, cache=cache):
            retracted.append(r.rid)
            cache.release(r)

        stay = make_room_for_decode(reqs, cache, rule, retract)
        assert retracted == expected and [r.rid for r in stay] == [r.rid for r in reqs if r.rid not in expected]
        assert sum(cache.pages_needed(r, r.extend_len) for r in stay) <= cache.available_pages
