"""Int4 weights times rows of activations in C (``native_int4.c``), built on first use.

Torch's ``_weight_int4pack_mm_for_cpu`` reads the same packed bytes with bf16 / fp32
activations; this kernel quantizes each activation row to int8 per weight group (llama.cpp's
Q4 x Q8 scheme) and sums four products per instruction (VNNI, else AVX2), so a decode step
at one row reads its weights about as fast as memory gives them. The C file is compiled with
``-march=native`` (the cache key includes the CPU's flags, so a copied cache folder does not
run another CPU's build) and ``-fopenmp``: the rows are split between the threads of the
process's OpenMP runtime, which is torch's own libgomp once torch is loaded (one pool, no
threads competing). Without a compiler, where the build fails, or with
``SGLANG_LITE_NATIVE=0``, ``module()`` is None and torch's kernel runs (one log line says why).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from sglang_lite.native import build_native, load_once

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("native_int4.c")
_NAME = "_native_int4"
MAX_ROWS = 32  # rows the C kernel takes in one pass over a weight block (MAX_ROWS there); more
# rows take more passes, each row's result the same whatever rows share its call
_DTYPES = {torch.float32: 0, torch.bfloat16: 1}
_BLOCK_SCALES = {torch.float16: 2, torch.float32: 3}  # native_int4.c's F16_BLOCKS, F32_BLOCKS
_BLOCK = 64  # rows of a weight block (native_int4.c's BLOCK)
_loaded: list = []
_codes8: list = []  # [whether the built kernel takes byte codes], set by _load


def module():
    """The built extension, or None where it cannot be built (torch's kernel runs)."""
    return load_once(_loaded, _load)


def _load():
    mod = build_native(_SOURCE, _NAME, "native int4 kernel", "torch's kernel runs")
    if mod is not None:
        simd, threads, codes8 = mod.features()
        _codes8.append(bool(codes8))
        log.info("quantization: native int4 kernel (%s, %d OpenMP threads, Q8_0 as %s)", simd, threads,
                 "byte codes" if codes8 else "int4 halves")
    return mod


def scales_code(scales: torch.Tensor) -> int | None:
    """The kernel's code for the layout and dtype of ``scales`` (native_int4.c): torch's
    ``scale_zero [K / group, N_pad, 2]`` in fp32 / bf16 (0 / 1), or the block layout
    ``[N_pad / 64, K / group, 2, 64]`` in fp16 / fp32 (2 / 3); None for anything else."""
    if scales.dim() == 4:
        return _BLOCK_SCALES.get(scales.dtype)
    return _DTYPES.get(scales.dtype) if scales.dim() == 3 else None


def supports(x: torch.Tensor, scales: torch.Tensor) -> bool:
    """Whether ``mm`` takes ``x`` with ``scales`` (``scales_code``): on the CPU, one row or
    more, fp32 / bf16, and the module built (under torch.compile, only if it was built
    before: tracing never builds it)."""
    if not (x.device.type == "cpu" and x.dim() == 2 and 1 <= x.shape[0]
            and x.dtype in _DTYPES and scales_code(scales) is not None):
        return False
    if torch.compiler.is_compiling():
        return bool(_loaded) and _loaded[0] is not None
    return module() is not None


def codes8() -> bool:
    """Whether the built kernel multiplies byte codes (``codes8_mm``: VNNI or plain C); read
    from its features once, at load (torch.compile traces this: no call into the module)."""
    if not torch.compiler.is_compiling():
        module()
    return bool(_codes8) and _codes8[0]


def mm(x: torch.Tensor, packed: torch.Tensor, scale_zero: torch.Tensor, group: int,
       out_features: int, bits: int = 4) -> torch.Tensor:
    """``x`` [M, K] (``supports``) times the int4 weight in torch's CPU layout (``packed``
    [N_pad, K / 2], ``scale_zero`` in either layout ``scales_code`` names): [M, out_features]
    in x's dtype. ``bits`` 8: ``packed`` holds byte codes in the kernel's order and the scales
    are blocks (native_int4.c's header; ``quant.int8.Int8BlockWeight``).
    Eagerly a direct call; under torch.compile the custom op ``sglang_lite::int4_mm``, so the
    step stays one graph."""
    if torch.compiler.is_compiling():
        return torch.ops.sglang_lite.int4_mm(x, packed, scale_zero, group, out_features, bits)
    return _call(x, packed, scale_zero, group, out_features, bits)


def _call(x: torch.Tensor, packed: torch.Tensor, scale_zero: torch.Tensor, group: int,
          out_features: int, bits: int = 4) -> torch.Tensor:
    x = x.contiguous()
    m, k = x.shape
    y = torch.empty(m, out_features, dtype=x.dtype)
    kernel = _loaded[0].codes8_mm if bits == 8 else _loaded[0].int4_mm
    n_pad = packed.shape[0] * (_BLOCK if bits == 8 else 1)  # byte codes: [N_pad / 64, K / 4, 8, 32]
    kernel(x.data_ptr(), _DTYPES[x.dtype], m, k, packed.data_ptr(), n_pad, scale_zero.data_ptr(),
           scales_code(scale_zero), group, y.data_ptr(), out_features, _DTYPES[x.dtype])
    return y


@torch.library.custom_op("sglang_lite::int4_mm", mutates_args=())
def _int4_mm_op(x: torch.Tensor, packed: torch.Tensor, scale_zero: torch.Tensor, group: int,
                out_features: int, bits: int = 4) -> torch.Tensor:
    return _call(x, packed, scale_zero, group, out_features, bits)


@_int4_mm_op.register_fake
def _(x, packed, scale_zero, group, out_features, bits=4):
    return x.new_empty(x.shape[0], out_features)


def quantize_activations(x: torch.Tensor, group: int) -> torch.Tensor:
    """The activations the kernel multiplies: each row's groups as ``dx * round(x / dx)``,
    ``dx = max|x| / 127`` (fp32; the reference the tests compare the kernel with)."""
    g = x.float().view(x.shape[0], -1, group)
    amax = g.abs().amax(-1, keepdim=True)
    # a tensor over a tensor: correctly rounded as the C division is (``127.0 / amax`` is
    # computed as amax's reciprocal times 127, which rounds ties of x / dx the other way)
    inv = torch.where(amax > 0, torch.full_like(amax, 127.0) / amax, torch.zeros_like(amax))
    q = torch.round(g * inv).clamp(-127, 127)
    return (q * (amax / 127.0)).view(x.shape[0], -1)
