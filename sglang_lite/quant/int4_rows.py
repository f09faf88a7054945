"""Group-wise int4 weights laid out by rows, the form an int4 weight takes on a CUDA device.

torch's CPU layout (``Int4Weight``) interleaves 64 rows per block, which a GPU kernel reads
with only 32 output columns per tile; by rows (``q`` uint8 [N, K / 2], k = 2i in byte i's low
nibble, ``scale`` and ``zero`` [N, K / group], ``w = q scale + zero``) each tile is a run of
whole rows, as for int8 and fp8. ``packed_to`` converts an ``Int4Weight`` to this form when it
moves to CUDA; the values are the same codes and scales (the zero point ``z - 8 s`` is rounded
once into the scales' dtype).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from sglang_lite.quant.cuda_kernels import on_cuda_kernel
from sglang_lite.quant.int4 import Int4Weight
from sglang_lite_kernels.quant_mm import int4_rows_dequantize_ref, int4_rows_layout, int4_rows_mm


@dataclass(frozen=True, slots=True, eq=False)
class Int4RowsWeight:
    q: torch.Tensor  # uint8 [N_pad, K / 2]
    scale: torch.Tensor  # [N_pad, K / group], the compute dtype
    zero: torch.Tensor  # [N_pad, K / group]
    group: int
    out_features: int  # N, before padding

    @classmethod
    def of(cls, w: Int4Weight) -> Int4RowsWeight:
        q, scale, zero = int4_rows_layout(w.packed, w.scale_zero, w.group)
        return cls(q, scale, zero, w.group, w.out_features)

    @property
    def in_features(self) -> int:
        return self.q.shape[1] * 2

    @property
    def nbytes(self) -> int:
        return self.q.nbytes + self.scale.nbytes + self.zero.nbytes

    def mm(self, x: torch.Tensor) -> torch.Tensor:
        if on_cuda_kernel(x):
            y = int4_rows_mm(x.contiguous(), self.q, self.scale, self.zero)
        else:
            y = F.linear(x, self._dequantize_padded(x.dtype))
        return y[:, : self.out_features]

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self._dequantize_padded(dtype)[: self.out_features]

    def _dequantize_padded(self, dtype: torch.dtype) -> torch.Tensor:
        return int4_rows_dequantize_ref(self.q, self.scale, self.zero).to(dtype)

    def rows(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return int4_rows_dequantize_ref(self.q[ids], self.scale[ids], self.zero[ids]).to(dtype)
