"""Each packed weight format against plain dequantize-then-matmul, over shapes that cross the
64-row blocks of torch's int4 layout, odd out_features, several groups, and batch sizes on
both sides of the kernel switch; GGUF blocks against the gguf package's own dequantization,
synthetic ones and those of the embedded file. Where the C int4 kernel runs (up to
``native_int4.MAX_ROWS`` rows), the reference multiplies the activations it multiplies:
each group quantized to int8 (``native_int4.quantize_activations``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sglang_lite.quant import native_int4
from sglang_lite.quant.by_rows import ByRowsWeight
from sglang_lite.quant.fp8 import Fp8Weight
from sglang_lite.quant.gguf_blocks import _decode_blocks, concat_rows, decode
from sglang_lite.quant.int4 import Int4Weight, pack_cpu_layout, torch_packs_like_us
from sglang_lite.quant.int8 import GroupInt8Weight, Int8Weight

SHAPES = [(64, 32), (100, 96), (130, 64), (960, 576)]  # (out_features, in_features)
ROWS = [1, 5, Int4Weight.KERNEL_MAX_ROWS, Int4Weight.KERNEL_MAX_ROWS + 3]  # kernel, then dequantize
DTYPES = [torch.float32, torch.bfloat16]


def _weight(n: int, k: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(n * 1000 + k)
    return torch.randn(n, k, generator=g) * 0.05 + torch.randn(n, 1, generator=g) * 0.01


def _activations(packed, x: torch.Tensor) -> torch.Tensor:
    """What ``packed.mm`` multiplies the weight by: ``x`` itself, or where the C int4 kernel
    takes it, ``x`` quantized per group."""
    if isinstance(packed, ByRowsWeight):
        if x.shape[0] > packed.max_rows:
            return x.float()
        packed = packed.packed
    four = packed.hi if isinstance(packed, GroupInt8Weight) else packed
    if isinstance(four, Int4Weight) and four.int8_activations and native_int4.supports(x, four.scale_zero):
        return native_int4.quantize_activations(x, four.group)
    return x.float()


def _check_mm(packed, dtype: torch.dtype) -> None:
    ref_w = packed.dequantize(torch.float32)
    assert ref_w.shape == (packed.out_features, packed.in_features)
    for m in ROWS:
        x = torch.randn(m, packed.in_features, generator=torch.Generator().manual_seed(m)).to(dtype)
        got = packed.mm(x)
        ref = F.linear(_activations(packed, x), ref_w)
        assert got.shape == ref.shape and got.dtype == dtype
        # fp32: summation order only; bf16: the output (and the kernel's scales) in bf16
        tol = 1e-4 if dtype == torch.float32 else 2e-2
        err = (got.float() - ref).abs().max().item()
        assert err <= tol * ref.abs().max().item() + tol, (m, err)


def _check_rows(packed, dtype: torch.dtype) -> None:
    ids = torch.tensor([0, packed.out_features - 1, 31, 32, 33, 63, min(64, packed.out_features - 1), 3, 3])
    full = packed.dequantize(dtype)
    assert torch.equal(packed.rows(ids, dtype), full[ids])
    for i in ids.tolist():  # one id (a batch-1 decode step's embedding) takes views, not gathers
        assert torch.equal(packed.rows(torch.tensor([i]), dtype), full[[i]])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("int8_activations", [False, True])
def test_int4_matches_dequantized_reference(shape, dtype, int8_activations):
    if int8_activations and native_int4.module() is None:
        pytest.skip("the C int4 kernel does not build here")
    w = _weight(*shape)
    packed = dataclasses.replace(Int4Weight.quantize(w, 32, dtype), int8_activations=int8_activations)
    deq = packed.dequantize(torch.float32)
    # round to nearest over each group's range: at most half a step off, step = range / 15
    # (plus, in bf16, the rounding of the kernel's scale and zero point)
    step = (w.view(shape[0], -1, 32).amax(-1) - w.view(shape[0], -1, 32).amin(-1)) / 15
    slack = 1e-6 if dtype == torch.float32 else 2**-7 * w.abs().max().item()
    assert ((deq - w).abs().view(shape[0], -1, 32) <= step[..., None] * 0.5 + slack).all()
    _check_mm(packed, dtype)
    _check_rows(packed, dtype)


@pytest.mark.parametrize("shape", [(64, 32), (128, 96), (192, 576)])
def test_our_int4_packing_gives_torchs_layout(shape):
    """The bytes torch's int4 kernel reads on this CPU: ours, made with byte ops, where torch's
    layout is ours (blocks of 64 rows: AVX512), else the copy ``for_torch`` makes (blocks of 32
    on an AVX2-only CPU); either way torch's own packing."""
    q = torch.randint(0, 16, shape, generator=torch.Generator().manual_seed(shape[1]), dtype=torch.int32)
    theirs = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    ours = pack_cpu_layout(q.to(torch.uint8))
    assert torch.equal(ours, theirs) == torch_packs_like_us()
    ones = torch.ones(shape[0], 1)
    weight = Int4Weight.from_codes(q, ones, 0 * ones, torch.float32)
    assert torch.equal(weight.packed, ours) and torch.equal(weight.for_torch(), theirs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_int8_per_channel_matches_dequantized_reference(shape, dtype):
    w = _weight(*shape)
    packed = Int8Weight.quantize(w)
    step = w.abs().amax(1, keepdim=True) / 127
    assert ((packed.dequantize() - w).abs() <= step * 0.51).all()
    _check_mm(packed, dtype)
    _check_rows(packed, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_group_int8_split_into_int4_halves_is_exact(shape, dtype):
    n, k = shape
    g = torch.Generator().manual_seed(k)
    q = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    q[0, :32] = -128  # the extremes of both halves
    q[-1, :32] = 127
    d = (torch.rand(n, k // 32, generator=g) * 0.01).half().float()  # GGUF's scales are fp16
    packed = GroupInt8Weight.from_codes(q, d, dtype)
    exact = (q.float().view(n, -1, 32) * d[..., None]).view(n, k)
    if dtype == torch.float32:  # fp16 scale times a 4-bit code: no rounding in fp32
        assert torch.equal(packed.dequantize(torch.float32), exact)
    else:  # scales rounded to bf16: within bf16's relative step
        assert torch.allclose(packed.dequantize(torch.float32), exact, rtol=2**-8, atol=0)
    _check_mm(packed, dtype)
    _check_rows(packed, dtype)


@pytest.mark.parametrize("shape", SHAPES)
def test_fp8_matches_dequantized_reference(shape):
    w = _weight(*shape)
    packed = Fp8Weight.quantize(w, 32)
    assert packed.q.dtype == torch.float8_e4m3fn and packed.group == 32
    # e4m3 keeps 3 mantissa bits: relative error at most 2^-4 of each value (group max >> subnormals)
    rel = ((packed.dequantize() - w).abs() / w.abs().clamp(min=1e-3)).max().item()
    assert rel <= 2**-4 + 1e-6
    _check_mm(packed, torch.float32)
    _check_rows(packed, torch.bfloat16)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["int4", "q8_0", "int8"])
def test_by_rows_weight_uses_the_packed_kernel_up_to_max_rows_then_the_dense_copy(kind, dtype):
    n, k, max_rows = 100, 96, 8
    w = _weight(n, k)
    packed = {"int4": lambda: Int4Weight.quantize(w, 32, dtype), "int8": lambda: Int8Weight.quantize(w),
              "q8_0": lambda: GroupInt8Weight.from_codes((w * 2000).round().clamp(-128, 127).to(torch.int8),
                                                          torch.full((n, k // 32), 5e-4), dtype)}[kind]()
    both = ByRowsWeight.of(packed, dtype, max_rows)
    assert both.dense.dtype == dtype and both.dense.shape == (n, k)
    assert both.nbytes == packed.nbytes + both.dense.nbytes
    for m in (1, max_rows, max_rows + 1, 40):
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(dtype)
        want = packed.mm(x) if m <= max_rows else F.linear(x, packed.dequantize(torch.float32).to(dtype))
        assert torch.equal(both.mm(x), want), m  # the path chosen by the number of rows
    _check_mm(both, dtype)
    ids = torch.tensor([0, n - 1, 31, 64, 3])
    assert torch.equal(both.rows(ids, dtype), packed.dequantize(torch.float32).to(dtype)[ids])


def test_group_size_must_divide_in_features():
    with pytest.raises(ValueError, match="multiple of the group size"):
        Int4Weight.quantize(torch.randn(64, 48), 32, torch.float32)
    with pytest.raises(ValueError, match="multiple of the group size"):
        Fp8Weight.quantize(torch.randn(64, 48), 32)


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0"])
def test_gguf_blocks_decode_like_the_gguf_package(kind):
    from gguf import GGMLQuantizationType, dequantize, quantize

    qtype = GGMLQuantizationType[kind]
    w = _weight(70, 96).numpy()
    raw = quantize(w, qtype)  # [70, bytes]
    ref = torch.from_numpy(dequantize(raw, qtype))
    codes = _decode_blocks(kind, raw)
    assert torch.equal(codes.dequantize(), ref)
    packed = (Int4Weight.from_codes(codes.q, codes.d, codes.m, torch.float32) if codes.kind == "q4"
              else GroupInt8Weight.from_codes(codes.q, codes.d, torch.float32))
    assert torch.allclose(packed.dequantize(torch.float32), ref, rtol=0, atol=1e-6 * ref.abs().max().item())
    _check_mm(packed, torch.float32)
    # merged rows (q/k/v, gate/up) keep each part's rows
    both = concat_rows([codes, codes.permute_rows(torch.arange(69, -1, -1))])
    assert torch.equal(both.dequantize(), torch.cat([ref, ref.flip(0)]))


def test_embedded_gguf_blocks_match_the_gguf_package():
    from gguf import GGUFReader, dequantize

    from sglang_lite.model.loader import embedded_gguf_path
    from sglang_lite.quant.gguf_file import read_gguf

    path = embedded_gguf_path()
    ours = read_gguf(path)
    reader = GGUFReader(str(path))  # the gguf package's own reading, the reference
    assert ours.architecture == "llama"
    assert [t.name for t in ours.tensors] == [t.name for t in reader.tensors]
    wanted = {"blk.0.ffn_down.weight", "blk.7.attn_v.weight", "token_embd.weight", "blk.3.attn_norm.weight"}
    theirs = {t.name: t for t in reader.tensors if t.name in wanted}
    seen = set()
    for tensor in ours.tensors:
        if tensor.name not in wanted:
            continue
        ref_tensor = theirs[tensor.name]
        seen.add(ref_tensor.tensor_type.name)
        ref = torch.from_numpy(np.array(dequantize(ref_tensor.data, ref_tensor.tensor_type), dtype=np.float32))
        codes = decode(tensor)
        assert torch.equal(codes.dequantize().reshape(ref.shape), ref), tensor.name
        if codes.kind == "float":
            continue
        if tensor.name == "token_embd.weight":  # 49152 rows: a spread of 256 of them
            pick = torch.arange(0, 49152, 97)[:256]
            codes, ref = codes.permute_rows(pick), ref[pick]
        packed = (Int4Weight.from_codes(codes.q, codes.d, codes.m, torch.float32) if codes.kind == "q4"
                  else GroupInt8Weight.from_codes(codes.q, codes.d, torch.float32))
        assert torch.allclose(packed.dequantize(torch.float32), ref, rtol=0, atol=1e-6)
        _check_mm(packed, torch.float32)
    assert seen == {"Q4_1", "Q8_0", "F32"}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_int4_by_rows_is_the_same_weight(shape, dtype):
    """The layout an int4 weight takes on CUDA (Int4RowsWeight): the same codes and scales,
    the zero point z - 8 s rounded once into the scales' dtype; rows and mm agree with it."""
    from sglang_lite.quant.int4_rows import Int4RowsWeight
    from sglang_lite.quant.modules import packed_to

    packed = Int4Weight.quantize(_weight(*shape), 32, dtype)
    rows = Int4RowsWeight.of(packed)
    assert (rows.out_features, rows.in_features) == (packed.out_features, packed.in_features)
    ref = packed.dequantize(torch.float32)
    slack = 1e-6 if dtype == torch.float32 else 2**-8 * ref.abs().max().item()  # two bf16 roundings of z
    assert (rows.dequantize(torch.float32) - ref).abs().max().item() <= slack
    _check_rows(rows, dtype)
    _check_mm(rows, dtype)
    assert packed_to(packed, torch.device("cpu")).__class__ is Int4Weight  # only CUDA relayouts
