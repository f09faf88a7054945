"""Paged decode / extend attention and store_kv: Triton vs torch refs vs dense SDPA."""

import math

import pytest
import torch
import torch.nn.functional as F

from sglang_lite_kernels._triton import tl, triton
from sglang_lite_kernels.decode_attention import decode_attention, decode_attention_ref
from sglang_lite_kernels.extend_attention import extend_attention, extend_attention_ref
from sglang_lite_kernels.store_kv import store_kv, store_kv_ref

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
# triton 3.9's interpreter returns garbage from tl.dot on bf16 operands (a 16x16 bf16 dot is
# off by 2.5e10; the same operands cast to fp32 first are exact; fp16 is fine), so bf16
# attention runs compiled only: here on a GPU, and in test_gpu_*_realistic. Interpreting it
# with the dots upcast to fp32 would check a kernel other than the one that runs, so CPU CI
# covers half precision with fp16, and test_interpreter_bf16_dot_is_still_wrong says when
# the interpreter is fixed and the skip can go.


def _skip_bf16_interpreted(device, dtype):
    if device == "cpu" and dtype == torch.bfloat16:
        pytest.skip("interpreter tl.dot is wrong for bf16 (checked on GPU)")


@triton.jit
def _dot_kernel(a_ptr, b_ptr, o_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    b = tl.load(b_ptr + r[:, None] * N + r[None, :])
    tl.store(o_ptr + r[:, None] * N + r[None, :], tl.dot(a, b))


@pytest.mark.xfail(strict=True, reason="triton's interpreter tl.dot is wrong on bf16; when this "
                   "passes, drop _skip_bf16_interpreted")
def test_interpreter_bf16_dot_is_still_wrong(device):
    if device != "cpu":
        pytest.skip("compiled: the bf16 attention tests run")
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(16, 16, generator=gen).bfloat16() for _ in range(2))
    out = torch.empty(16, 16)
    _dot_kernel[(1,)](a, b, out, 16)
    torch.testing.assert_close(out, a.float() @ b.float(), atol=1e-4, rtol=1e-4)  # exact in fp32
PAGE = 16
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 3e-3}


def _paged_kv(seq_lens, num_kv_heads, head_dim, dtype, device, seed=0):
    """Random K/V for each request, scattered over non-contiguous pages of a pool.

    -> k_buffer, v_buffer [S, Hkv, D], req_to_token [R, Lmax] int32, req_pool_indices [B],
       dense per-request (k, v) [L, Hkv, D] in fp32.
    """
    gen = torch.Generator().manual_seed(seed)
    pages_per_req = [math.ceil(n / PAGE) for n in seq_lens]
    num_pages = sum(pages_per_req) + 3
    page_order = (torch.randperm(num_pages - 1, generator=gen) + 1).tolist()  # page 0 reserved
    max_len = max(pages_per_req) * PAGE + PAGE
    num_rows = len(seq_lens) + 2
    req_to_token = torch.zeros(num_rows, max_len, dtype=torch.int32)
    rows = torch.randperm(num_rows, generator=gen)[: len(seq_lens)]
    k_buffer = torch.randn(num_pages * PAGE, num_kv_heads, head_dim, generator=gen).to(dtype)
    v_buffer = torch.randn(num_pages * PAGE, num_kv_heads, head_dim, generator=gen).to(dtype)
    dense = []
    for row, n, npages in zip(rows.tolist(), seq_lens, pages_per_req):
        pages = [page_order.pop() for _ in range(npages)]
        slots = torch.cat([torch.arange(p * PAGE, (p + 1) * PAGE) for p in pages])[:n]
        req_to_token[row, :n] = slots.to(torch.int32)
        dense.append((k_buffer[slots].float(), v_buffer[slots].float()))
    to = dict(device=device)
    return (k_buffer.to(**to), v_buffer.to(**to), req_to_token.to(**to), rows.to(**to), dense)


def _lens(values, device):
    return torch.tensor(values, dtype=torch.int64, device=device)


def _sdpa(q, k, v, mask, scale):
    """q [Hq, E, D], k/v [L, Hkv, D] fp32, mask [E, L] bool -> [E, Hq, D]."""
    out = F.scaled_dot_product_attention(q, k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask,
                                         scale=scale, enable_gqa=True)
    return out.transpose(0, 1)


