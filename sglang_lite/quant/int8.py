"""Symmetric int8 weights: per output channel (``--quantization int8``, torch's
``_weight_int8pack_mm``), and group-wise (GGUF Q8_0) as a pair of int4 weights.

torch has no group-wise int8 kernel, and dequantizing a 28 M-weight LM head every step costs
more than a bf16 GEMM. So ``q * d`` with ``q`` in -128..127 is split exactly into
``hi * 16 d + lo * d`` (``hi = q >> 4`` in -8..7, ``lo = q & 15``): two int4 weights on the same
groups, two int4 kernel calls, 1.25 bytes a weight instead of 2 for bf16.

Where our C kernel multiplies byte codes (``native_int4.codes8``: VNNI, or plain C), the pair
becomes one ``Int8BlockWeight`` (``GroupInt8Weight.for_c_kernel``): the codes ``q + 128`` in the
kernel's own order and block scales, one pass of 8-bit products where the halves took two
passes and an unpacking each, and ~1.1 bytes a weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from sglang_lite.quant import native_int4
from sglang_lite.quant.cuda_kernels import on_cuda_kernel
from sglang_lite.quant.int4 import Int4Weight, block_scales_from
from sglang_lite_kernels.quant_mm import cpu_layout_codes, int8_mm


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

    def for_c_kernel(self) -> Int8BlockWeight | GroupInt8Weight:
        """This weight multiplied through the C kernel: as one Int8BlockWeight where the kernel
        takes byte codes, else its halves (each ``Int4Weight.for_c_kernel``). The codes and
        scales are read back from the halves (q = 16 (hi - 8) + lo, d the low half's scale), so
        the values are the halves' own."""
        if not native_int4.codes8():
            return GroupInt8Weight(self.hi.for_c_kernel(), self.lo.for_c_kernel())
        n = self.out_features
        hi, lo = cpu_layout_codes(self.hi.packed), cpu_layout_codes(self.lo.packed)  # [N_pad, K] in 0..15
        d, _ = self.lo._scale_and_offset(torch.float32)  # [N_pad, G]
        return Int8BlockWeight.from_codes((16 * (hi.to(torch.int16) - 8) + lo)[:n].to(torch.int8), d[:n],
                                          self.group)


_BLOCK = 64  # rows of a block of the kernel's byte codes


@dataclass(frozen=True, slots=True, eq=False)
class Int8BlockWeight:
    """``w[n, k] = q[n, k] * d[n, k // group]`` (GGUF Q8_0) in the C kernel's byte layout
    (native_int4.c's header): ``codes`` [N_pad / 64, K / 4, 8, 32] uint8 hold ``u = q + 128``,
    row ``32 h + 16 a + 4 j + b`` of a block at vector ``4 h + j``, 32-bit lane ``4 a + b``
    of each step of 4 columns (a row's 4 codes adjacent); ``block_scales`` [N_pad / 64,
    K / group, 2, 64] hold ``s = d`` and ``c = -128 d``. Multiplied on a CPU by the C kernel
    with int8 activations; elsewhere (or where the kernel does not take the input) dequantized."""

    codes: torch.Tensor
    block_scales: torch.Tensor
    group: int
    out_features: int

    int8_activations = True  # (as Int4Weight's flag: the C kernel quantizes the activations)

    @classmethod
    def from_codes(cls, q: torch.Tensor, d: torch.Tensor, group: int) -> Int8BlockWeight:
        """``q`` int8 [N, K], ``d`` [N, K / group]."""
        n, k = q.shape
        if k % group or group % 4 or d.shape != (n, k // group):
            raise ValueError(f"int8 blocks: codes {tuple(q.shape)} do not match scales {tuple(d.shape)}")
        n_pad = -(-n // _BLOCK) * _BLOCK
        u = torch.full((n_pad, k), 128, dtype=torch.uint8)
        u[:n] = (q.to(torch.int16) + 128).to(torch.uint8)
        # rows [2 h, 2 a, 4 j, 4 b], columns [K / 4, 4] -> [K / 4, h, j, a, b, 4]
        codes = u.view(n_pad // _BLOCK, 2, 2, 4, 4, k // 4, 4).permute(0, 5, 1, 3, 2, 4, 6)
        dp = torch.zeros(n_pad, k // group)
        dp[:n] = d.float()
        return cls(codes.contiguous().view(n_pad // _BLOCK, k // 4, 8, 32), block_scales_from(dp, -128 * dp),
                   group, n)

    @property
    def in_features(self) -> int:
        return self.codes.shape[1] * 4

    @property
    def nbytes(self) -> int:
        return self.codes.nbytes + self.block_scales.nbytes

    def mm(self, x: torch.Tensor) -> torch.Tensor:
        if native_int4.supports(x, self.block_scales) and native_int4.codes8():
            return native_int4.mm(x, self.codes, self.block_scales, self.group, self.out_features, bits=8)
        return F.linear(x, self.dequantize(x.dtype))

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight [N, K]."""
        blocks, k = self.codes.shape[0], self.in_features
        u = self.codes.view(blocks, k // 4, 2, 4, 2, 4, 4).permute(0, 2, 4, 3, 5, 1, 6).reshape(-1, k)
        s = self.block_scales[:, :, 0].permute(0, 2, 1).reshape(-1, k // self.group)  # [N_pad, G]
        w = (u.view(-1, k // self.group, self.group).to(torch.float32) - 128) * s.float()[..., None]
        return w.reshape(-1, k)[: self.out_features].to(dtype)

    def rows(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Rows ``ids`` of the weight, dequantized: the embedding lookup of a tied LM head."""
        k = self.in_features
        count = len(ids)
        if count == 1 and ids.device.type == "cpu" and not torch.compiler.is_compiling():
            b, r = divmod(int(ids.reshape(())), _BLOCK)  # a batch-1 step's id: views, not gathers
        else:
            b, r = ids // _BLOCK, ids % _BLOCK
        vector = 4 * (r // 32) + (r % 16) // 4
        lane = 4 * ((r % 32) // 16) + r % 4
        u = self.codes.view(-1, k // 4, 8, 8, 4)[b, :, vector, lane]  # [T, K / 4, 4] ([K / 4, 4]: one id)
        s = self.block_scales[b, :, 0, r]  # [T, G] ([G])
        w = (u.reshape(count, -1, self.group).to(torch.float32) - 128) * s.float()[..., None]
        return w.reshape(count, k).to(dtype)
