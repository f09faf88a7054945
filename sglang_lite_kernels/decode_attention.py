"""Paged decode attention: one query token per request over its KV pages (flash-decoding).

Stage 1 splits each request's KV length into ``num_kv_splits`` chunks; one program handles one
(request, kv head, split) and all the q heads of that kv head's group, so GQA never repeats KV.
Stage 2 merges the chunks' partial outputs by their log-sum-exp. fp32 accumulation throughout.
The split count comes from host values (batch size, kv heads, SM count), never from device
data, so the launch is CUDA-graph safe; each request cuts its own length into at most that many
chunks of whole BLOCK_N blocks (short requests use fewer, the rest exit at once).
"""

from __future__ import annotations

import torch

from sglang_lite_kernels._triton import HAS_TRITON, tl, triton


def _check_paged_common(q, k_buffer, v_buffer, req_to_token, req_pool_indices):
    if q.dim() != 3 or k_buffer.dim() != 3 or k_buffer.shape != v_buffer.shape:
        raise ValueError(
            f"q [N, Hq, D], k_buffer/v_buffer [S, Hkv, D]: got {tuple(q.shape)}, "
            f"{tuple(k_buffer.shape)}, {tuple(v_buffer.shape)}"
        )
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads = k_buffer.shape[1]
    if k_buffer.shape[2] != head_dim or num_heads % num_kv_heads != 0:
        raise ValueError(f"heads/dim: q {tuple(q.shape)} does not fit kv {tuple(k_buffer.shape)} (GQA)")
    if req_to_token.dim() != 2 or req_to_token.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"req_to_token: expected int [R, Lmax], got {req_to_token.dtype} {tuple(req_to_token.shape)}")
    for name, t in (("q", q), ("k_buffer", k_buffer), ("v_buffer", v_buffer), ("req_to_token", req_to_token)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name}: last dim must be contiguous, strides {t.stride()}")
        if t.device != q.device:
            raise ValueError(f"{name}: on {t.device}, q on {q.device}")
    if k_buffer.dtype != v_buffer.dtype:
        raise ValueError(f"k_buffer, v_buffer: dtypes differ ({k_buffer.dtype}, {v_buffer.dtype})")
    if req_pool_indices.dim() != 1 or req_pool_indices.device != q.device:
        raise ValueError(f"req_pool_indices: expected [B] on {q.device}, got {tuple(req_pool_indices.shape)}")


def _check_batch_vector(name, t, batch, device):
    if t.shape != (batch,) or t.dtype.is_floating_point or t.device != device:
        raise ValueError(f"{name}: expected int [{batch}] on {device}, got {t.dtype} {tuple(t.shape)} on {t.device}")


def _check_contiguous_vectors(**vectors) -> None:
    # The Triton kernels index these [B] tensors as ptr + b.
    for name, t in vectors.items():
        if t.numel() > 1 and t.stride(0) != 1:
            raise ValueError(f"{name}: must be contiguous, stride {t.stride()}")


def _check_block(name: str, value: int) -> None:
    # tl.arange needs a power of two; tl.dot needs every dimension >= 16.
    if value < 16 or value & (value - 1):
        raise ValueError(f"{name}: must be a power of two >= 16, got {value}")


def _check_decode_args(q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens):
    _check_paged_common(q, k_buffer, v_buffer, req_to_token, req_pool_indices)
    _check_batch_vector("req_pool_indices", req_pool_indices, q.shape[0], q.device)
    _check_batch_vector("seq_lens", seq_lens, q.shape[0], q.device)


def _gather_kv(k_buffer, v_buffer, req_to_token, row, length, num_heads):
    """Dense fp32 K/V [Hq, length, D] of one request, KV heads repeated for the group."""
    slots = req_to_token[row, :length].long()  # [L]
    group = num_heads // k_buffer.shape[1]
    k = k_buffer[slots].float().repeat_interleave(group, dim=1)  # [L, Hq, D]
    v = v_buffer[slots].float().repeat_interleave(group, dim=1)
    return k.transpose(0, 1), v.transpose(0, 1)


def decode_attention_ref(q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, sm_scale):
    """q [B, Hq, D] attends to its request's first seq_len tokens -> [B, Hq, D] in q.dtype."""
    _check_decode_args(q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens)
    out = torch.empty_like(q)
    for b, (row, length) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        k, v = _gather_kv(k_buffer, v_buffer, req_to_token, row, length, q.shape[1])  # [Hq, L, D]
        scores = torch.einsum("hd,hld->hl", q[b].float(), k) * sm_scale  # [Hq, L]
        out[b] = torch.einsum("hl,hld->hd", scores.softmax(-1), v).to(q.dtype)
    return out


