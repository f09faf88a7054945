"""Rotary position embeddings: plain, and the scalings checkpoints use (linear, llama3, yarn,
dynamic NTK, longrope), full or partial (the first ``rotary_dim`` dims of a head)."""

from __future__ import annotations

import math
from typing import Any

import torch

from sglang_lite.model import native_ops
from sglang_lite_kernels._triton import runs_fused
from sglang_lite_kernels.rope import apply_rope_, rotate_ref


def rope_inv_freq(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> torch.Tensor:
    """Inverse frequencies [head_dim // 2] in fp32 of a RoPE whose frequencies do not depend
    on the position (default, linear, llama3, yarn; longrope's short factors)."""
    inv_freq = _plain_inv_freq(head_dim, theta)
    if scaling is None:
        return inv_freq.float()
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "llama3":
        return _llama3_scale(inv_freq, scaling).float()
    if kind == "linear":
        return (inv_freq / float(scaling["factor"])).float()
    if kind == "yarn":
        return _yarn_inv_freq(inv_freq, head_dim, theta, scaling).float()
    if kind in ("dynamic", "longrope"):
        return _position_inv_freq(head_dim, theta, scaling, torch.zeros(1))[0].float()
    raise ValueError(f"rope_scaling: unsupported rope_type {kind!r}")


def rope_tables(rotary_dim: int, max_positions: int, theta: float, scaling: dict[str, Any] | None,
                device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [max_positions, rotary_dim // 2] (fp32), the attention factor folded in.

    Dynamic NTK and longrope pick their frequencies from the sequence length in transformers
    (one set for every position of a forward). A KV cache keeps keys as they were rotated, so
    here position p is rotated as transformers rotates a token decoded at p (length p + 1):
    exact for prompts within the trained length and for tokens decoded one at a time past
    it; a single prompt longer than the trained length differs from transformers' one-shot
    forward (which re-rotates the whole prompt with the long frequencies)."""
    t = torch.arange(max_positions, dtype=torch.float32, device=device)
    kind = (scaling or {}).get("rope_type")
    if kind in ("dynamic", "longrope"):
        inv = _position_inv_freq(rotary_dim, theta, scaling, t.double()).float().to(device)  # [P, D/2]
        freqs = t[:, None] * inv
    else:
        freqs = torch.outer(t, rope_inv_freq(rotary_dim, theta, scaling).to(device))
    factor = attention_factor(scaling)
    return freqs.cos() * factor, freqs.sin() * factor


def attention_factor(scaling: dict[str, Any] | None) -> float:
    """The factor yarn and longrope multiply cos and sin by (1 for the others)."""
    kind = (scaling or {}).get("rope_type")
    if kind not in ("yarn", "longrope"):
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    if kind == "longrope":
        factor, old = float(scaling["factor"]), scaling["original_max_position_embeddings"]
        return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(old))
    factor, mscale, mscale_all = float(scaling["factor"]), scaling.get("mscale"), scaling.get("mscale_all_dim")
    if mscale and mscale_all:
        return _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all)
    return _yarn_mscale(factor)


def _plain_inv_freq(dim: int, theta: float) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))


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


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_inv_freq(inv_freq: torch.Tensor, dim: int, theta: float, s: dict[str, Any]) -> torch.Tensor:
    # Dimensions that turn fewer than beta_slow times over the trained length are
    # interpolated (slowed by factor), those turning more than beta_fast times kept, a linear
    # ramp between.
    factor, old = float(s["factor"]), float(s["original_max_position_embeddings"])
    beta_fast, beta_slow = s.get("beta_fast") or 32, s.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return dim * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1: extrapolate (keep the frequency), 0: interpolate
    return inv_freq / factor * (1 - keep) + inv_freq * keep


def _position_inv_freq(dim: int, theta: float, s: dict[str, Any], positions: torch.Tensor) -> torch.Tensor:
    """[P, dim // 2] float64: the frequencies of a token at each position (dynamic NTK,
    longrope), for a sequence of length position + 1."""
    old = int(s["original_max_position_embeddings"])
    seq_len = positions[:, None] + 1
    exponents = torch.arange(0, dim, 2, dtype=torch.float64) / dim
    if s["rope_type"] == "longrope":
        short = torch.tensor(s["short_factor"], dtype=torch.float64)
        long = torch.tensor(s["long_factor"], dtype=torch.float64)
        for name, f in (("short_factor", short), ("long_factor", long)):
            if f.numel() != dim // 2:
                raise ValueError(f"rope_scaling.{name}: {f.numel()} entries, rotary dim {dim} needs {dim // 2}")
        ext = torch.where(seq_len > old, long, short)
        return 1.0 / (ext * theta**exponents)
    factor = float(s["factor"])
    grown = torch.clamp(seq_len, min=old).double()
    base = theta * ((factor * grown / old) - (factor - 1)) ** (dim / (dim - 2))  # [P, 1]
    return 1.0 / (base**exponents)


class RotaryEmbedding(torch.nn.Module):
    """Applies RoPE (rotate-half layout, as in HF Llama) to q and k at given positions; with a
    partial ``rotary_dim`` (Phi-4-mini) only the first ``rotary_dim`` dims of each head turn."""

    def __init__(self, rotary_dim: int, max_positions: int, theta: float, scaling: dict | None):
        super().__init__()
        self._spec = (rotary_dim, max_positions, theta, scaling)
        self.rotary_dim = rotary_dim
        self.fused: bool | None = None  # the Triton kernel: None = on CUDA
        self.register_buffer("cos_cache", torch.empty(0), persistent=False)
        self.register_buffer("sin_cache", torch.empty(0), persistent=False)
        if self.cos_cache.device.type != "meta":  # a model built on meta builds them once it has a device
            self.build_tables(self.cos_cache.device)  # (on meta, cos/sin import seconds of torch modules)

    def build_tables(self, device: torch.device | str) -> None:
        """(Re)compute the fp32 cos/sin tables on ``device``, whatever the weights' dtype."""
        rotary_dim, max_positions, theta, scaling = self._spec
        self.cos_cache, self.sin_cache = rope_tables(rotary_dim, max_positions, theta, scaling, device)

    def prepare(self, positions: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """Once per forward, for every layer: the positions, and unless a fused kernel runs
        (Triton's, or the C one on a CPU: they read the tables themselves) the cos/sin rows
        [T, 1, D/2] for them."""
        if runs_fused(self.fused, positions) or self._native(positions):
            return positions, None
        return positions, (self.cos_cache[positions].unsqueeze(1), self.sin_cache[positions].unsqueeze(1))

    def _native(self, positions: torch.Tensor) -> bool:
        return self.fused is None and positions.device.type == "cpu" and native_ops.usable(self.cos_cache)

    def forward(self, rope_batch, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # q: [T, Hq, D], k: [T, Hkv, D]; the fused kernel rotates them in place
        positions, cos_sin = rope_batch
        r = self.rotary_dim
        partial = r != q.shape[-1]
        if cos_sin is None:
            if not self._native(positions):
                apply_rope_(q[..., :r] if partial else q, k[..., :r] if partial else k,
                            self.cos_cache, self.sin_cache, positions)
                return q, k
            if native_ops.rope_(q, k, self.cos_cache, self.sin_cache, positions, r):
                return q, k
            cos_sin = self.cos_cache[positions].unsqueeze(1), self.sin_cache[positions].unsqueeze(1)
        cos, sin = cos_sin
        if not partial:  # q and k in one pass: half the small ops of a decode step's RoPE, same values
            qk = rotate_ref(torch.cat((q, k), dim=1), cos, sin)  # [T, Hq + Hkv, D]
            return qk.split((q.shape[1], k.shape[1]), dim=1)
        return (torch.cat((rotate_ref(q[..., :r], cos, sin), q[..., r:]), -1),
                torch.cat((rotate_ref(k[..., :r], cos, sin), k[..., r:]), -1))
