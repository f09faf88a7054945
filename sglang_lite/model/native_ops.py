"""The decoder's elementwise ops in C on a CPU (``native_ops.c``), built on first use.

Eager torch runs a residual add + RMSNorm as seven ops, RoPE on q and k as about ten and
SiLU-and-mul as three, each with its dispatch and its temporary: at a decode step of one
row, more time than the arithmetic. Here each is one call with the references' math and
rounding points (``sglang_lite_kernels``: ``rmsnorm_ref``, ``rotate_ref``, ``silu_and_mul_ref``),
for fp32 / bf16 tensors on a CPU outside torch.compile (which fuses the references itself).
Built like the int4 kernel (``quant/native_int4.py``); ``SGLANG_LITE_NATIVE=0`` turns it off.
"""

from __future__ import annotations

from pathlib import Path

import torch

from sglang_lite.native import build_native, load_once

_SOURCE = Path(__file__).with_name("native_ops.c")
_DTYPES = {torch.float32: 0, torch.bfloat16: 1}
_loaded: list = []


def module():
    # No fused multiply-adds: products are rounded to fp32 before their sums, as torch's are.
    return load_once(_loaded, lambda: build_native(_SOURCE, "_native_ops", "C norm / RoPE / SiLU ops",
                                                   "the decoder's elementwise ops run as torch ops",
                                                   cflags=("-ffp-contract=off",)))


def usable(x: torch.Tensor) -> bool:
    """Whether ``x``'s op can run here: a CPU tensor in fp32 / bf16, eagerly, the library built."""
    return (x.device.type == "cpu" and x.dtype in _DTYPES and not torch.compiler.is_compiling()
            and module() is not None)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None):
    """``rmsnorm_ref``'s (out, h) from one call; None where the layout is not the plain one
    (contiguous [N, H] rows, weight [H] and residual in x's dtype): the caller runs the reference."""
    if (x.dim() != 2 or not x.is_contiguous() or weight.dtype != x.dtype or weight.shape != x.shape[1:]
            or not weight.is_contiguous()
            or (residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype
                                         or not residual.is_contiguous()))):
        return None
    n, hsize = x.shape
    out = torch.empty_like(x)
    h = x if residual is None else torch.empty_like(x)
    module().rmsnorm(x.data_ptr(), 0 if residual is None else residual.data_ptr(), weight.data_ptr(),
                     out.data_ptr(), 0 if residual is None else h.data_ptr(), hsize, hsize, n, hsize, eps,
                     _DTYPES[x.dtype])
    return out, h


def silu_and_mul(x: torch.Tensor) -> torch.Tensor | None:
    """``silu_and_mul_ref(x)`` ([N, 2I] -> [N, I]) from one call; None for other layouts."""
    if x.dim() != 2 or x.shape[1] % 2 or x.stride(1) != 1:
        return None
    n, inter = x.shape[0], x.shape[1] // 2
    out = torch.empty((n, inter), dtype=x.dtype)
    module().silu_and_mul(x.data_ptr(), out.data_ptr(), x.stride(0), n, inter, _DTYPES[x.dtype])
    return out


def rope_(q: torch.Tensor, k: torch.Tensor, cos_cache: torch.Tensor, sin_cache: torch.Tensor,
          positions: torch.Tensor, rotary_dim: int) -> bool:
    """Rotate the first ``rotary_dim`` dims of q [T, Hq, D] and k [T, Hk, D] in place (as
    ``rotate_ref``) at ``positions`` [T]; False, untouched, where the layout is not the plain
    one (heads contiguous in each row, q and k in one dtype, int64 positions, fp32 tables)."""
    t, d = q.shape[0], q.shape[2]
    if (q.dtype not in _DTYPES or k.dtype != q.dtype or q.stride(2) != 1 or k.stride(2) != 1
            or q.stride(1) != d or k.stride(1) != d or k.shape[0] != t or k.shape[2] != d or rotary_dim % 2 or rotary_dim > min(d, 512)
            or positions.dtype != torch.int64 or not positions.is_contiguous() or positions.numel() != t
            or cos_cache.dtype != torch.float32 or not cos_cache.is_contiguous() or not sin_cache.is_contiguous()
            or cos_cache.shape[-1] != rotary_dim // 2):
        return False
    bad = module().rope(q.data_ptr(), k.data_ptr(), cos_cache.data_ptr(), sin_cache.data_ptr(), positions.data_ptr(),
                        q.stride(0), k.stride(0), cos_cache.shape[0], t, q.shape[1], k.shape[1], d, rotary_dim,
                        _DTYPES[q.dtype])
    if bad >= 0:
        raise outside_tables(positions, bad, cos_cache)
    return True


def outside_tables(positions: torch.Tensor, bad: int, cos_cache: torch.Tensor) -> IndexError:
    """The error for row ``bad``, whose position the C RoPE found outside its tables."""
    return IndexError(f"RoPE: position {int(positions[bad])} is outside the tables ({cos_cache.shape[0]} rows)")
