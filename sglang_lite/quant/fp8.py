"""fp8 (e4m3) weights with group-wise scales: ``w[n, k] = q[n, k] * scale[n, k // group]``.

The format for H100/H200-class GPUs. On CUDA a decode step's few rows multiply through a
Triton kernel that reads the fp8 bytes and scales them in registers (``fp8_mm``: 1 byte a
weight instead of bf16's 2); larger steps and the CPU dequantize, then GEMM in the
activations' dtype, so the numerics the CPU tests check are the GPU's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from sglang_lite.quant.cuda_kernels import on_cuda_kernel
from sglang_lite_kernels.quant_mm import fp8_mm

FP8_MAX = 448.0  # largest finite float8_e4m3fn


@dataclass(frozen=True, slots=True, eq=False)
class Fp8Weight:
    q: torch.Tensor  # float8_e4m3fn [N, K]
    scale: torch.Tensor  # fp32 [N, K / group]

    @classmethod
    def quantize(cls, w: torch.Tensor, group: int) -> Fp8Weight:
        n, k = w.shape
        if k % group:
            raise ValueError(f"fp8: in_features {k} is not a multiple of the group size {group}")
        wg = w.float().view(n, k // group, group)
        scale = wg.abs().amax(-1).clamp(min=1e-12) / FP8_MAX
        q = (wg / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return cls(q.view(n, k).contiguous(), scale.contiguous())

    @property
    def out_features(self) -> int:
        return self.q.shape[0]

    @property
    def in_features(self) -> int:
        return self.q.shape[1]

    @property
    def group(self) -> int:
        return self.in_features // self.scale.shape[1]

    @property
    def nbytes(self) -> int:
        return self.q.nbytes + self.scale.nbytes

    def mm(self, x: torch.Tensor) -> torch.Tensor:
        if on_cuda_kernel(x):
            return fp8_mm(x.contiguous(), self.q, self.scale)
        return F.linear(x, self.dequantize(x.dtype))

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.rows(slice(None), dtype)

    def rows(self, ids, dtype: torch.dtype) -> torch.Tensor:
        q, s = self.q[ids], self.scale[ids]
        n, k = q.shape
        return (q.view(n, -1, self.group).to(dtype) * s.to(dtype)[..., None]).view(n, k)
