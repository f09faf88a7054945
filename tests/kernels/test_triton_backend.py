"""TritonAttentionBackend on a real KVPool vs a dense causal attention over the same tokens."""

import pytest
import torch
import torch.nn.functional as F

from sglang_lite.attention.base import ForwardBatch, ForwardMode
from sglang_lite.attention.triton_backend import TritonAttentionBackend
from sglang_lite.mem.kv_format import kv_format
from sglang_lite.mem.kv_pool import KVPool

HEADS, KV_HEADS, DIM, PAGE = 6, 2, 32, 16


def _setup(prefix_lens, extend_lens, device, dtype=torch.float32, seed=0, kv_cache_dtype=None):
    """A pool whose requests already hold ``prefix_lens`` tokens in scattered pages.

    -> pool, ForwardBatch, q/k/v of the new tokens, dense full K/V per request [L, Hkv, D].
    """
    gen = torch.Generator().manual_seed(seed)
    pool = KVPool(num_pages=12, page_size=PAGE, num_layers=2, num_kv_heads=KV_HEADS, head_dim=DIM,
                  dtype=dtype, device=device, kv_format=kv_cache_dtype and kv_format(kv_cache_dtype))
    req_to_token = torch.zeros(4, 64, dtype=torch.int32)
    rows = [2, 0]
    dense, slots_new = [], []
    pool.allocator.allocate(1)  # pages handed out in a non-contiguous order below
    for row, p, e in zip(rows, prefix_lens, extend_lens):
        pages = pool.allocator.allocate((p + e + PAGE - 1) // PAGE)
        slots = torch.cat([torch.arange(pg * PAGE, (pg + 1) * PAGE) for pg in pages])[: p + e]
        req_to_token[row, : p + e] = slots.to(torch.int32)
        k_full = torch.randn(p + e, KV_HEADS, DIM, generator=gen)
        v_full = torch.randn(p + e, KV_HEADS, DIM, generator=gen)
        pool.store(1, slots[:p].to(device), k_full[:p].to(device), v_full[:p].to(device))
        dense.append((k_full, v_full))
        slots_new.append(slots[p:])
    total = sum(extend_lens)
    q = torch.randn(total, HEADS, DIM, generator=gen)
    k = torch.cat([kd[p:] for (kd, _), p in zip(dense, prefix_lens)])
    v = torch.cat([vd[p:] for (_, vd), p in zip(dense, prefix_lens)])
    batch = _batch(prefix_lens, extend_lens, rows, torch.cat(slots_new), req_to_token, device)
    return pool, batch, (q.to(device, dtype), k.to(device, dtype), v.to(device, dtype)), dense


def _batch(prefix_lens, extend_lens, rows, out_cache_loc, req_to_token, device):
    def t(values):
        return torch.tensor(values, dtype=torch.int64, device=device)

    seq_lens = [p + e for p, e in zip(prefix_lens, extend_lens)]
    starts = [sum(extend_lens[:i]) for i in range(len(extend_lens))]
    positions = torch.cat([torch.arange(p, p + e) for p, e in zip(prefix_lens, extend_lens)])
    decode = all(e == 1 for e in extend_lens)
    return ForwardBatch(
        mode=ForwardMode.DECODE if decode else ForwardMode.EXTEND,
        input_ids=torch.zeros(sum(extend_lens), dtype=torch.int64, device=device),
        positions=positions.to(device), out_cache_loc=out_cache_loc.to(device),
        req_pool_indices=t(rows), seq_lens=t(seq_lens), prefix_lens=t(prefix_lens),
        extend_lens=t(extend_lens), extend_start_loc=t(starts),
        logits_indices=t([s + e - 1 for s, e in zip(starts, extend_lens)]),
        req_to_token=req_to_token.to(device), seq_lens_cpu=seq_lens, prefix_lens_cpu=list(prefix_lens),
        extend_lens_cpu=list(extend_lens), req_pool_indices_cpu=rows,
    )


def _dense_attention(q, dense, prefix_lens, extend_lens, scale):
    out, start = [], 0
    for (k, v), p, e in zip(dense, prefix_lens, extend_lens):
        mask = torch.arange(p + e)[None, :] <= (p + torch.arange(e))[:, None]  # [E, L]
        qs = q[start:start + e].float().transpose(0, 1)  # [Hq, E, D]
        o = F.scaled_dot_product_attention(qs, k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask,
                                           scale=scale, enable_gqa=True)
        out.append(o.transpose(0, 1))
        start += e
    return torch.cat(out)


@pytest.mark.parametrize("prefix_lens,extend_lens", [([20, 33], [5, 1]), ([17, 40], [1, 1])])
def test_triton_backend_matches_dense(device, prefix_lens, extend_lens):
    pool, batch, (q, k, v), dense = _setup(prefix_lens, extend_lens, device)
    backend = TritonAttentionBackend(pool)
    backend.init_forward_metadata(batch)
    out = backend.forward(q, k, v, 1, batch, 0.2)
    assert out.shape == q.shape and out.dtype == q.dtype
    want = _dense_attention(q.cpu(), dense, prefix_lens, extend_lens, 0.2)
    torch.testing.assert_close(out.cpu(), want, atol=2e-5, rtol=1e-4)
    # The new tokens' k/v landed in the pool at out_cache_loc.
    torch.testing.assert_close(pool.k_buffers[1][batch.out_cache_loc].cpu(), k.cpu())


def test_triton_backend_agrees_with_torch_backend(device):
    from sglang_lite.attention.torch_backend import TorchAttentionBackend

    pool, batch, (q, k, v), _ = _setup([9, 30], [12, 1], device, seed=3)
    outs = []
    for backend in (TritonAttentionBackend(pool), TorchAttentionBackend(pool)):
        backend.init_forward_metadata(batch)
        outs.append(backend.forward(q, k, v, 1, batch, 0.25).cpu())
    torch.testing.assert_close(outs[0], outs[1], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("extend_lens", [[12, 1], [1, 1]])
@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
def test_triton_backend_reads_an_8bit_pool_as_the_torch_backend_does(device, fmt, extend_lens):
    """--kv-cache-dtype int8 / fp8_e4m3 with the triton backend: the new tokens are coded into
    the pool, and prefill and decode attend over the same codes x scales as the torch backend."""
    from sglang_lite.attention.torch_backend import TorchAttentionBackend

    pool, batch, (q, k, v), dense = _setup([9, 30], extend_lens, device, seed=3, kv_cache_dtype=fmt)
    assert pool.format.scaled
    outs = []
    for backend in (TritonAttentionBackend(pool), TorchAttentionBackend(pool)):
        backend.init_forward_metadata(batch)
        outs.append(backend.forward(q, k, v, 1, batch, 0.25).cpu())
    torch.testing.assert_close(outs[0], outs[1], atol=1e-4, rtol=1e-4)
    # and both are close to attention over the exact values (8-bit coding error only)
    want = _dense_attention(q.cpu(), dense, [9, 30], extend_lens, 0.25)
    assert (outs[0] - want).abs().max().item() < (0.05 if fmt == "int8" else 0.2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("extend_lens", [[5, 1], [1, 1]])
def test_gpu_triton_backend_bf16(extend_lens):
    from sglang_lite.attention.torch_backend import TorchAttentionBackend

    pool, batch, (q, k, v), dense = _setup([20, 33], extend_lens, "cuda", dtype=torch.bfloat16)
    outs = []
    for backend in (TritonAttentionBackend(pool), TorchAttentionBackend(pool)):
        backend.init_forward_metadata(batch)
        outs.append(backend.forward(q, k, v, 1, batch, 0.2).float().cpu())
    torch.testing.assert_close(outs[0], outs[1], atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
def test_gpu_triton_backend_8bit_pool_bf16(fmt):
    from sglang_lite.attention.torch_backend import TorchAttentionBackend

    for extend_lens in ([5, 1], [1, 1]):
        pool, batch, (q, k, v), _ = _setup([20, 33], extend_lens, "cuda", dtype=torch.bfloat16, kv_cache_dtype=fmt)
        outs = []
        for backend in (TritonAttentionBackend(pool), TorchAttentionBackend(pool)):
            backend.init_forward_metadata(batch)
            outs.append(backend.forward(q, k, v, 1, batch, 0.2).float().cpu())
        torch.testing.assert_close(outs[0], outs[1], atol=2e-2, rtol=2e-2)