# ----------------------------------------------------------------------------- references


def test_decode_ref_matches_sdpa():
    seq_lens = [1, 17, 40]
    k_buf, v_buf, r2t, rows, dense = _paged_kv(seq_lens, 2, 32, torch.float32, "cpu")
    q = torch.randn(3, 6, 32)
    out = decode_attention_ref(q, k_buf, v_buf, r2t, rows, _lens(seq_lens, "cpu"), 0.2)
    for b, (k, v) in enumerate(dense):
        want = _sdpa(q[b][:, None], k, v, None, 0.2)[0]  # [Hq, D]
        torch.testing.assert_close(out[b], want, atol=1e-5, rtol=1e-5)


def test_extend_ref_matches_sdpa():
    prefix, ext = [0, 16, 5], [7, 1, 20]
    seq_lens = [p + e for p, e in zip(prefix, ext)]
    k_buf, v_buf, r2t, rows, dense = _paged_kv(seq_lens, 2, 32, torch.float32, "cpu")
    q = torch.randn(sum(ext), 8, 32)
    starts = [0, 7, 8]
    out = extend_attention_ref(q, k_buf, v_buf, r2t, rows, _lens(prefix, "cpu"), _lens(ext, "cpu"),
                               _lens(starts, "cpu"), 0.15)
    for (k, v), p, e, s in zip(dense, prefix, ext, starts):
        mask = torch.arange(p + e)[None, :] <= (p + torch.arange(e))[:, None]  # [E, L]
        want = _sdpa(q[s:s + e].transpose(0, 1), k, v, mask, 0.15)
        torch.testing.assert_close(out[s:s + e], want, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- Triton


GQA = [(4, 4), (6, 2), (8, 2), (8, 1)]  # (q heads, kv heads): ratios 1, 3, 4, 8


@pytest.mark.parametrize("num_heads,num_kv_heads", GQA)
def test_decode_triton_matches_ref(device, num_heads, num_kv_heads):
    seq_lens = [1, 17, 40, 33, 16]  # ragged, several ending mid-page
    k_buf, v_buf, r2t, rows, _ = _paged_kv(seq_lens, num_kv_heads, 32, torch.float32, device)
    q = torch.randn(len(seq_lens), num_heads, 32).to(device)
    args = (q, k_buf, v_buf, r2t, rows, _lens(seq_lens, device), 0.18)
    got = decode_attention(*args, num_kv_splits=4, block_n=16)
    torch.testing.assert_close(got, decode_attention_ref(*args), atol=TOL[torch.float32], rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_triton_half_precision(device, dtype):
    _skip_bf16_interpreted(device, dtype)
    seq_lens = [5, 30]
    k_buf, v_buf, r2t, rows, _ = _paged_kv(seq_lens, 2, 24, dtype, device)  # head_dim 24: masked
    q = torch.randn(2, 6, 24).to(device, dtype)
    args = (q, k_buf, v_buf, r2t, rows, _lens(seq_lens, device), 24**-0.5)
    got = decode_attention(*args, num_kv_splits=3, block_n=16)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), decode_attention_ref(*args).float(), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 4), (6, 2), (8, 1)])
