"""How the KV pool stores keys and values: in a plain dtype, or as 8-bit codes with a scale.

The 8-bit formats (``int8``, ``fp8_e4m3``) keep one scale per token and per kv head (the
head's absolute maximum over ``head_dim`` mapped to the format's largest code), computed on
write, so no calibration is needed and one outlier token never coarsens another's codes. The
scale is stored in bfloat16 (the range of fp32 in two bytes); values are coded against the
stored, rounded scale, so reading back multiplies by exactly the scale that coded them.
A head of 64 values then costs 66 bytes against 128 in bf16: 1.94x the tokens in one budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SCALE_DTYPE = torch.bfloat16
_TINY = 1e-30  # an all-zero head still gets a positive scale (codes 0, dequantized 0)

_PLAIN = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_ALIASES = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16", "fp8": "fp8_e4m3"}
KV_CACHE_DTYPES = ("auto", "bf16", "bfloat16", "fp8", "fp8_e4m3", "int8", "float16", "float32")


@dataclass(frozen=True, slots=True)
class KVFormat:
    """One storage format. ``qmax`` is the largest code of an 8-bit format, None for a plain
    dtype (stored by a cast, no scales)."""

    name: str
    storage: torch.dtype
    qmax: float | None = None

    @property
    def scaled(self) -> bool:
        return self.qmax is not None

    def bytes_per_head(self, head_dim: int) -> int:
        """Bytes one token's k (or v) of one kv head takes, its scale included."""
        scale = SCALE_DTYPE.itemsize if self.scaled else 0
        return head_dim * self.storage.itemsize + scale

    def quantize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [T, H, D] -> (codes [T, H, D] in ``storage``, scales [T, H] or None)."""
        if not self.scaled:
            return x.to(self.storage), None
        xf = x.float()
        scale = (xf.abs().amax(-1) / self.qmax).clamp_min(_TINY).to(SCALE_DTYPE)  # [T, H]
        y = (xf / scale.float()[..., None]).clamp(-self.qmax, self.qmax)
        if self.storage == torch.int8:
            y = y.round()
        return y.to(self.storage), scale

    def dequantize(self, codes: torch.Tensor, scale: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
        """Codes [..., H, D] (and scales [..., H]) -> values in ``dtype``."""
        if scale is None:
            return codes.to(dtype)
        if self.storage == torch.int8:  # int8 * float promotes in the multiply: one pass, same values
            return codes * scale.to(dtype)[..., None]
        return self.code_values(codes, dtype) * scale.to(dtype)[..., None]

    def code_values(self, codes: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The value of each code, unscaled, exactly, in ``dtype`` (bf16, fp16 and fp32 hold
        every int8 and fp8 e4m3 value)."""
        if self.storage == torch.float8_e4m3fn and codes.device.type == "cpu":
            return _fp8_e4m3_values_cpu(codes).to(dtype)
        return codes.to(dtype)


def _fp8_e4m3_values_cpu(codes: torch.Tensor) -> torch.Tensor:
    """fp8 e4m3 codes -> bfloat16 by moving bits (torch converts fp8 one element at a time on
    CPU, ~20x slower than this): sign to bit 15, exponent and mantissa shifted under bf16's
    wider exponent, which reads as the value times 2^-120 (subnormals included); the power
    of two then comes back exactly. NaN codes are never written (``quantize`` clamps)."""
    b = codes.view(torch.uint8).to(torch.int16)
    bits = ((b & 0x80) << 8) | ((b & 0x7F) << 4)
    return bits.view(torch.bfloat16) * 2.0**120


def resolve_kv_cache_dtype(name: str, model_dtype: str) -> str:
    """The canonical format name for a ``kv_cache_dtype`` option: "auto" is the model's dtype,
    aliases (bf16, fp8) become their full names."""
    if name not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype: unknown KV cache dtype {name!r} (known: {', '.join(KV_CACHE_DTYPES)})")
    chosen = model_dtype if name == "auto" else name
    return _ALIASES.get(chosen, chosen)


def kv_format(name: str) -> KVFormat:
    """The format of a resolved ``kv_cache_dtype`` (see ``resolve_kv_cache_dtype``)."""
    if name in _PLAIN:
        return KVFormat(name, _PLAIN[name])
    if name == "int8":
        return KVFormat(name, torch.int8, 127.0)
    if name == "fp8_e4m3":
        return KVFormat(name, torch.float8_e4m3fn, torch.finfo(torch.float8_e4m3fn).max)
    raise ValueError(f"kv_cache_dtype: unknown KV cache dtype {name!r}")
