"""Group-wise asymmetric int4 weights in torch's CPU int4 layout.

``w[n, k] = q[n, k] * d[n, g] + m[n, g]`` with ``q`` in 0..15 and ``g = k // group`` (GGUF Q4_1's
form; Q4_0 is ``m = -8 d``). Stored as torch's ``_convert_weight_to_int4pack_for_cpu`` bytes
(0.5 byte a weight) and ``scale_zero [K/group, N, 2]`` for ``_weight_int4pack_mm_for_cpu``,
which computes with ``(q - 8) * s + z``, so ``s = d`` and ``z = m + 8 d``.

That layout is blocked: rows go in blocks of 64, and byte ``(b, k, j)`` of ``packed.view(N/64,
K, 32)`` holds row ``64 b + j`` in its low nibble and row ``64 b + 32 + j`` in its high one.
``dequantize`` and ``rows`` read it back with plain torch ops, and our C kernel reads it too.
It is torch's layout where torch runs its AVX512 code; on a CPU without AVX512 torch packs
and reads blocks of 32 rows, so there its kernel gets a copy in its own layout
(``torch_packs_like_us``, ``Int4Weight.for_torch``).

A weight the C kernel multiplies (``for_c_kernel``) keeps its scales in the kernel's block
layout instead, ``block_scales [N/64, K/group, 2, 64]``: each block of 64 rows' ``s`` then
``c = z - 8 s`` (``= m``), group after group, in fp16 where that holds every value to fp16's
precision (GGUF's own d and m are fp16), else fp32. At one row the kernel reads its weights at
memory speed, and torch's fp32 ``scale_zero`` was a third of the bytes, spread N * 8 bytes
apart per group; torch's kernels get ``scale_zero`` back from the blocks where they run.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from sglang_lite.quant import native_int4
from sglang_lite_kernels.quant_mm import CPU_BLOCK, cpu_layout_codes

_BLOCK = CPU_BLOCK  # rows per block of torch's layout (64); out_features are padded up to it


@dataclass(frozen=True, slots=True, eq=False)
class Int4Weight:
    packed: torch.Tensor  # uint8 [N_pad, K / 2], torch's CPU layout
    # [K / group, N_pad, 2]: (s, z), in the compute dtype; None where block_scales holds the scales
    scale_zero: torch.Tensor | None
    group: int
    out_features: int  # N, before padding
    # On a CPU, any number of rows: the C kernel, activations quantized to int8 per group
    # (where it builds); else torch's kernel, activations as they are.
    int8_activations: bool = False
    # The C kernel's layout of the scales (module docstring, for_c_kernel), or None
    block_scales: torch.Tensor | None = None
    # torch's kernel's copy of ``packed`` where its layout is not ours (for_torch), made once
    _torch_packed: list = field(default_factory=list, init=False, repr=False)
    # scale_zero rebuilt from block_scales, by dtype, where torch's kernel runs (scale_zero_as)
    _torch_scales: dict = field(default_factory=dict, init=False, repr=False)

    # Rows up to which torch's kernel beats dequantize + GEMM (bench.quant_kernels: it grows
    # linearly with the rows; dequantizing costs a fixed ~1 ms per 1.8 M weights here).
    KERNEL_MAX_ROWS = 32

    @classmethod
    def from_codes(cls, q: torch.Tensor, d: torch.Tensor, m: torch.Tensor, dtype: torch.dtype) -> Int4Weight:
        """``q`` [N, K] in 0..15, ``d`` and ``m`` [N, K / group]: ``w = q * d + m``."""
        n, k = q.shape
        group = k // d.shape[1]
        if group * d.shape[1] != k or d.shape != m.shape or d.shape[0] != n:
            raise ValueError(f"int4: codes {tuple(q.shape)} do not match scales {tuple(d.shape)}")
        pad = -n % _BLOCK
        q, d, m = q.to(torch.uint8), d.float(), m.float()
        if pad:  # a copy of every code: only where out_features is not a multiple of the block
            q, d, m = (F.pad(t, (0, 0, 0, pad)) for t in (q, d, m))
        scale_zero = torch.stack([d.t(), (m + 8 * d).t()], dim=-1).to(dtype).contiguous()
        return cls(pack_cpu_layout(q), scale_zero, group, n)

    @classmethod
    def quantize(cls, w: torch.Tensor, group: int, dtype: torch.dtype) -> Int4Weight:
        """Round-to-nearest over each group's [min, max] (what GGUF Q4_1 does)."""
        n, k = w.shape
        if k % group:
            raise ValueError(f"int4: in_features {k} is not a multiple of the group size {group}")
        wg = w.float().view(n, k // group, group)
        lo, hi = wg.amin(-1), wg.amax(-1)
        d = (hi - lo) / 15
        q = ((wg - lo[..., None]) / d.clamp(min=1e-12)[..., None]).round().clamp(0, 15)
        return cls.from_codes(q.view(n, k), d, lo, dtype)

    @property
    def in_features(self) -> int:
        return self.packed.shape[1] * 2

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes + self.scales.nbytes

    @property
    def scales(self) -> torch.Tensor:
        """The scales as the weight holds them: ``block_scales`` where set, else ``scale_zero``
        (the C kernel reads either: ``native_int4.scales_code``)."""
        return self.scale_zero if self.block_scales is None else self.block_scales

    def for_c_kernel(self) -> Int4Weight:
        """This weight multiplied through the C kernel (int8 activations), its scales in the
        kernel's block layout, which replaces ``scale_zero`` (one copy of the scales)."""
        if self.block_scales is not None:
            return dataclasses.replace(self, int8_activations=True)
        return dataclasses.replace(self, int8_activations=True, scale_zero=None,
                                   block_scales=block_scales_of(self.scale_zero))

    def scale_zero_as(self, dtype: torch.dtype) -> torch.Tensor:
        """``scale_zero`` in ``dtype`` (torch's kernels): rebuilt from the blocks once per dtype
        where the weight holds those (only where torch's kernel runs on a C-kernel weight)."""
        if self.block_scales is None:
            return self.scale_zero.to(dtype)
        if dtype not in self._torch_scales:
            s, c = self._scale_and_offset(torch.float32)
            self._torch_scales[dtype] = torch.stack([s, c + 8 * s], dim=-1).transpose(0, 1).to(dtype).contiguous()
        return self._torch_scales[dtype]

    def mm(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ w.T`` for ``x`` [M, K] in the compute dtype."""
        if self.int8_activations and native_int4.supports(x, self.scales):
            return native_int4.mm(x, self.packed, self.scales, self.group, self.out_features)
        if x.shape[0] <= self.KERNEL_MAX_ROWS and x.device.type == "cpu":
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(x.contiguous(), self.for_torch(), self.group,
                                                           self.scale_zero_as(x.dtype))
        else:
            y = F.linear(x, self._dequantize_padded(x.dtype))
        return y[:, : self.out_features]

    def for_torch(self) -> torch.Tensor:
        """``packed`` in the layout torch's CPU kernel reads on this CPU: itself where that is
        ours, else a copy in torch's own packing, made on the first call (only where torch's
        kernel runs: int8 activations off, or no C kernel)."""
        if torch_packs_like_us():
            return self.packed
        if not self._torch_packed:
            codes = cpu_layout_codes(self.packed).to(torch.int32)  # [N_pad, K]
            self._torch_packed.append(torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1))
        return self._torch_packed[0]

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight [N, K] (the reference the kernels are tested against)."""
        return self._dequantize_padded(dtype)[: self.out_features]

    def _dequantize_padded(self, dtype: torch.dtype) -> torch.Tensor:
        n, k = self.packed.shape[0], self.in_features
        q = cpu_layout_codes(self.packed)  # [N, K]
        s, c = self._scale_and_offset(dtype)
        w = torch.addcmul(c[..., None], q.view(n, -1, self.group).to(dtype), s[..., None])
        return w.reshape(n, k)

    def rows(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Rows ``ids`` of the weight, dequantized: the embedding lookup of a tied LM head."""
        k = self.in_features
        if ids.numel() == 1 and ids.device.type == "cpu" and not torch.compiler.is_compiling():
            return self._row(int(ids.reshape(())), dtype)  # (tracing would break the graph on the int)
        blocks = self.packed.view(-1, k, _BLOCK // 2)
        col = ids % _BLOCK
        byte = blocks[ids // _BLOCK, :, col % (_BLOCK // 2)]  # [T, K]
        q = torch.where((col >= _BLOCK // 2)[:, None], byte >> 4, byte & 15)
        s, c = self._scale_and_offset(dtype, ids)
        w = torch.addcmul(c[..., None], q.view(len(ids), -1, self.group).to(dtype), s[..., None])
        return w.reshape(len(ids), k)

    def _row(self, r: int, dtype: torch.dtype) -> torch.Tensor:
        """``rows`` of one id (a batch-1 decode step's embedding), from views of the codes and
        scales instead of gathers: the same values, a third of the ops (each ~10 us here)."""
        b, j = divmod(r, _BLOCK)
        byte = self.packed.view(-1, self.in_features, _BLOCK // 2)[b, :, j % (_BLOCK // 2)]
        q = (byte >> 4 if j >= _BLOCK // 2 else byte & 15).view(1, -1, self.group).to(dtype)
        if self.block_scales is None:
            sz = self.scale_zero[:, r].to(dtype)
            s, c = sz[None, :, 0], sz[None, :, 1] - 8 * sz[None, :, 0]
        else:
            sc = self.block_scales[b, :, :, j].to(dtype)
            s, c = sc[None, :, 0], sc[None, :, 1]
        return torch.addcmul(c[..., None], q, s[..., None]).reshape(1, -1)

    def _scale_and_offset(self, dtype: torch.dtype, ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(s, c) [N_pad or len(ids), K / group] in ``dtype``: ``w = q s + c`` (c = z - 8 s,
        computed in ``dtype`` from torch's layout as torch's kernel does)."""
        if self.block_scales is None:
            sz = (self.scale_zero if ids is None else self.scale_zero[:, ids]).to(dtype).transpose(0, 1)
            return sz[..., 0], sz[..., 1] - 8 * sz[..., 0]
        b = self.block_scales if ids is None else self.block_scales[ids // _BLOCK, :, :, ids % _BLOCK]
        if ids is None:  # [N / 64, G, 2, 64] -> [N, G, 2]
            b = b.permute(0, 3, 1, 2).reshape(-1, b.shape[1], 2)
        b = b.to(dtype)
        return b[..., 0], b[..., 1]


def block_scales_of(scale_zero: torch.Tensor) -> torch.Tensor:
    """torch's ``scale_zero [G, N_pad, 2]`` (s, z) as the C kernel's ``[N_pad / 64, G, 2, 64]``
    (s, c = z - 8 s, computed in fp32): ``block_scales_from``."""
    sz = scale_zero.float()
    return block_scales_from(sz[..., 0].t(), (sz[..., 1] - 8 * sz[..., 0]).t())


def block_scales_from(s: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Per-row group scales ``w = q s + c`` (``s``, ``c`` [N_pad, G]) as the C kernel's blocks
    ``[N_pad / 64, G, 2, 64]``: fp16 where every value rounds there within fp16's precision
    (half an ulp of a normal number, 2^-11 of it; zeros exact), else fp32."""
    n_pad, groups = s.shape
    sc = torch.stack([s.float().t(), c.float().t()])  # [2, G, N_pad]
    blocks = sc.reshape(2, groups, n_pad // _BLOCK, _BLOCK).permute(2, 1, 0, 3).contiguous()
    half = blocks.to(torch.float16)
    exact = bool(((half.float() - blocks).abs() <= blocks.abs() * 2.0 ** -11).all())
    return half if exact else blocks


def pack_cpu_layout(q: torch.Tensor) -> torch.Tensor:
    """Codes ``q`` [N, K] in 0..15 (N a multiple of 64) -> uint8 [N, K / 2] in the layout of
    ``torch.ops.aten._convert_weight_to_int4pack_for_cpu`` (module docstring), with byte ops
    only: that op takes int32 codes, 4 bytes a weight, which cost the engine's start-up
    seconds (tests/unit/test_quant_formats.py checks both give the same bytes)."""
    n, k = q.shape
    rows = q.to(torch.uint8).view(n // _BLOCK, 2, _BLOCK // 2, k)  # [blocks, low/high, 32, K]
    packed = rows[:, 0] | (rows[:, 1] << 4)  # [blocks, 32, K]
    return packed.transpose(1, 2).contiguous().view(n, k // 2)


@functools.cache
def torch_packs_like_us() -> bool:
    """Whether torch's CPU int4 kernel reads the layout ``pack_cpu_layout`` makes. Torch picks
    its layout by the CPU it runs on: blocks of 64 rows with AVX512, of 32 without (an AVX2
    EPYC, torch 2.13), where its kernel would multiply our bytes into wrong products. Probed
    once against torch's own packing of a random code matrix."""
    q = torch.randint(0, 16, (2 * _BLOCK, 32), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    return torch.equal(torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1), pack_cpu_layout(q))
