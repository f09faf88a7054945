"""fp8 (e4m3) weights with group-wise scales: ``w[n, k] = q[n, k] * scale[n, k // group]``.

The format for H100/H200-class GPUs, whose tensor cores multiply fp8. Here it runs as
dequantize-then-GEMM on any device, so its numerics are what the CPU tests check.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

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
        return F.linear(x, self.dequantize(x.dtype))

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.rows(slice(None), dtype)

    def rows(self, ids, dtype: torch.dtype) -> torch.Tensor:
        q, s = self.q[ids], self.scale[ids]
        n, k = q.shape
        return (q.view(n, -1, self.group).to(dtype) * s.to(dtype)[..., None]).view(n, k)
