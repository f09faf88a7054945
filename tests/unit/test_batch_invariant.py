"""Batch-invariant numerics (--deterministic): a row's result is bit-identical alone, among
other rows at any position, and across chunkings; the invariant attention backend computes
the same attention as the torch backend (window and soft-cap included)."""

import pytest
import torch

from sglang_lite.attention.base import ForwardBatch, ForwardMode
from sglang_lite.attention.invariant_backend import BLOCK, BatchInvariantAttentionBackend
from sglang_lite.attention.torch_backend import TorchAttentionBackend
from sglang_lite.mem.kv_pool import KVPool
from sglang_lite.model.batch_invariant import (
    TILE_ROWS,
    BatchInvariantMode,
    check_batch_invariance,
    invariant_linear,
)

HEADS, KV_HEADS, DIM, PAGE, WIDTH = 9, 3, 64, 16, 1024  # SmolLM2-135M's heads


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_rows_do_not_depend_on_the_batch(dtype):
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(200, 96, generator=gen).to(dtype)
    x = torch.randn(5 * TILE_ROWS + 3, 96, generator=gen).to(dtype)
    full = invariant_linear(x, w)
    for start, n in ((0, 1), (3, 1), (1, TILE_ROWS), (5, 2 * TILE_ROWS + 1), (0, len(x))):
        assert torch.equal(invariant_linear(x[start : start + n], w), full[start : start + n]), (start, n)
    torch.testing.assert_close(full.float(), torch.nn.functional.linear(x, w).float(), rtol=2e-2, atol=2e-2)


def test_mode_routes_linears_and_transcendentals():
    gen = torch.Generator().manual_seed(1)
    lin = torch.nn.Linear(64, 40)
    x = torch.randn(3, 5, 64, generator=gen)
    with BatchInvariantMode():
        y, s = lin(x), torch.nn.functional.silu(x)
    assert torch.equal(y, invariant_linear(x, lin.weight, lin.bias))
    assert torch.equal(s, torch.nn.functional.silu(x.double()).float())