@triton.jit
def load_kv(ptrs, mask, scale_ptrs, n_mask, dtype: tl.constexpr, SCALED: tl.constexpr):
    """A [BLOCK_N, BLOCK_D] tile of k or v in ``dtype`` (q's): the pool's values, or with SCALED
    its 8-bit codes times each token's scale (one a token and kv head, ``kv_format``)."""
    x = tl.load(ptrs, mask=mask, other=0.0)
    if SCALED:
        scale = tl.load(scale_ptrs, mask=n_mask, other=0.0).to(tl.float32)
        return (x.to(tl.float32) * scale[:, None]).to(dtype)
    return x.to(dtype)


def scale_args(k_buffer, k_scale, v_scale) -> tuple:
    """(k scales, v scales, their slot strides, SCALED) for the kernels: the scales of an 8-bit
    pool ([S, Hkv] each, heads contiguous), or the buffer itself as an unread stand-in."""
    if (k_scale is None) != (v_scale is None):
        raise ValueError("k_scale, v_scale: give both (an 8-bit pool) or neither")
    if k_scale is None:
        return k_buffer, k_buffer, 0, 0, False
    for name, t in (("k_scale", k_scale), ("v_scale", v_scale)):
        if t.shape != k_buffer.shape[:2] or t.stride(1) != 1 or t.device != k_buffer.device:
            raise ValueError(f"{name}: expected [{k_buffer.shape[0]}, {k_buffer.shape[1]}] with heads contiguous "
                             f"on {k_buffer.device}, got {tuple(t.shape)} strides {t.stride()} on {t.device}")
    if k_buffer.dtype not in (torch.int8, torch.float8_e4m3fn):
        raise ValueError(f"k_scale: scales go with 8-bit codes (int8, float8_e4m3fn), not {k_buffer.dtype}")
    return k_scale, v_scale, k_scale.stride(0), v_scale.stride(0), True


