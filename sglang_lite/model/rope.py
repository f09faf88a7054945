"""Rotary position embeddings, with Llama-3 frequency scaling."""

from __future__ import annotations

import math
from typing import Any

import torch

from kernels._triton import runs_fused
from kernels.rope import apply_rope_, rotate_ref


def rope_inv_freq(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> torch.Tensor:
    """Inverse frequencies [head_dim // 2] in fp32."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if scaling is None:
        return inv_freq.float()
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "llama3":
        return _llama3_scale(inv_freq, scaling).float()
    if kind == "linear":
        return (inv_freq / float(scaling["factor"])).float()
    raise ValueError(f"rope_scaling: unsupported rope_type {kind!r} (supported: llama3, linear)")


def _llama3_scale(inv_freq: torch.Tensor, s: dict[str, Any]) -> torch.Tensor:
    # Long wavelengths are slowed by `factor`, short ones kept, the band between blended.
    factor, low, high = float(s["factor"]), float(s["low_freq_factor"]), float(s["high_freq_factor"])
    old_len = float(s["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    low_wavelen, high_wavelen = old_len / low, old_len / high
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    mid = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(mid, blended, out)


class RotaryEmbedding(torch.nn.Module):
    """Applies RoPE (rotate-half layout, as in HF Llama) to q and k at given positions."""

    def __init__(self, head_dim: int, max_positions: int, theta: float, scaling: dict | None):
        super().__init__()
        self._spec = (head_dim, max_positions, theta, scaling)
        self.fused: bool | None = None  # the Triton kernel: None = on CUDA
        self.register_buffer("cos_cache", torch.empty(0), persistent=False)
        self.register_buffer("sin_cache", torch.empty(0), persistent=False)
        self.build_tables(self.cos_cache.device)

    def build_tables(self, device: torch.device | str) -> None:
        """(Re)compute the fp32 cos/sin tables on ``device``, whatever the weights' dtype."""
        head_dim, max_positions, theta, scaling = self._spec
        inv_freq = rope_inv_freq(head_dim, theta, scaling).to(device)
        t = torch.arange(max_positions, dtype=torch.float32, device=device)
        freqs = torch.outer(t, inv_freq)  # [max_positions, head_dim // 2]
        self.cos_cache, self.sin_cache = freqs.cos(), freqs.sin()

    def prepare(self, positions: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """Once per forward, for every layer: the positions, and unless the fused kernel
        runs (it reads the tables itself) the cos/sin rows [T, 1, D/2] for them."""
        if runs_fused(self.fused, positions):
            return positions, None
        return positions, (self.cos_cache[positions].unsqueeze(1), self.sin_cache[positions].unsqueeze(1))

    def forward(self, rope_batch, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # q: [T, Hq, D], k: [T, Hkv, D]; the fused kernel rotates them in place
        positions, cos_sin = rope_batch
        if cos_sin is None:
            apply_rope_(q, k, self.cos_cache, self.sin_cache, positions)
            return q, k
        cos, sin = cos_sin
        return rotate_ref(q, cos, sin), rotate_ref(k, cos, sin)
