"""KVCacheManager on its own: a real KV pool, request-to-token table and radix tree on CPU,
requests driven through admit / allocate_batch / cache_unfinished / release / discard as the
scheduler drives them, without an engine or its thread."""

from __future__ import annotations

import pytest
import torch

from sglang_lite.mem.kv_pool import KVPool
from sglang_lite.mem.radix_cache import RadixCache
from sglang_lite.mem.req_to_token import ReqToTokenPool
from sglang_lite.request import Req
from sglang_lite.sampling_params import SamplingParams
from sglang_lite.scheduler.cache import KVCacheManager

PAGE = 4


def _manager(radix: bool, num_pages: int = 17) -> KVCacheManager:
    pool = KVPool(num_pages=num_pages, page_size=PAGE, num_layers=1, num_kv_heads=1, head_dim=2,
                  dtype=torch.float32, device="cpu")
    rows = ReqToTokenPool(max_reqs=4, max_context_len=64, device="cpu")
    return KVCacheManager(pool, rows, RadixCache(pool.allocator, PAGE) if radix else None)


def _req(ids: list[int], rid: str = "r") -> Req:
    return Req(rid, list(ids), SamplingParams(max_new_tokens=8), seed=0, on_output=None)


def _prefill(cache: KVCacheManager, req: Req) -> torch.Tensor:
    """Admit ``req`` and give it slots for the rest of its prompt, as one prefill step."""
    cache.admit(req)
    (slots,) = cache.allocate_batch([req], [req.extend_len])
    req.kv_len = req.seq_len
    return slots


def _row(cache: KVCacheManager, req: Req) -> list[int]:
    return cache.req_pool.req_to_token[req.kv.row, : req.kv_len].tolist()


