"""A packed weight with a dense copy beside it, each used at the batch sizes where it is faster.

torch's CPU weight-only kernels read 0.6 (int4) or 1 (int8) byte a weight, so a decode step of a
few rows runs 2-3x faster than a bf16 GEMM; but their cost grows with every row, while the bf16
GEMM's barely does (one 3072x576 layer: int4 26 us against bf16's 69 at 1 row, 321 against 166
at 32). ``ByRowsWeight`` keeps both: steps of up to ``max_rows`` rows through the packed kernel,
bigger ones (batch decode, prefill) through the dense GEMM. The dense copy is the packed
weight dequantized, so both paths multiply by the same values. It costs the memory of the
dense weight on top of the packed one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True, slots=True, eq=False)
class ByRowsWeight:
    packed: object  # Int4Weight, Int8Weight or GroupInt8Weight
    dense: torch.Tensor  # [N, K] the packed weight dequantized, in the compute dtype
    max_rows: int  # rows up to which ``packed`` multiplies

    @classmethod
    def of(cls, packed, dtype: torch.dtype, max_rows: int) -> ByRowsWeight:
        # fp32 first: the values a dense checkpoint of the same file holds, rounded once
        dense = packed.dequantize(torch.float32).to(dtype).contiguous()
        return cls(packed, dense, max_rows)

    @property
    def out_features(self) -> int:
        return self.dense.shape[0]

    @property
    def in_features(self) -> int:
        return self.dense.shape[1]

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes + self.dense.nbytes

    def mm(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] <= self.max_rows:
            return self.packed.mm(x)
        return F.linear(x, self.dense)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.packed.dequantize(dtype)

    def rows(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.dense[ids].to(dtype)