@triton.jit
def _decode_stage1(
    q_ptr, k_ptr, v_ptr, req_to_token_ptr, req_pool_ptr, seq_lens_ptr, mid_o_ptr, mid_lse_ptr,
    sm_scale, stride_qb, stride_qh, stride_kn, stride_kh, stride_vn, stride_vh, stride_rt,
    stride_mob, stride_moh, stride_mos, stride_mlb, stride_mlh, ks_ptr, vs_ptr, stride_ksn, stride_vsn,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
    SCALED: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    h_off = tl.arange(0, BLOCK_H)
    heads = kvh * GROUP + h_off
    h_mask = h_off < GROUP
    d = tl.arange(0, BLOCK_D)
    d_mask = d < HEAD_DIM
    seq_len = tl.load(seq_lens_ptr + b).to(tl.int32)
    row = tl.load(req_pool_ptr + b).to(tl.int64)
    split_len = (seq_len + NUM_SPLITS - 1) // NUM_SPLITS
    split_len = (split_len + BLOCK_N - 1) // BLOCK_N * BLOCK_N  # whole blocks per split
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)

    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + d[None, :],
                mask=h_mask[:, None] & d_mask[None, :], other=0.0)  # [BLOCK_H, BLOCK_D]
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + tl.arange(0, BLOCK_N)
        n_mask = pos < end
        slots = tl.load(req_to_token_ptr + row * stride_rt + pos, mask=n_mask, other=0).to(tl.int64)
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = load_kv(k_ptr + slots[:, None] * stride_kn + kvh * stride_kh + d[None, :], kv_mask,
                    ks_ptr + slots * stride_ksn + kvh, n_mask, q.dtype, SCALED)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION) * sm_scale  # [BLOCK_H, BLOCK_N]
        qk = tl.where(n_mask[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        v = load_kv(v_ptr + slots[:, None] * stride_vn + kvh * stride_vh + d[None, :], kv_mask,
                    vs_ptr + slots * stride_vsn + kvh, n_mask, q.dtype, SCALED)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new

    nonempty = end > start
    o = tl.where(nonempty, acc / tl.where(nonempty, l_i, 1.0)[:, None], 0.0)
    lse = tl.where(nonempty, m_i + tl.log(tl.where(nonempty, l_i, 1.0)), float("-inf"))
    mo = mid_o_ptr + b * stride_mob + heads[:, None] * stride_moh + split * stride_mos + d[None, :]
    tl.store(mo, o, mask=h_mask[:, None] & d_mask[None, :])
    tl.store(mid_lse_ptr + b * stride_mlb + heads * stride_mlh + split, lse, mask=h_mask)


@triton.jit
def _decode_stage2(
    mid_o_ptr, mid_lse_ptr, o_ptr, stride_mob, stride_moh, stride_mos, stride_mlb, stride_mlh,
    stride_ob, stride_oh,
    HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    s_mask = s < NUM_SPLITS
    lse = tl.load(mid_lse_ptr + b * stride_mlb + h * stride_mlh + s, mask=s_mask, other=float("-inf"))
    lse_max = tl.max(lse, 0)
    w = tl.exp(lse - tl.where(lse_max > float("-inf"), lse_max, 0.0))  # [BLOCK_S], 0 for empty splits
    mo = mid_o_ptr + b * stride_mob + h * stride_moh + s[:, None] * stride_mos + d[None, :]
    parts = tl.load(mo, mask=s_mask[:, None] & (d[None, :] < HEAD_DIM), other=0.0)  # [BLOCK_S, BLOCK_D]
    total = tl.sum(w, 0)
    o = tl.sum(parts * w[:, None], 0) / tl.where(total > 0, total, 1.0)
    tl.store(o_ptr + b * stride_ob + h * stride_oh + d, o.to(o_ptr.dtype.element_ty), mask=d < HEAD_DIM)


def default_num_kv_splits(batch: int, num_kv_heads: int, device: torch.device) -> int:
    """Enough (request, kv head, split) programs to give every SM about four."""
    num_sms = 8
    if device.type == "cuda":
        num_sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(2, min(32, triton.cdiv(4 * num_sms, max(1, batch * num_kv_heads))))


def decode_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, sm_scale,
                     num_kv_splits: int | None = None, block_n: int = 64, out=None,
                     k_scale=None, v_scale=None):
    """Triton flash-decoding; same contract as ``decode_attention_ref``. -> [B, Hq, D].

    ``num_kv_splits`` defaults to ``default_num_kv_splits``; ``out`` may be preallocated.
    ``k_scale`` / ``v_scale`` [S, Hkv]: the buffers hold 8-bit codes, a value is code x scale.
    """
    _check_decode_args(q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens)
    *scales, scaled = scale_args(k_buffer, k_scale, v_scale)
    if not HAS_TRITON:
        raise RuntimeError("decode_attention: triton is not installed")
    batch, num_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or out.stride(-1) != 1:
        raise ValueError(f"out: expected {q.dtype} {tuple(q.shape)} with a contiguous last dim")
    _check_block("block_n", block_n)
    _check_contiguous_vectors(req_pool_indices=req_pool_indices, seq_lens=seq_lens)
    if batch == 0:
        return out
    if num_kv_splits is None:
        num_kv_splits = default_num_kv_splits(batch, num_kv_heads, q.device)
    if num_kv_splits < 1:
        raise ValueError(f"num_kv_splits: must be >= 1, got {num_kv_splits}")
    mid_o = torch.empty(batch, num_heads, num_kv_splits, head_dim, dtype=torch.float32, device=q.device)
    mid_lse = torch.empty(batch, num_heads, num_kv_splits, dtype=torch.float32, device=q.device)
    group = num_heads // num_kv_heads
    block_d = max(16, triton.next_power_of_2(head_dim))  # tl.dot needs >= 16
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    _decode_stage1[(batch, num_kv_heads, num_kv_splits)](
        q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, mid_o, mid_lse,
        sm_scale, q.stride(0), q.stride(1), k_buffer.stride(0), k_buffer.stride(1),
        v_buffer.stride(0), v_buffer.stride(1), req_to_token.stride(0),
        mid_o.stride(0), mid_o.stride(1), mid_o.stride(2), mid_lse.stride(0), mid_lse.stride(1), *scales,
        GROUP=group, HEAD_DIM=head_dim, NUM_SPLITS=num_kv_splits,
        BLOCK_H=max(16, triton.next_power_of_2(group)), BLOCK_D=block_d, BLOCK_N=block_n,
        PRECISION=precision, SCALED=scaled,
    )
    _decode_stage2[(batch, num_heads)](
        mid_o, mid_lse, out, mid_o.stride(0), mid_o.stride(1), mid_o.stride(2),
        mid_lse.stride(0), mid_lse.stride(1), out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, NUM_SPLITS=num_kv_splits, BLOCK_D=block_d,
        BLOCK_S=triton.next_power_of_2(num_kv_splits),
    )
    return out
