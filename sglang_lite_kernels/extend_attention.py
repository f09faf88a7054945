"""Extend (prefill) attention over paged KV, variable lengths in one launch.

Request b's new tokens are rows ``extend_start_loc[b] : extend_start_loc[b] + extend_lens[b]``
of q. Their k/v are already in the pool (the backend stores first), so every key, cached
prefix and new token alike, is read through ``req_to_token`` at positions
``0 .. prefix_lens[b] + extend_lens[b] - 1``; new token i sees positions ``<= prefix_len + i``.
One program per (request, q head, block of new tokens); blocks past a request's length exit.
"""

from __future__ import annotations

import torch

from sglang_lite_kernels._triton import HAS_TRITON, tl, triton
from sglang_lite_kernels.decode_attention import (
    _check_batch_vector,
    _check_block,
    _check_contiguous_vectors,
    _check_paged_common,
    _gather_kv,
    load_kv,
    scale_args,
)


def _check_extend_args(q, k_buffer, v_buffer, req_to_token, req_pool_indices,
                       prefix_lens, extend_lens, extend_start_loc):
    _check_paged_common(q, k_buffer, v_buffer, req_to_token, req_pool_indices)
    batch = req_pool_indices.shape[0]
    for name, t in (("req_pool_indices", req_pool_indices), ("prefix_lens", prefix_lens),
                    ("extend_lens", extend_lens), ("extend_start_loc", extend_start_loc)):
        _check_batch_vector(name, t, batch, q.device)


def extend_attention_ref(q, k_buffer, v_buffer, req_to_token, req_pool_indices,
                         prefix_lens, extend_lens, extend_start_loc, sm_scale):
    """q [T, Hq, D] -> [T, Hq, D] in q.dtype; see the module docstring."""
    _check_extend_args(q, k_buffer, v_buffer, req_to_token, req_pool_indices,
                       prefix_lens, extend_lens, extend_start_loc)
    out = torch.empty_like(q)
    rows = zip(req_pool_indices.tolist(), prefix_lens.tolist(), extend_lens.tolist(),
               extend_start_loc.tolist())
    for row, prefix, ext, start in rows:
        k, v = _gather_kv(k_buffer, v_buffer, req_to_token, row, prefix + ext, q.shape[1])  # [Hq, L, D]
        qb = q[start:start + ext].float().transpose(0, 1)  # [Hq, E, D]
        scores = torch.einsum("hed,hld->hel", qb, k) * sm_scale  # [Hq, E, L]
        q_pos = prefix + torch.arange(ext, device=q.device)  # [E]
        visible = torch.arange(prefix + ext, device=q.device)[None, :] <= q_pos[:, None]  # [E, L]
        probs = scores.masked_fill(~visible, float("-inf")).softmax(-1)
        out[start:start + ext] = torch.einsum("hel,hld->ehd", probs, v).to(q.dtype)
    return out


@triton.jit
def _extend_kernel(
    q_ptr, o_ptr, k_ptr, v_ptr, req_to_token_ptr, req_pool_ptr, prefix_lens_ptr, extend_lens_ptr,
    extend_start_ptr, sm_scale, stride_qt, stride_qh, stride_ot, stride_oh,
    stride_kn, stride_kh, stride_vn, stride_vh, stride_rt, ks_ptr, vs_ptr, stride_ksn, stride_vsn,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, PRECISION: tl.constexpr, SCALED: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    mb = tl.program_id(2)
    ext_len = tl.load(extend_lens_ptr + b).to(tl.int32)
    if mb * BLOCK_M >= ext_len:
        return
    prefix = tl.load(prefix_lens_ptr + b).to(tl.int32)
    first = tl.load(extend_start_ptr + b).to(tl.int64)
    row = tl.load(req_pool_ptr + b).to(tl.int64)
    kvh = h // GROUP
    i = mb * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = i < ext_len
    d = tl.arange(0, BLOCK_D)
    d_mask = d < HEAD_DIM
    q_mask = m_mask[:, None] & d_mask[None, :]
    q = tl.load(q_ptr + (first + i)[:, None] * stride_qt + h * stride_qh + d[None, :], mask=q_mask, other=0.0)
    q_pos = prefix + i  # [BLOCK_M]

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    kv_end = prefix + tl.minimum(ext_len, (mb + 1) * BLOCK_M)
    for n0 in range(0, kv_end, BLOCK_N):
        pos = n0 + tl.arange(0, BLOCK_N)
        n_mask = pos < kv_end
        slots = tl.load(req_to_token_ptr + row * stride_rt + pos, mask=n_mask, other=0).to(tl.int64)
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = load_kv(k_ptr + slots[:, None] * stride_kn + kvh * stride_kh + d[None, :], kv_mask,
                    ks_ptr + slots * stride_ksn + kvh, n_mask, q.dtype, SCALED)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION) * sm_scale  # [BLOCK_M, BLOCK_N]
        visible = (pos[None, :] <= q_pos[:, None]) & n_mask[None, :]
        qk = tl.where(visible, qk, float("-inf"))
        # Key 0 is visible to every row, so m_new is finite from the first block on.
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        v = load_kv(v_ptr + slots[:, None] * stride_vn + kvh * stride_vh + d[None, :], kv_mask,
                    vs_ptr + slots * stride_vsn + kvh, n_mask, q.dtype, SCALED)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new

    o = acc / l_i[:, None]
    tl.store(o_ptr + (first + i)[:, None] * stride_ot + h * stride_oh + d[None, :],
             o.to(o_ptr.dtype.element_ty), mask=q_mask)


def extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens,
                     extend_lens, extend_start_loc, sm_scale, max_extend_len: int | None = None,
                     block_m: int = 64, block_n: int = 64, out=None, k_scale=None, v_scale=None):
    """Triton; same contract as ``extend_attention_ref``. -> [T, Hq, D].

    ``max_extend_len`` sizes the grid; pass it from host data to avoid a device sync.
    ``k_scale`` / ``v_scale`` [S, Hkv]: the buffers hold 8-bit codes (see ``decode_attention``).
    """
    _check_extend_args(q, k_buffer, v_buffer, req_to_token, req_pool_indices,
                       prefix_lens, extend_lens, extend_start_loc)
    *scales, scaled = scale_args(k_buffer, k_scale, v_scale)
    if not HAS_TRITON:
        raise RuntimeError("extend_attention: triton is not installed")
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or out.stride(-1) != 1:
        raise ValueError(f"out: expected {q.dtype} {tuple(q.shape)} with a contiguous last dim")
    batch, num_heads, head_dim = req_pool_indices.shape[0], q.shape[1], q.shape[2]
    _check_block("block_m", block_m)
    _check_block("block_n", block_n)
    _check_contiguous_vectors(req_pool_indices=req_pool_indices, prefix_lens=prefix_lens,
                              extend_lens=extend_lens, extend_start_loc=extend_start_loc)
    if max_extend_len is None:
        max_extend_len = int(extend_lens.max()) if batch else 0
    if batch == 0 or max_extend_len == 0:
        return out
    _extend_kernel[(batch, num_heads, triton.cdiv(max_extend_len, block_m))](
        q, out, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens,
        extend_start_loc, sm_scale, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        req_to_token.stride(0), *scales,
        GROUP=num_heads // k_buffer.shape[1], HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32", SCALED=scaled,
    )
    return out
