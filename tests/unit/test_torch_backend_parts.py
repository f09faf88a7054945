"""The torch attention backend cuts a CPU decode batch of widely different lengths into a few
batches of similar lengths: the output is attention over each request's own tokens, as with
one padded batch, in a batch that mixes decode rows and a prefill row too. With the C decode
kernel (native_decode.py) the decode rows skip both, with the same output."""

import pytest
import torch
import torch.nn.functional as F

from sglang_lite.attention import native_decode, torch_backend
from sglang_lite.attention.base import ForwardBatch, ForwardMode
from sglang_lite.attention.torch_backend import TorchAttentionBackend
from sglang_lite.mem.kv_pool import KVPool

HEADS, KV_HEADS, DIM, PAGE = 6, 2, 16, 16


def _setup(prefix_lens, extend_lens, seed=0):
    """Requests already holding ``prefix_lens`` tokens in shuffled pages, and their new ones."""
    gen = torch.Generator().manual_seed(seed)
    pages_needed = sum(-(-(p + e) // PAGE) for p, e in zip(prefix_lens, extend_lens))
    pool = KVPool(num_pages=pages_needed + 2, page_size=PAGE, num_layers=1, num_kv_heads=KV_HEADS,
                  head_dim=DIM, dtype=torch.float32, device="cpu")
    n = len(prefix_lens)
    req_to_token = torch.zeros(n + 1, max(p + e for p, e in zip(prefix_lens, extend_lens)), dtype=torch.int32)
    rows = list(torch.randperm(n + 1, generator=gen)[:n].tolist())
    pool.allocator.allocate(1)
    dense, new_slots = [], []
    for row, p, e in zip(rows, prefix_lens, extend_lens):
        pages = pool.allocator.allocate(-(-(p + e) // PAGE))
        slots = torch.cat([torch.arange(pg * PAGE, (pg + 1) * PAGE) for pg in pages])[: p + e]
        req_to_token[row, : p + e] = slots.to(torch.int32)
        k_full = torch.randn(p + e, KV_HEADS, DIM, generator=gen)
        v_full = torch.randn(p + e, KV_HEADS, DIM, generator=gen)
        pool.store(0, slots[:p], k_full[:p], v_full[:p])
        dense.append((k_full, v_full))
        new_slots.append(slots[p:])
    q = torch.randn(sum(extend_lens), HEADS, DIM, generator=gen)
    k = torch.cat([kd[p:] for (kd, _), p in zip(dense, prefix_lens)])
    v = torch.cat([vd[p:] for (_, vd), p in zip(dense, prefix_lens)])

    def t(values):
        return torch.tensor(values, dtype=torch.int64)

    seq_lens = [p + e for p, e in zip(prefix_lens, extend_lens)]
    starts = [sum(extend_lens[:i]) for i in range(n)]
    batch = ForwardBatch(
        mode=ForwardMode.DECODE if all(e == 1 for e in extend_lens) else ForwardMode.EXTEND,
        input_ids=torch.zeros(sum(extend_lens), dtype=torch.int64),
        positions=torch.cat([torch.arange(p, p + e) for p, e in zip(prefix_lens, extend_lens)]),
        out_cache_loc=torch.cat(new_slots), req_pool_indices=t(rows), seq_lens=t(seq_lens),
        prefix_lens=t(prefix_lens), extend_lens=t(extend_lens), extend_start_loc=t(starts),
        logits_indices=t([s + e - 1 for s, e in zip(starts, extend_lens)]), req_to_token=req_to_token,
        seq_lens_cpu=seq_lens, prefix_lens_cpu=list(prefix_lens), extend_lens_cpu=list(extend_lens),
        req_pool_indices_cpu=rows)
    return pool, batch, (q, k, v), dense


def _dense(q, dense, prefix_lens, extend_lens, scale):
    out, start = [], 0
    for (k, v), p, e in zip(dense, prefix_lens, extend_lens):
        mask = torch.arange(p + e)[None, :] <= (p + torch.arange(e))[:, None]
        o = F.scaled_dot_product_attention(q[start:start + e].transpose(0, 1), k.transpose(0, 1),
                                           v.transpose(0, 1), attn_mask=mask, scale=scale, enable_gqa=True)
        out.append(o.transpose(0, 1))
        start += e
    return torch.cat(out)


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("extend_lens", [[1] * 12, [1] * 5 + [7] + [1] * 6])
def test_decode_rows_cut_by_length_attend_as_one_padded_batch(extend_lens, native, monkeypatch):
    if native and native_decode.module() is None:
        pytest.skip("the C decode attention does not build here")
    if not native:
        monkeypatch.setattr(native_decode, "_loaded", [None])
    calls = []
    real = native_decode.decode_attention
    monkeypatch.setattr(native_decode, "decode_attention", lambda *a: calls.append(1) or real(*a))
    prefix_lens = [3, 150, 40, 9, 97, 1, 61, 130, 16, 22, 75, 5]
    pool, batch, (q, k, v), dense = _setup(prefix_lens, extend_lens, seed=1)
    backend = TorchAttentionBackend(pool)
    backend.init_forward_metadata(batch)
    assert backend._decode_parts is None  # built when a layer's attention asks, not before
    parts = backend._parts()
    assert 2 <= len(parts) <= torch_backend.DECODE_PARTS  # the lengths differ widely: cut
    assert sorted(torch.cat([d.token_rows for d in parts]).tolist()) == \
        sorted(backend._decode.token_rows.tolist())  # every decode row in one part
    assert max(d.padded_len for d in parts[:-1]) < backend._decode.padded_len
    backend.init_forward_metadata(batch)
    out = backend.forward(q, k, v, 0, batch, 0.3)
    torch.testing.assert_close(out, _dense(q, dense, prefix_lens, extend_lens, 0.3), atol=1e-5, rtol=1e-5)
    assert bool(calls) == native
    assert (backend._decode_parts is None) == native  # the C kernel takes every row: no parts built

    monkeypatch.setattr(torch_backend, "DECODE_PARTS_FROM", 10**9)  # one padded batch
    backend.init_forward_metadata(batch)
    assert not backend._parts()
    torch.testing.assert_close(backend.forward(q, k, v, 0, batch, 0.3), out, atol=1e-5, rtol=1e-5)


def test_similar_lengths_stay_one_batch():
    prefix_lens = [60 + i for i in range(10)]  # the parts would gather almost as many pages
    pool, batch, _, _ = _setup(prefix_lens, [1] * 10)
    backend = TorchAttentionBackend(pool)
    backend.init_forward_metadata(batch)
    assert backend._parts() == []


@pytest.mark.parametrize("native", [False, True])
def test_extend_rows_take_the_c_kernel_with_the_same_output(native, monkeypatch):
    """Prefill rows, one after a cached prefix, beside decode rows: with the C kernels the
    extend rows attend in place through their slots (no gather, no SDPA), with the output of
    attention over each request's own tokens."""
    if native and (native_decode.module() is None or not native_decode.module().extend_lanes()):
        pytest.skip("no C extend attention here")
    if not native:
        monkeypatch.setattr(native_decode, "_loaded", [None])
    calls = []
    real = native_decode.extend_attention
    monkeypatch.setattr(native_decode, "extend_attention", lambda *a: calls.append(a[0].shape[0]) or real(*a))
    prefix_lens, extend_lens = [0, 40, 130, 12], [20, 7, 1, 33]
    pool, batch, (q, k, v), dense = _setup(prefix_lens, extend_lens, seed=2)
    backend = TorchAttentionBackend(pool)
    backend.init_forward_metadata(batch)
    out = backend.forward(q, k, v, 0, batch, 0.3)
    torch.testing.assert_close(out, _dense(q, dense, prefix_lens, extend_lens, 0.3), atol=1e-5, rtol=1e-5)
    assert calls == ([20, 7, 33] if native else [])
