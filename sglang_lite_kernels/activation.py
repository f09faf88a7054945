"""SiLU-and-multiply for the gated MLP: ``[T, 2I] (gate | up) -> [T, I]``, one kernel instead
of a chunk, a SiLU and a product, rounding as transformers' LlamaMLP does in x's dtype:
``silu(gate)`` is rounded to the dtype before the product (the math itself in fp32)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sglang_lite_kernels._triton import HAS_TRITON, tl, triton


def _check_args(x: torch.Tensor) -> None:
    if x.dim() != 2 or x.shape[1] % 2 or not x.dtype.is_floating_point:
        raise ValueError(f"x: expected a float [T, 2 * I] tensor, got {x.dtype} {tuple(x.shape)}")
    if x.stride(1) != 1:
        raise ValueError(f"x: last dim must be contiguous, strides {x.stride()}")


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    _check_args(x)
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, stride_x, stride_o, inter, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + inter + cols, mask=mask, other=0.0).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (act * up).to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """Triton; same contract as ``silu_and_mul_ref``."""
    _check_args(x)
    if not HAS_TRITON:
        raise RuntimeError("silu_and_mul: triton is not installed")
    tokens, inter = x.shape[0], x.shape[1] // 2
    out = torch.empty((tokens, inter), dtype=x.dtype, device=x.device)
    if tokens == 0 or inter == 0:
        return out
    block = min(block, triton.next_power_of_2(inter))
    _silu_and_mul_kernel[(tokens, triton.cdiv(inter, block))](x, out, x.stride(0), out.stride(0), inter, BLOCK=block)
    return out
