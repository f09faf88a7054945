"""The modules that replace ``nn.Linear`` and ``nn.Embedding`` when weights stay quantized.

Each holds one packed weight (``Int4Weight``, ``Int8Weight``, ``GroupInt8Weight``,
``Fp8Weight``); the weight chooses its kernel by the number of rows (see its ``mm``). A tied
LM head and embedding share one packed weight.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn


class QuantLinear(nn.Module):
    # Counts every setting of any QuantLinear's weight_q: the C decode plan (model/native_step.py),
    # which holds the weights' pointers, compares it each step instead of every weight.
    weights_version = 0

    def __setattr__(self, name: str, value) -> None:
        if name == "weight_q":
            QuantLinear.weights_version += 1
        super().__setattr__(name, value)

    def __init__(self, weight, bias: torch.Tensor | None = None):
        super().__init__()
        self.weight_q = weight
        self.in_features, self.out_features = weight.in_features, weight.out_features
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.weight_q.mm(x.reshape(-1, self.in_features))  # [M, out]
        if self.bias is not None:
            y = y + self.bias
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, {type(self.weight_q).__name__}"


class QuantEmbedding(nn.Module):
    def __init__(self, weight, dtype: torch.dtype):
        super().__init__()
        self.weight_q, self.dtype = weight, dtype

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight_q.rows(ids.reshape(-1), self.dtype).view(*ids.shape, -1)


def packed_to(weight, device: torch.device):
    """``weight`` with every tensor (nested packed weights too) on ``device``; an int4 weight
    bound for CUDA takes the layout by rows that the GPU kernel reads (``Int4RowsWeight``)."""
    from sglang_lite.quant.int4 import Int4Weight
    from sglang_lite.quant.int4_rows import Int4RowsWeight

    if isinstance(weight, Int4Weight) and torch.device(device).type == "cuda":
        weight = Int4RowsWeight.of(weight)
    moved = {}
    for f in dataclasses.fields(weight):
        v = getattr(weight, f.name)
        if isinstance(v, torch.Tensor):
            moved[f.name] = v.to(device)
        elif dataclasses.is_dataclass(v):
            moved[f.name] = packed_to(v, device)
    return dataclasses.replace(weight, **moved)
