"""Fused residual add + RMSNorm, rounding like Hugging Face's LlamaRMSNorm.

``h = x + residual`` (in x's dtype), ``out = weight * (h * rsqrt(mean(h**2) + eps)).to(dtype)``
with the statistics in fp32. Returns ``(out, h)`` so the caller carries h as the next residual.
"""

from __future__ import annotations

import torch

from sglang_lite_kernels._triton import HAS_TRITON, tl, triton


def _check_rmsnorm_args(x, weight, residual):
    if x.dim() != 2 or weight.shape != (x.shape[1],):
        raise ValueError(f"x [N, H], weight [H]: got {tuple(x.shape)}, {tuple(weight.shape)}")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError(f"residual: expected {x.dtype} {tuple(x.shape)}, got {residual.dtype} {tuple(residual.shape)}")
    for name, t in (("x", x), ("weight", weight), ("residual", residual)):
        if t is not None and (t.stride(-1) != 1 or t.device != x.device):
            raise ValueError(f"{name}: needs a contiguous last dim on {x.device}")


def rmsnorm_ref(x, weight, eps: float, residual=None):
    """x [N, H] (+ residual [N, H]) -> (out [N, H], h [N, H]) in x.dtype."""
    _check_rmsnorm_args(x, weight, residual)
    h = x if residual is None else x + residual
    hf = h.float()
    normed = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return (weight * normed).to(x.dtype), h


@triton.jit
def _rmsnorm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, h_ptr, stride_x, stride_r, stride_o, stride_h,
                    H, eps, HAS_RES: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RES:
        x = (x.to(tl.float32) + tl.load(res_ptr + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32))
        x = x.to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + row * stride_h + cols, x, mask=mask)
    xf = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, 0) / H + eps)
    normed = (xf * rstd).to(out_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (w * normed).to(out_ptr.dtype.element_ty), mask=mask)


def rmsnorm(x, weight, eps: float, residual=None):
    """Triton, one program per row; same contract as ``rmsnorm_ref``."""
    _check_rmsnorm_args(x, weight, residual)
    if not HAS_TRITON:
        raise RuntimeError("rmsnorm: triton is not installed")
    out = torch.empty_like(x)
    h = x if residual is None else torch.empty_like(x)
    if x.shape[0] == 0:
        return out, h
    res = residual if residual is not None else x
    _rmsnorm_kernel[(x.shape[0],)](
        x, res, weight, out, h, x.stride(0), res.stride(0), out.stride(0), h.stride(0),
        x.shape[1], eps, HAS_RES=residual is not None, BLOCK=triton.next_power_of_2(x.shape[1]),
    )
    return out, h
