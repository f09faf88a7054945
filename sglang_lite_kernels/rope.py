"""Rotary position embedding applied to q and k in place, one kernel for both (rotate-half
layout, as in transformers' Llama): for each token, ``x1, x2 = halves of each head`` become
``x1 * cos - x2 * sin, x2 * cos + x1 * sin``, in fp32 with the fp32 ``cos``/``sin`` tables
``[max_positions, head_dim // 2]`` read at the token's position, rounded back to x's dtype.

q ``[T, Hq, D]`` and k ``[T, Hkv, D]`` may be strided views (the split of a fused qkv
projection); only their last dim must be contiguous.
"""

from __future__ import annotations

import torch

from sglang_lite_kernels._triton import HAS_TRITON, tl, triton


def _check_args(q, k, cos_cache, sin_cache, positions):
    if q.dim() != 3 or k.dim() != 3 or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise ValueError(f"q [T, Hq, D], k [T, Hkv, D]: got {tuple(q.shape)}, {tuple(k.shape)}")
    half = q.shape[2] // 2
    if q.shape[2] % 2:
        raise ValueError(f"q: head_dim must be even, got {q.shape[2]}")
    for name, t in (("cos_cache", cos_cache), ("sin_cache", sin_cache)):
        if t.dim() != 2 or t.shape[1] != half or t.dtype != torch.float32 or t.stride(1) != 1:
            raise ValueError(f"{name}: expected a contiguous float32 [max_positions, {half}], "
                             f"got {t.dtype} {tuple(t.shape)}")
    if sin_cache.stride(0) != cos_cache.stride(0):
        raise ValueError("sin_cache: must have cos_cache's row stride")
    if positions.shape != (q.shape[0],) or positions.dtype.is_floating_point:
        raise ValueError(f"positions: expected int [{q.shape[0]}], got {positions.dtype} {tuple(positions.shape)}")
    for name, t in (("q", q), ("k", k)):
        if t.stride(2) != 1:
            raise ValueError(f"{name}: last dim must be contiguous, strides {t.stride()}")
    for name, t in (("k", k), ("cos_cache", cos_cache), ("sin_cache", sin_cache), ("positions", positions)):
        if t.device != q.device:
            raise ValueError(f"{name}: on {t.device}, q on {q.device}")


def rotate_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D] rotated by cos/sin [T, 1, D // 2] (fp32), in x's dtype."""
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def apply_rope_ref(q, k, cos_cache, sin_cache, positions) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotated copies of q and k."""
    _check_args(q, k, cos_cache, sin_cache, positions)
    cos, sin = cos_cache[positions].unsqueeze(1), sin_cache[positions].unsqueeze(1)
    return rotate_ref(q, cos, sin), rotate_ref(k, cos, sin)


@triton.jit
def _rotate_heads(x_ptr, stride_h, cos, sin, num_heads, HALF: tl.constexpr, BLOCK_H: tl.constexpr,
                  BLOCK_D: tl.constexpr):
    heads = tl.arange(0, BLOCK_H)[:, None]
    dims = tl.arange(0, BLOCK_D)[None, :]
    mask = (heads < num_heads) & (dims < HALF)
    first = x_ptr + heads * stride_h + dims
    x1 = tl.load(first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(first + HALF, mask=mask, other=0.0).to(tl.float32)
    tl.store(first, (x1 * cos - x2 * sin).to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(first + HALF, (x2 * cos + x1 * sin).to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_kernel(q_ptr, k_ptr, cos_ptr, sin_ptr, pos_ptr, stride_qt, stride_qh, stride_kt, stride_kh,
                 stride_cs, num_q_heads, num_k_heads, HALF: tl.constexpr, BLOCK_HQ: tl.constexpr,
                 BLOCK_HK: tl.constexpr, BLOCK_D: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + token).to(tl.int64)
    dims = tl.arange(0, BLOCK_D)[None, :]
    cos = tl.load(cos_ptr + pos * stride_cs + dims, mask=dims < HALF, other=0.0)
    sin = tl.load(sin_ptr + pos * stride_cs + dims, mask=dims < HALF, other=0.0)
    _rotate_heads(q_ptr + token * stride_qt, stride_qh, cos, sin, num_q_heads, HALF, BLOCK_HQ, BLOCK_D)
    _rotate_heads(k_ptr + token * stride_kt, stride_kh, cos, sin, num_k_heads, HALF, BLOCK_HK, BLOCK_D)


def apply_rope_(q, k, cos_cache, sin_cache, positions) -> None:
    """Triton: rotate q and k in place, one program per token; the math of ``apply_rope_ref``."""
    _check_args(q, k, cos_cache, sin_cache, positions)
    if not HAS_TRITON:
        raise RuntimeError("apply_rope_: triton is not installed")
    tokens, num_q_heads, head_dim = q.shape
    if tokens == 0:
        return
    half = head_dim // 2
    _rope_kernel[(tokens,)](
        q, k, cos_cache, sin_cache, positions, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        cos_cache.stride(0), num_q_heads, k.shape[1], HALF=half,
        BLOCK_HQ=triton.next_power_of_2(num_q_heads), BLOCK_HK=triton.next_power_of_2(k.shape[1]),
        BLOCK_D=triton.next_power_of_2(half),
    )
