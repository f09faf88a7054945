"""Write the new tokens' K/V into their paged-pool slots."""

from __future__ import annotations

import torch

from sglang_lite_kernels._triton import HAS_TRITON, tl, triton


def _check_store_args(k, v, k_buffer, v_buffer, slots) -> None:
    if k.dim() != 3 or k.shape != v.shape:
        raise ValueError(f"k, v: expected equal [T, Hkv, D] shapes, got {tuple(k.shape)}, {tuple(v.shape)}")
    if k_buffer.dim() != 3 or k_buffer.shape != v_buffer.shape or k_buffer.shape[1:] != k.shape[1:]:
        raise ValueError(
            f"k_buffer, v_buffer: expected equal [S, {k.shape[1]}, {k.shape[2]}] shapes, "
            f"got {tuple(k_buffer.shape)}, {tuple(v_buffer.shape)}"
        )
    if k_buffer.dtype != v_buffer.dtype:
        raise ValueError(f"k_buffer, v_buffer: dtypes differ ({k_buffer.dtype}, {v_buffer.dtype})")
    if slots.shape != (k.shape[0],) or slots.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"slots: expected int [{k.shape[0]}], got {slots.dtype} {tuple(slots.shape)}")
    for name, t in (("k", k), ("v", v), ("k_buffer", k_buffer), ("v_buffer", v_buffer), ("slots", slots)):
        if t.device != k_buffer.device:
            raise ValueError(f"{name}: on {t.device}, k_buffer on {k_buffer.device}")


def store_kv_ref(k, v, k_buffer, v_buffer, slots) -> None:
    """k, v [T, Hkv, D] -> k_buffer[slots], v_buffer[slots] (cast to the buffers' dtype)."""
    _check_store_args(k, v, k_buffer, v_buffer, slots)
    k_buffer[slots] = k.to(k_buffer.dtype)
    v_buffer[slots] = v.to(v_buffer.dtype)


@triton.jit
def _store_kv_kernel(k_ptr, v_ptr, kb_ptr, vb_ptr, slots_ptr,
                     stride_kt, stride_kh, stride_vt, stride_vh,
                     stride_kbs, stride_kbh, stride_vbs, stride_vbh,
                     HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    slot = tl.load(slots_ptr + t).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    mask = d < HEAD_DIM
    k = tl.load(k_ptr + t * stride_kt + h * stride_kh + d, mask=mask)
    v = tl.load(v_ptr + t * stride_vt + h * stride_vh + d, mask=mask)
    tl.store(kb_ptr + slot * stride_kbs + h * stride_kbh + d, k.to(kb_ptr.dtype.element_ty), mask=mask)
    tl.store(vb_ptr + slot * stride_vbs + h * stride_vbh + d, v.to(vb_ptr.dtype.element_ty), mask=mask)


def store_kv(k, v, k_buffer, v_buffer, slots) -> None:
    """Triton: one program per (token, kv head). Same contract as ``store_kv_ref``."""
    _check_store_args(k, v, k_buffer, v_buffer, slots)
    if not HAS_TRITON:
        raise RuntimeError("store_kv: triton is not installed")
    for name, t in (("k", k), ("v", v), ("k_buffer", k_buffer), ("v_buffer", v_buffer)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name}: last dim must be contiguous, strides {t.stride()}")
    if slots.numel() > 1 and slots.stride(0) != 1:  # the kernel reads slots_ptr + t
        raise ValueError(f"slots: must be contiguous, stride {slots.stride()}")
    num_tokens, num_heads, head_dim = k.shape
    if num_tokens == 0:
        return
    _store_kv_kernel[(num_tokens, num_heads)](
        k, v, k_buffer, v_buffer, slots,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        HEAD_DIM=head_dim, BLOCK_D=triton.next_power_of_2(head_dim),
    )
