"""Decode and extend attention in C on a CPU (``native_decode.c``), built on first use.

The torch backend's decode path gathers each row's pages, pads the batch to its longest row
and runs SDPA: at one row and a short sequence, a few small ops a layer that cost more than
the arithmetic. The C kernel reads the keys and values in place through the page table, each
row to its own length. It takes fp32 / bf16 pools in the model's dtype, without sliding
windows or soft-capped scores; anything else (and a step torch.compile traces) stays on the
torch path. Extend rows (a prompt, a chunk of one, after a cached prefix) go through
``extend_attention`` where the CPU has the kernel's vector code (AVX-512 or AVX2 with FMA) and
the head size is a whole number of its vectors: torch's SDPA with the causal mask ran 40-60
GFLOP/s on a 2-core AVX512-BF16 EPYC, the C kernel 1.4-2x faster (README, twenty-sixth session). Built like the int4 kernel (``quant/native_int4.py``); ``SGLANG_LITE_NATIVE=0``
turns it off.
"""

from __future__ import annotations

from pathlib import Path

import torch

from sglang_lite.native import build_native, load_once

_SOURCE = Path(__file__).with_name("native_decode.c")
_DTYPES = {torch.float32: 0, torch.bfloat16: 1}
_loaded: list = []


def module():
    return load_once(_loaded, lambda: build_native(_SOURCE, "_native_decode", "native decode attention",
                                                   "decode attention gathers and runs SDPA"))


def usable(q: torch.Tensor, k_buffer: torch.Tensor, pool_dtype: torch.dtype) -> bool:
    return (q.device.type == "cpu" and q.dtype in _DTYPES and k_buffer.dtype == q.dtype == pool_dtype
            and q.shape[-1] <= 256 and not torch.compiler.is_compiling() and module() is not None)


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pages: torch.Tensor,
                     lens: torch.Tensor, page_size: int, scale: float) -> torch.Tensor:
    """``q`` [B, Hq, D] against one layer's ``k`` / ``v`` [slots, Hkv, D]; row b reads its first
    ``lens[b]`` positions through ``pages`` [B, max_pages] (int64 page numbers)."""
    b, hq, d = q.shape
    if q.stride(2) != 1 or q.stride(1) != d:
        q = q.contiguous()
    out = torch.empty((b, hq, d), dtype=q.dtype)
    module().decode_attention(q.data_ptr(), k.data_ptr(), v.data_ptr(), pages.data_ptr(), lens.data_ptr(),
                              out.data_ptr(), b, hq, k.shape[1], d, pages.shape[1], page_size, scale,
                              _DTYPES[q.dtype], q.stride(0))
    return out


def extend_usable(q: torch.Tensor, k_buffer: torch.Tensor, pool_dtype: torch.dtype) -> bool:
    """Whether ``extend_attention`` takes this layer: ``usable``'s conditions, and a head size
    the kernel's vectors divide."""
    if not usable(q, k_buffer, pool_dtype):
        return False
    lanes = module().extend_lanes()
    return lanes > 0 and q.shape[-1] % lanes == 0


def extend_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor,
                     scale: float) -> torch.Tensor:
    """``q`` [n, Hq, D], the new tokens of one sequence of ``len(slots)`` positions (the last n
    of them), each against one layer's ``k`` / ``v`` [slots, Hkv, D] at ``slots`` (int64) up to
    its own position."""
    n, hq, d = q.shape
    if q.stride(2) != 1 or q.stride(1) != d:
        q = q.contiguous()
    slots = slots.to(torch.int64).contiguous()
    out = torch.empty((n, hq, d), dtype=q.dtype)
    module().extend_attention(q.data_ptr(), k.data_ptr(), v.data_ptr(), slots.data_ptr(), out.data_ptr(), n,
                              len(slots), hq, k.shape[1], d, scale, _DTYPES[q.dtype], q.stride(0))
    return out