def test_device_check_passes_on_this_machine():
    check_batch_invariance(torch.device("cpu"), torch.float32, 96, DIM, HEADS // KV_HEADS, BLOCK)


def _requests(prefix_lens, extend_lens, seed=0):
    """A pool holding each request's prefix in scattered pages; -> pool, per-request slots,
    per-request k/v [L, Hkv, D] and q of the new tokens [E, Hq, D]."""
    gen = torch.Generator().manual_seed(seed)
    pool = KVPool(num_pages=120, page_size=PAGE, num_layers=1, num_kv_heads=KV_HEADS, head_dim=DIM,
                  dtype=torch.float32, device="cpu")
    pool.allocator.allocate(3)
    reqs = []
    for p, e in zip(prefix_lens, extend_lens):
        pages = pool.allocator.allocate(-(-(p + e) // PAGE))[::-1]
        slots = torch.cat([torch.arange(pg * PAGE, (pg + 1) * PAGE) for pg in pages])[: p + e]
        k, v = torch.randn(2, p + e, KV_HEADS, DIM, generator=gen)
        pool.store(0, slots[:p], k[:p], v[:p])
        reqs.append((slots, k, v, torch.randn(e, HEADS, DIM, generator=gen)))
    return pool, reqs


def _forward(backend, pool, reqs, rows, pieces, **how):
    """One forward over ``pieces`` = [(request index, first new position, count)]."""
    req_to_token = torch.zeros(4, WIDTH, dtype=torch.int32)
    for row, (slots, *_rest) in zip(rows, reqs):
        req_to_token[row, : len(slots)] = slots.to(torch.int32)
    q, k, v, loc, prefix, ext = [], [], [], [], [], []
    for i, start, n in pieces:
        slots, kk, vv, qq = reqs[i]
        p0 = len(slots) - len(qq)
        q.append(qq[start - p0 : start - p0 + n])
        k.append(kk[start : start + n])
        v.append(vv[start : start + n])
        loc.append(slots[start : start + n])
        prefix.append(start)
        ext.append(n)
    seq = [p + n for p, n in zip(prefix, ext)]
    req_rows = [rows[i] for i, _, _ in pieces]
    starts = [sum(ext[:j]) for j in range(len(ext))]

    def t(values):
        return torch.tensor(values, dtype=torch.int64)

    batch = ForwardBatch(
        mode=ForwardMode.DECODE if all(n == 1 for n in ext) else ForwardMode.EXTEND,
        input_ids=torch.zeros(sum(ext), dtype=torch.int64),
        positions=torch.cat([torch.arange(p, p + n) for p, n in zip(prefix, ext)]),
        out_cache_loc=torch.cat(loc), req_pool_indices=t(req_rows), seq_lens=t(seq), prefix_lens=t(prefix),
        extend_lens=t(ext), extend_start_loc=t(starts), logits_indices=t([s + n - 1 for s, n in zip(starts, ext)]),
        req_to_token=req_to_token, seq_lens_cpu=seq, prefix_lens_cpu=prefix, extend_lens_cpu=ext,
        req_pool_indices_cpu=req_rows)
    backend.init_forward_metadata(batch)
    return backend.forward(torch.cat(q), torch.cat(k), torch.cat(v), 0, batch, 0.3, **how)


@pytest.mark.parametrize("how", [{}, {"sliding_window": 40}, {"logit_softcap": 5.0}])
def test_invariant_attention_matches_torch_backend(how):
    prefix, extend = [70, 150, 9], [6, 1, 1]
    pool, reqs = _requests(prefix, extend)
    pieces = [(i, p, e) for i, (p, e) in enumerate(zip(prefix, extend))]
    want = _forward(TorchAttentionBackend(pool), pool, reqs, [2, 0, 3], pieces, **how)
    got = _forward(BatchInvariantAttentionBackend(pool), pool, reqs, [2, 0, 3], pieces, **how)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_invariant_attention_rows_equal_alone_in_a_batch_and_chunked():
    # Lengths past 512 keys: there the torch backend's SDPA gives a token a different result
    # when its prompt is cut into other chunks (13 + 24 instead of 37 new tokens).
    prefix, extend = [530, 40, 700], [37, 1, 1]
    pool, reqs = _requests(prefix, extend, seed=4)
    backend = BatchInvariantAttentionBackend(pool)
    batched = _forward(backend, pool, reqs, [1, 2, 0], [(1, 40, 1), (0, 530, 37), (2, 700, 1)])
    alone = _forward(backend, pool, reqs, [1, 2, 0], [(0, 530, 37)])
    assert torch.equal(batched[1:38], alone)
    first = _forward(backend, pool, reqs, [1, 2, 0], [(0, 530, 13)])  # the same 37 tokens in two chunks
    rest = _forward(backend, pool, reqs, [1, 2, 0], [(2, 700, 1), (0, 543, 24)])
    assert torch.equal(torch.cat([first, rest[1:]]), alone)
    decode_alone = _forward(backend, pool, reqs, [1, 2, 0], [(2, 700, 1)])
    assert torch.equal(rest[:1], decode_alone) and torch.equal(batched[38:], decode_alone)


def test_short_decode_alone_equals_it_in_a_batch():
    # Under 64 keys a decode step alone is one unit of one block: there the keys' permuted
    # reshape stayed a strided view (a copy for more units), and on an AVX512 EPYC the
    # scores GEMM fed those strides gave other last bits than in a batch of two.
    prefix, extend = [40, 21], [1, 1]
    pool, reqs = _requests(prefix, extend, seed=7)
    backend = BatchInvariantAttentionBackend(pool)
    batched = _forward(backend, pool, reqs, [1, 2], [(0, 40, 1), (1, 21, 1)])
    for i, p in enumerate(prefix):
        alone = _forward(backend, pool, reqs, [1, 2], [(i, p, 1)])
        assert torch.equal(batched[i : i + 1], alone), i
