import pytest
import torch

from sglang_lite.mem import KVPool, PageAllocator, ReqToTokenPool


def test_allocator_hands_out_distinct_pages_and_never_page_zero():
    alloc = PageAllocator(num_pages=9, page_size=16)
    assert alloc.num_usable_pages == 8 and alloc.num_free_pages == 8
    a = alloc.allocate(3)
    b = alloc.allocate(5)
    assert 0 not in a + b
    assert len(set(a + b)) == 8
    assert alloc.num_free_pages == 0
    assert not alloc.can_allocate(1)
    with pytest.raises(MemoryError):
        alloc.allocate(1)
    alloc.free(a)
    assert alloc.num_free_pages == 3 and alloc.can_allocate(3)
    assert sorted(alloc.allocate(3)) == sorted(a)


def test_allocator_rejects_a_pool_with_only_the_reserved_page():
    with pytest.raises(ValueError, match="num_pages"):
        PageAllocator(1, 16)


def test_page_slots_are_contiguous():
    alloc = PageAllocator(4, 16)
    assert list(alloc.page_slots(2)) == list(range(32, 48))


def test_kv_pool_store_writes_only_the_given_slots():
    pool = KVPool(num_pages=4, page_size=4, num_layers=2, num_kv_heads=2, head_dim=3,
                  dtype=torch.float32, device="cpu")
    k = torch.randn(3, 2, 3)
    v = torch.randn(3, 2, 3)
    slots = torch.tensor([5, 9, 4])
    pool.store(1, slots, k, v)
    assert torch.equal(pool.k_buffers[1][slots], k)
    assert torch.equal(pool.v_buffers[1][slots], v)
    assert pool.k_buffers[0].abs().sum() == 0  # other layer untouched
    untouched = torch.ones(pool.num_slots, dtype=torch.bool)
    untouched[slots] = False
    assert pool.k_buffers[1][untouched].abs().sum() == 0
    assert KVPool.bytes_per_token(30, 3, 64, torch.float32) == 2 * 30 * 3 * 64 * 4


def test_req_to_token_rows_are_recycled_and_written():
    pool = ReqToTokenPool(max_reqs=2, max_context_len=8, device="cpu")
    r0, r1 = pool.allocate(), pool.allocate()
    assert {r0, r1} == {0, 1}
    with pytest.raises(MemoryError):
        pool.allocate()
    pool.write(r1, 2, [40, 41, 42])
    assert pool.req_to_token[r1, :6].tolist() == [0, 0, 40, 41, 42, 0]
    pool.free(r0)
    assert pool.allocate() == r0


def test_req_to_token_write_many_sets_exactly_the_given_entries():
    pool = ReqToTokenPool(max_reqs=3, max_context_len=6, device="cpu")
    pool.write(0, 0, [7, 7, 7, 7, 7, 7])
    pool.write_many([0, 2, 2, 1], [5, 0, 3, 1], [50, 60, 63, 71])
    assert pool.req_to_token.tolist() == [[7, 7, 7, 7, 7, 50], [0, 71, 0, 0, 0, 0], [60, 0, 0, 63, 0, 0]]