def test_extend_triton_matches_ref(device, num_heads, num_kv_heads):
    prefix, ext = [0, 16, 5, 20], [7, 1, 20, 3]  # fresh prefill, decode-like, long, mid-page
    seq_lens = [p + e for p, e in zip(prefix, ext)]
    k_buf, v_buf, r2t, rows, _ = _paged_kv(seq_lens, num_kv_heads, 32, torch.float32, device)
    q = torch.randn(sum(ext), num_heads, 32).to(device)
    starts = [0, 7, 8, 28]
    args = (q, k_buf, v_buf, r2t, rows, _lens(prefix, device), _lens(ext, device),
            _lens(starts, device), 0.2)
    got = extend_attention(*args, max_extend_len=20, block_m=16, block_n=16)
    torch.testing.assert_close(got, extend_attention_ref(*args), atol=TOL[torch.float32], rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_extend_triton_half_precision(device, dtype):
    _skip_bf16_interpreted(device, dtype)
    prefix, ext = [3, 0], [18, 5]
    seq_lens = [p + e for p, e in zip(prefix, ext)]
    k_buf, v_buf, r2t, rows, _ = _paged_kv(seq_lens, 1, 32, dtype, device)
    q = torch.randn(23, 3, 32).to(device, dtype)
    args = (q, k_buf, v_buf, r2t, rows, _lens(prefix, device), _lens(ext, device), _lens([0, 18], device), 0.17)
    got = extend_attention(*args, block_m=16, block_n=16)
    torch.testing.assert_close(got.float(), extend_attention_ref(*args).float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_store_kv_matches_ref(device, dtype):
    k = torch.randn(5, 2, 24).to(device)
    v = torch.randn(5, 2, 24).to(device, dtype)
    slots = torch.tensor([3, 17, 0, 40, 8], device=device)
    bufs = [torch.zeros(48, 2, 24, dtype=dtype, device=device) for _ in range(4)]
    store_kv(k, v, bufs[0], bufs[1], slots)
    store_kv_ref(k, v, bufs[2], bufs[3], slots)
    assert torch.equal(bufs[0], bufs[2]) and torch.equal(bufs[1], bufs[3])


def test_launchers_reject_bad_shapes():
    k_buf, v_buf, r2t, rows, _ = _paged_kv([4], 2, 32, torch.float32, "cpu")
    with pytest.raises(ValueError, match="GQA"):
        decode_attention(torch.randn(1, 3, 32), k_buf, v_buf, r2t, rows, _lens([4], "cpu"), 1.0)
    with pytest.raises(ValueError, match="seq_lens"):
        decode_attention(torch.randn(1, 4, 32), k_buf, v_buf, r2t, rows, _lens([4, 4], "cpu"), 1.0)
    with pytest.raises(ValueError, match="last dim"):
        q = torch.randn(1, 32, 4).transpose(1, 2)
        decode_attention(q, k_buf, v_buf, r2t, rows, _lens([4], "cpu"), 1.0)
    with pytest.raises(ValueError, match="slots"):
        store_kv(torch.randn(2, 2, 32), torch.randn(2, 2, 32), k_buf, v_buf, torch.zeros(3, dtype=torch.int64))
    # The kernels read [B] vectors as ptr + b and need power-of-two blocks (tl.arange, tl.dot).
    with pytest.raises(ValueError, match="seq_lens: must be contiguous"):
        seq_lens = torch.tensor([[4, 0], [4, 0]])[:, 0]
        decode_attention(torch.randn(2, 4, 32), k_buf, v_buf, r2t, torch.zeros(2, dtype=torch.int64), seq_lens, 1.0)
    with pytest.raises(ValueError, match="block_n"):
        decode_attention(torch.randn(1, 4, 32), k_buf, v_buf, r2t, rows, _lens([4], "cpu"), 1.0, block_n=48)
    with pytest.raises(ValueError, match="slots: must be contiguous"):
        slots = torch.zeros(2, 2, dtype=torch.int64)[:, 0]
        store_kv(torch.randn(2, 2, 32), torch.randn(2, 2, 32), k_buf, v_buf, slots)


# ----------------------------------------------------------------------------- GPU, real shapes


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("num_heads,num_kv_heads", [(32, 8), (9, 3), (32, 32)])
def test_gpu_decode_realistic(num_heads, num_kv_heads):
    seq_lens = [1, 15, 100, 1000, 4097, 2048, 333, 64] * 4
    k_buf, v_buf, r2t, rows, _ = _paged_kv(seq_lens, num_kv_heads, 128, torch.bfloat16, "cuda")
    q = torch.randn(len(seq_lens), num_heads, 128, device="cuda", dtype=torch.bfloat16)
    args = (q, k_buf, v_buf, r2t, rows, _lens(seq_lens, "cuda"), 128**-0.5)
    torch.testing.assert_close(decode_attention(*args).float(), decode_attention_ref(*args).float(),
                               atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@requires_cuda
def test_gpu_extend_realistic():
    prefix, ext = [0, 512, 1000, 17, 2048], [300, 64, 1, 700, 129]
    seq_lens = [p + e for p, e in zip(prefix, ext)]
    k_buf, v_buf, r2t, rows, _ = _paged_kv(seq_lens, 8, 128, torch.bfloat16, "cuda")
    q = torch.randn(sum(ext), 32, 128, device="cuda", dtype=torch.bfloat16)
    starts = [0, 300, 364, 365, 1065]
    args = (q, k_buf, v_buf, r2t, rows, _lens(prefix, "cuda"), _lens(ext, "cuda"),
            _lens(starts, "cuda"), 128**-0.5)
    torch.testing.assert_close(extend_attention(*args).float(), extend_attention_ref(*args).float(),
                               atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@requires_cuda
def test_gpu_decode_bandwidth_script_runs():
    from sglang_lite_kernels.bench_decode import decode_bandwidth

    result = decode_bandwidth(batch=2, context=1024)
    assert result["gbps"] > 0 and result["ms"] > 0


def _coded(k_buf, v_buf, fmt_name):
    """The pool an 8-bit ``kv_cache_dtype`` keeps: codes [S, Hkv, D] and scales [S, Hkv] as
    strided views of one [S, 2, ...] tensor each (KVPool's layout), and the values it stands
    for (codes x scales) in fp32 for the reference."""
    from sglang_lite.mem.kv_format import kv_format

    fmt = kv_format(fmt_name)
    codes, scales = fmt.quantize(torch.stack((k_buf.float().cpu(), v_buf.float().cpu()), 1))
    values = fmt.dequantize(codes, scales, torch.float32)
    dev = k_buf.device
    codes, scales = codes.to(dev), scales.to(dev)
    return (codes[:, 0], codes[:, 1], scales[:, 0], scales[:, 1],
            values[:, 0].to(dev), values[:, 1].to(dev))


@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_decode_and_extend_read_8bit_kv_with_scales(device, fmt, dtype):
    """With k_scale / v_scale the kernels read 8-bit codes and scale each token's head: the
    result is attention over codes x scales (what the torch backend reads from the same pool)."""
    _skip_bf16_interpreted(device, dtype)
    prefix, ext = [0, 16, 5], [7, 1, 20]
    seq_lens = [p + e for p, e in zip(prefix, ext)]
    k_buf, v_buf, r2t, rows, _ = _paged_kv(seq_lens, 2, 32, torch.float32, device)
    k_c, v_c, k_s, v_s, k_val, v_val = _coded(k_buf, v_buf, fmt)
    assert k_s.stride(1) == 1 and k_s.stride(0) == 4  # heads contiguous, k and v side by side
    tol = max(TOL[dtype], 1e-4)
    q = torch.randn(len(seq_lens), 6, 32).to(device, dtype)
    dec = (r2t, rows, _lens(seq_lens, device), 0.2)
    got = decode_attention(q, k_c, v_c, *dec, num_kv_splits=2, block_n=16, k_scale=k_s, v_scale=v_s)
    want = decode_attention_ref(q.float(), k_val, v_val, *dec)
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)
    q = torch.randn(sum(ext), 6, 32).to(device, dtype)
    ex = (r2t, rows, _lens(prefix, device), _lens(ext, device), _lens([0, 7, 8], device), 0.2)
    got = extend_attention(q, k_c, v_c, *ex, block_m=16, block_n=16, k_scale=k_s, v_scale=v_s)
    want = extend_attention_ref(q.float(), k_val, v_val, *ex)
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)
    # without the scales the same codes give another answer: the scales are read
    plain = decode_attention(q[: len(seq_lens)], k_c.to(dtype), v_c.to(dtype), *dec, num_kv_splits=2, block_n=16)
    assert not torch.allclose(plain.float(), decode_attention_ref(q[: len(seq_lens)].float(), k_val, v_val, *dec),
                              atol=tol, rtol=tol)


def test_scales_are_refused_where_they_cannot_be_read(device):
    k_buf, v_buf, r2t, rows, _ = _paged_kv([5], 2, 32, torch.float32, device)
    k_c, v_c, k_s, v_s, _, _ = _coded(k_buf, v_buf, "int8")
    q = torch.randn(1, 2, 32).to(device)
    args = (r2t, rows, _lens([5], device), 0.2)
    with pytest.raises(ValueError, match="give both"):
        decode_attention(q, k_c, v_c, *args, k_scale=k_s)
    with pytest.raises(ValueError, match="8-bit codes"):
        decode_attention(q, k_buf, v_buf, *args, k_scale=k_s, v_scale=v_s)
    with pytest.raises(ValueError, match="k_scale: expected"):
        decode_attention(q, k_c, v_c, *args, k_scale=k_s[:3], v_scale=v_s)
