"""The C decode attention (sglang_lite/attention/native_decode.c) against attention computed
in float64 from each row's gathered keys and values: rows of different lengths on scattered
pages (a partial last page, a one-token row), grouped-query heads, fp32 and bf16; and the torch
backend taking it for plain decode steps and its SDPA path for what it does not take."""

from __future__ import annotations

import pytest
import torch

from sglang_lite.attention import native_decode

pytestmark = pytest.mark.skipif(native_decode.module() is None, reason="the C decode attention does not build here")


def _reference(q, k, v, pages, lens, page_size, scale):
    b, hq, d = q.shape
    hkv = k.shape[1]
    out = torch.empty(b, hq, d, dtype=torch.float64)
    for r in range(b):
        slots = [int(pages[r, t // page_size]) * page_size + t % page_size for t in range(int(lens[r]))]
        kr, vr = k[slots].double(), v[slots].double()  # [L, Hkv, D]
        for h in range(hq):
            s = (kr[:, h // (hq // hkv)] @ q[r, h].double()) * scale
            out[r, h] = torch.softmax(s, 0) @ vr[:, h // (hq // hkv)]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hq,hkv,d", [(9, 3, 64), (4, 4, 32), (8, 1, 128)])
def test_decode_attention_matches_softmax_attention_over_each_rows_pages(hq, hkv, d, dtype):
    g = torch.Generator().manual_seed(hq * d)
    page_size, num_pages = 4, 40
    k = torch.randn(num_pages * page_size, hkv, d, generator=g).to(dtype)
    v = torch.randn(num_pages * page_size, hkv, d, generator=g).to(dtype)
    lens = torch.tensor([1, 7, 16, 33], dtype=torch.int64)
    max_pages = 9
    pages = torch.randperm(num_pages, generator=g)[: 4 * max_pages].view(4, max_pages).to(torch.int64)
    q = torch.randn(4, hq, d, generator=g).to(dtype)
    scale = d ** -0.5
    got = native_decode.decode_attention(q, k, v, pages, lens, page_size, scale)
    want = _reference(q, k, v, pages, lens, page_size, scale)
    assert got.dtype == dtype and got.shape == want.shape
    tol = 1e-5 if dtype == torch.float32 else 2**-7  # bf16: the output rounded
    assert ((got.double() - want).abs() <= tol * (1 + want.abs())).all()
    assert torch.allclose(got[0].double(), v[pages[0, 0] * page_size].double().repeat_interleave(hq // hkv, 0),
                          atol=tol)  # one position: its value


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_long_rows_attend_in_chunks_merged_to_each_rows_own_result(dtype):
    """Rows longer than a chunk (64 positions) are attended chunk by chunk on both threads and
    merged: the softmax attention still, and each row's result bitwise the same alone, among
    other rows, and on one thread or two."""
    hq, hkv, d, page_size = 9, 3, 64, 16
    g = torch.Generator().manual_seed(5)
    lens = torch.tensor([64, 65, 130, 300, 1, 257], dtype=torch.int64)
    max_pages = 20
    num_pages = len(lens) * max_pages
    k = torch.randn(num_pages * page_size, hkv, d, generator=g).to(dtype)
    v = torch.randn(num_pages * page_size, hkv, d, generator=g).to(dtype)
    pages = torch.randperm(num_pages, generator=g).view(len(lens), max_pages).to(torch.int64)
    q = (torch.randn(len(lens), hq, d, generator=g) * 3).to(dtype)
    scale = d ** -0.5
    got = native_decode.decode_attention(q, k, v, pages, lens, page_size, scale)
    want = _reference(q, k, v, pages, lens, page_size, scale)
    tol = 1e-5 if dtype == torch.float32 else 2**-7
    assert ((got.double() - want).abs() <= tol * (1 + want.abs())).all()
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            for r in range(len(lens)):
                alone = native_decode.decode_attention(q[r:r + 1], k, v, pages[r:r + 1], lens[r:r + 1], page_size, scale)
                assert torch.equal(alone[0], got[r]), (n, r)
    finally:
        torch.set_num_threads(threads)


def test_the_torch_backend_takes_it_only_for_what_it_supports():
    q = torch.randn(2, 4, 32)
    k = torch.zeros(64, 2, 32)
    assert native_decode.usable(q, k, torch.float32)
    assert not native_decode.usable(q, k.to(torch.bfloat16), torch.float32)  # a pool of another dtype
    assert not native_decode.usable(q.to(torch.float16), k.to(torch.float16), torch.float16)


def _extend_reference(q, k, v, slots, scale):
    """The last n of len(slots) positions, each against the keys up to its own, in float64."""
    n, hq, d = q.shape
    total, group = len(slots), hq // k.shape[1]
    kr, vr = k[slots].double(), v[slots].double()  # [L, Hkv, D]
    out = torch.empty(n, hq, d, dtype=torch.float64)
    for i in range(n):
        seen = total - n + i + 1
        for h in range(hq):
            s = (kr[:seen, h // group] @ q[i, h].double()) * scale
            out[i, h] = torch.softmax(s, 0) @ vr[:seen, h // group]
    return out


extend_builds = pytest.mark.skipif(native_decode.module() is None or not native_decode.module().extend_lanes(),
                                   reason="no vector code for the C extend attention here")


@extend_builds
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hq,hkv,d", [(9, 3, 64), (4, 4, 32), (8, 1, 128)])
@pytest.mark.parametrize("n,total", [(2, 2), (37, 37), (70, 70), (50, 260), (130, 131)])
def test_extend_attention_is_causal_attention_past_the_cached_prefix(n, total, hq, hkv, d, dtype):
    """New tokens after a prefix (total - n positions) on scattered slots, query blocks of
    several jobs (70 rows), key blocks cut by the causal edge: softmax attention over each
    token's own past, as computed in float64."""
    g = torch.Generator().manual_seed(n * total + d)
    k = torch.randn(400, hkv, d, generator=g).to(dtype)
    v = torch.randn(400, hkv, d, generator=g).to(dtype)
    slots = torch.randperm(400, generator=g)[:total]
    q = (torch.randn(n, hq, d, generator=g) * 2).to(dtype)
    scale = d ** -0.5
    got = native_decode.extend_attention(q, k, v, slots, scale)
    want = _extend_reference(q, k, v, slots, scale)
    assert got.dtype == dtype and got.shape == want.shape
    tol = 1e-5 if dtype == torch.float32 else 2**-7
    assert ((got.double() - want).abs() <= tol * (1 + want.abs())).all()
    if total == n:  # the first token sees only itself: its value
        assert torch.allclose(got[0].double(), v[slots[0]].double().repeat_interleave(hq // hkv, 0), atol=tol)


@extend_builds
def test_extend_attention_is_the_same_on_one_thread_or_two():
    hq, hkv, d = 9, 3, 64
    g = torch.Generator().manual_seed(3)
    k, v = torch.randn(300, hkv, d, generator=g), torch.randn(300, hkv, d, generator=g)
    slots = torch.randperm(300, generator=g)[:200]
    q = torch.randn(150, hq, d, generator=g)
    threads = torch.get_num_threads()
    try:
        outs = []
        for t in (1, 2):
            torch.set_num_threads(t)
            outs.append(native_decode.extend_attention(q, k, v, slots, 0.125))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(outs[0], outs[1])