def test_without_a_radix_tree_a_request_owns_its_pages_and_returns_them():
    cache = _manager(radix=False)
    free = cache.allocator.num_free_pages
    req = _req(range(10))
    slots = _prefill(cache, req)
    assert len(req.kv.pages) == 3 and cache.allocator.num_free_pages == free - 3  # 10 tokens, 4 a page
    assert slots.tolist() == [req.kv.pages[p // PAGE] * PAGE + p % PAGE for p in range(10)]
    assert _row(cache, req) == slots.tolist()  # the device row says the same as the host pages
    assert cache.pages_needed(req, 2) == 0 and cache.pages_needed(req, 3) == 1
    cache.release(req)
    assert cache.allocator.num_free_pages == free
    assert (req.kv.pages, req.kv_len, req.kv.row) == ([], 0, None)
    assert cache.req_pool.num_free_rows == 4


def test_a_released_prompt_serves_the_next_request_its_aligned_prefix():
    cache = _manager(radix=True)
    free = cache.allocator.num_free_pages
    first = _req(range(10), "a")
    first_slots = _prefill(cache, first)
    cache.release(first)  # 8 aligned tokens go to the tree; the third page is freed
    assert cache.radix.total_size == 8 and cache.allocator.num_free_pages == free - 2
    assert cache.available_pages == free  # the cached pages are evictable while unused

    second = _req([*range(10), 99], "b")
    cache.admit(second)
    assert second.kv_len == 8 and second.kv.num_cached_pages == 2
    assert _row(cache, second) == first_slots[:8].tolist()  # the same slots, no recompute
    assert cache.radix.evictable_size == 0  # locked while the request uses it
    cache.release(second)
    assert cache.radix.evictable_size == cache.radix.total_size
    cache.radix.check_invariants()


def test_the_cacheable_prefix_leaves_one_token_to_compute():
    cache = _manager(radix=True)
    _prefill(cache, first := _req(range(8), "a"))
    cache.release(first)
    again = _req(range(8), "b")  # the same 8 tokens: the last must be computed for its logits
    cache.admit(again)
    assert again.kv_len == 4 and again.extend_len == 4
    cache.discard(again)


def test_a_chunk_shares_its_prefix_while_it_runs_and_duplicates_are_freed():
    cache = _manager(radix=True)
    free = cache.allocator.num_free_pages
    a, b = _req(range(12), "a"), _req(range(12), "b")
    for r in (a, b):  # both admitted before either is cached: each computes the prefix
        cache.admit(r)
    cache.allocate_batch([a, b], [a.extend_len, b.extend_len])
    a.kv_len, b.kv_len = 12, 12
    cache.cache_unfinished(a)  # a's pages now back the tree, locked by a
    assert cache.radix.total_size == 12 and a.kv.num_cached_pages == 3
    b_pages = list(b.kv.pages)
    cache.cache_unfinished(b)  # b computed the same prefix: its pages are duplicates
    assert b.kv.num_cached_pages == 3 and _row(cache, b) == _row(cache, a)
    assert cache.allocator.num_free_pages == free - 3
    # b's host pages are the tree's now (no placeholder, no freed page): the one truth its
    # device row was written from.
    assert b.kv.pages == a.kv.pages and set(b_pages) <= set(cache.allocator._free)
    cache.release(a)
    cache.release(b)
    assert cache.allocator.num_free_pages + cache.radix.evictable_size // PAGE == free
    cache.radix.check_invariants()


def test_running_out_of_pages_evicts_cached_ones_then_refuses():
    cache = _manager(radix=True, num_pages=5)  # 4 usable pages: page 0 is reserved
    _prefill(cache, old := _req(range(9), "old"))
    cache.release(old)  # 2 pages cached, 2 free
    big = _req(range(100, 116), "big")
    _prefill(cache, big)  # 4 pages: the cached ones are evicted
    assert cache.radix.total_size == 0 and len(big.kv.pages) == 4
    more = _req(range(200, 204), "more")
    cache.admit(more)
    with pytest.raises(MemoryError, match="KV pool"):
        cache.allocate_batch([more], [4])
    cache.discard(more)
    cache.discard(big)
    assert cache.allocator.num_free_pages == 4


def test_discard_after_a_partial_release_frees_nothing_twice():
    cache = _manager(radix=False)
    free = cache.allocator.num_free_pages
    req = _req(range(6))
    _prefill(cache, req)
    cache.discard(req)
    cache.discard(req)  # everything was cleared as it was returned
    assert cache.allocator.num_free_pages == free and cache.req_pool.num_free_rows == 4


def test_slots_come_from_the_host_pages_and_agree_with_the_device_row():
    """slots_of derives a request's slots from its host pages (no device read-back); they are
    what the request-to-token row holds, before and after its prefix moved into the tree."""
    cache = _manager(radix=True)
    a, b = _req(range(12), "a"), _req(range(12), "b")
    for r in (a, b):
        cache.admit(r)
    cache.allocate_batch([a, b], [12, 12])
    a.kv_len = b.kv_len = 12
    assert cache.slots_of(b, 12).tolist() == _row(cache, b)
    cache.cache_unfinished(a)
    cache.cache_unfinished(b)  # b's duplicate pages freed, the tree's pages in their place
    for r in (a, b):
        assert cache.slots_of(r, 12).tolist() == _row(cache, r)
        assert cache.slots_of(r, 7).tolist() == _row(cache, r)[:7]
    cache.release(a)
    cache.release(b)


def test_planning_an_admission_changes_nothing_and_the_commit_matches_the_plan():
    cache = _manager(radix=True)
    _prefill(cache, first := _req(range(10), "a"))
    cache.release(first)
    free, evictable, rows = cache.allocator.num_free_pages, cache.radix.evictable_size, cache.req_pool.num_free_rows
    req = _req([*range(10), 7, 7, 7], "b")
    match = cache.match(req)
    assert (match.length, match.lock_pages) == (8, 2)
    assert cache.pages_to_admit(match, req.seq_len - match.length) == 2  # positions 8..12
    planned = cache.available_after(match)
    assert planned == cache.available_pages - 2
    assert (cache.allocator.num_free_pages, cache.radix.evictable_size, cache.req_pool.num_free_rows) == (
        free, evictable, rows)  # planned only: nothing locked, no row, no table write
    assert (req.kv_len, req.kv.pages, req.kv.row) == (0, [], None)
    cache.admit(req, match)
    assert req.kv_len == 8 and cache.radix.evictable_size == evictable - 8
    assert cache.pages_needed(req, req.extend_len) == cache.pages_to_admit(match, req.seq_len - 8)
    assert cache.available_pages == planned
    cache.release(req)
