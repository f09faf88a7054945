"""Symmetric int8 weights: per output channel (``--quantization int8``, torch's
``_weight_int8pack_mm``), and group-wise (GGUF Q8_0) as a pair of int4 weights.

torch has no group-wise int8 kernel, and dequantizing a 28 M-weight LM head every step costs
more than a bf16 GEMM. So ``q * d`` with ``q`` in -128..127 is split exactly into
``hi * 16 d + lo * d`` (``hi = q >> 4`` in -8..7, ``lo = q & 15``): two int4 weights on the same
groups, two int4 kernel calls, 1.25 bytes a weight instead of 2 for bf16.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from sglang_lite.quant import native_int4
from sglang_lite.quant.cuda_kernels import on_cuda_kernel
from sglang_lite.quant.int4 import Int4Weight
from sglang_lite_kernels.quant_mm import int8_mm


@dataclass(frozen=True, slots=True, eq=False)
class Int8Weight:
    """``w[n, k] = q[n, k] * scale[n]``."""

    q: torch.Tensor  # int8 [N, K]
    scale: torch.Tensor  # fp32 [N] (the kernel takes it in the compute dtype)

    KERNEL_MAX_ROWS = 32  # like Int4Weight's: measured in bench.quant_kernels

    @classmethod
    def quantize(cls, w: torch.Tensor) -> Int8Weight:
        w = w.float()
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127
        q = (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8)
        return cls(q.contiguous(), scale)

    @property
    def out_features(self) -> int:
        return self.q.shape[0]

    @property
    def in_features(self) -> int:
        return self.q.shape[1]

    @property
    def nbytes(self) -> int:
        return self.q.nbytes + self.scale.nbytes

    def mm(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] <= self.KERNEL_MAX_ROWS and x.device.type == "cpu":
            return torch._weight_int8pack_mm(x.contiguous(), self.q, self.scale.to(x.dtype))
        if on_cuda_kernel(x):
            return int8_mm(x.contiguous(), self.q, self.scale)
        # The scale is per output channel, so it applies to the product.
        return F.linear(x, self.q.to(x.dtype)) * self.scale.to(x.dtype)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.q.to(dtype) * self.scale.to(dtype)[:, None]

    def rows(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.q[ids].to(dtype) * self.scale[ids].to(dtype)[:, None]


@dataclass(frozen=True, slots=True, eq=False)
class GroupInt8Weight:
    """``w[n, k] = q[n, k] * d[n, k // group]``, kept as ``hi`` and ``lo`` int4 halves."""

    hi: Int4Weight  # q >> 4 with scale 16 d
    lo: Int4Weight  # q & 15 with scale d

    @classmethod
    def from_codes(cls, q: torch.Tensor, d: torch.Tensor, dtype: torch.dtype) -> GroupInt8Weight:
        """``q`` int8 [N, K], ``d`` [N, K / group]."""
        q = q.to(torch.int8)  # hi and lo stay in 0..15, so no wider type is needed
        d = d.float()
        hi = Int4Weight.from_codes((q >> 4) + 8, 16 * d, -128 * d, dtype)  # (hi + 8) * 16d - 128d
        lo = Int4Weight.from_codes(q & 15, d, torch.zeros_like(d), dtype)
        return cls(hi, lo)

    @property
    def out_features(self) -> int:
        return self.hi.out_features

    @property
    def in_features(self) -> int:
        return self.hi.in_features

    @property
    def group(self) -> int:
        return self.hi.group

    @property
    def nbytes(self) -> int:
        return self.hi.nbytes + self.lo.nbytes

    def mm(self, x: torch.Tensor) -> torch.Tensor:
        # The halves' kernels: the C kernel at any number of rows where it takes them (the
        # int8-activation path), torch's up to its rows, CUDA's. Past those, the dense product:
        # the whole weight dequantized, every call (a tied LM head, 49152 x 576: a 758-token
        # forward of 48 requests spent ~0.27 s in it before the C kernel took those rows).
        if (x.device.type == "cpu" and (x.shape[0] <= Int4Weight.KERNEL_MAX_ROWS or self._c_kernel(x))
                or on_cuda_kernel(x)):
            return self.hi.mm(x) + self.lo.mm(x)
        return F.linear(x, self.dequantize(x.dtype))

    def _c_kernel(self, x: torch.Tensor) -> bool:
        return (self.hi.int8_activations and self.lo.int8_activations
                and native_int4.supports(x, self.hi.scales) and native_int4.supports(x, self.lo.scales))

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.hi.dequantize(dtype) + self.lo.dequantize(dtype)

    def rows(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.hi.rows(ids, dtype) + self.lo.rows(ids, dtype)
