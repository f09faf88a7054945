"""The C int4 kernel (sglang_lite/quant/native_int4.c) against a float64 reference: the
dequantized weight times the activations it multiplies (each group quantized to int8), over
row counts 1..MAX_ROWS and past them, group sizes, out_features that end inside a 64-row block, both
dtypes; its AVX2 and plain-C paths built on purpose; and its threads those of torch's runtime."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from constraints.native import build_extension
from sglang_lite.quant import native_int4
from sglang_lite.quant.int4 import Int4Weight
from sglang_lite_kernels.quant_mm import cpu_layout_codes

pytestmark = pytest.mark.skipif(native_int4.module() is None, reason="the C int4 kernel does not build here")


def _case(n: int, k: int, m: int, group: int, dtype: torch.dtype):
    g = torch.Generator().manual_seed(n + 7 * k + 31 * m + group)
    w = torch.randn(n, k, generator=g) * 0.05 + torch.randn(n, 1, generator=g) * 0.01
    packed = dataclasses.replace(Int4Weight.quantize(w, group, dtype), int8_activations=True)
    x = (torch.randn(m, k, generator=g) * torch.rand(1, k, generator=g) * 4).to(dtype)
    x[0, :group] = 0  # a group of zeros: scale 0, no division by it
    ref = native_int4.quantize_activations(x, group).double() @ packed.dequantize(torch.float64).t()
    return packed, x, ref


def _check(y: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    assert y.shape == ref.shape and y.dtype == dtype
    err = (y.double() - ref).abs()
    # fp32: summation order; bf16: the output rounded (2^-9 relative) and the scales in bf16
    # (exact here: the reference dequantizes the same bf16 scales)
    bound = 2e-6 * ref.abs().max() + (2**-8 * ref.abs() if dtype == torch.bfloat16 else 0)
    assert (err <= bound).all(), err.max().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,k,group", [(64, 32, 32), (100, 96, 32), (130, 256, 64), (960, 576, 32), (70, 512, 128)])
def test_kernel_matches_the_dequantized_weight_times_the_quantized_activations(n, k, group, dtype):
    for m in range(1, native_int4.MAX_ROWS + 1):
        packed, x, ref = _case(n, k, m, group, dtype)
        assert native_int4.supports(x, packed.scale_zero)
        _check(native_int4.mm(x, packed.packed, packed.scale_zero, group, n), ref, dtype)
        _check(packed.mm(x), ref, dtype)  # Int4Weight takes it at these rows


def test_activations_are_quantized_per_group_to_127_levels():
    x = torch.tensor([[0.5, -1.0, 0.25, 0.0, 2.0, 1.0, -0.5, 0.3]])
    got = native_int4.quantize_activations(x, 4)
    step = torch.tensor([1.0 / 127] * 4 + [2.0 / 127] * 4)
    assert torch.allclose(got[0], torch.round(x[0] / step) * step)
    assert got[0, 1] == -1.0 and got[0, 4] == 2.0  # each group's largest is exact


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("group", [4, 12, 32, 64])
def test_the_kernel_multiplies_exactly_the_quantized_activations(group, dtype):
    """An identity weight (one code 1 a row, scale 1, no offset) returns the activations as the
    kernel quantized them: bitwise quantize_activations' values, ties to even included, over
    groups whose tails the vector loops leave to plain C (4, 12) and rows quantized by one
    thread first or shared between the threads (QUANTIZE_SPLIT, 8)."""
    k = 192
    w = dataclasses.replace(Int4Weight.from_codes(torch.eye(k, dtype=torch.uint8), torch.ones(k, k // group),
                                                  torch.zeros(k, k // group), torch.float32),
                            int8_activations=True).for_c_kernel()
    g = torch.Generator().manual_seed(group)
    for m in (1, 5, 9, 20):
        x = torch.randn(m, k, generator=g) * torch.rand(1, k, generator=g) * 3
        x[:, ::group] = 127.0  # dx = 1: the values below are ties
        x[:, 1::group] = torch.tensor([2.5, -2.5, 3.5, -0.5])[torch.arange(m) % 4, None]
        x[0, group:2 * group] = 0  # a group of zeros
        x = x.to(dtype)
        want = native_int4.quantize_activations(x, group).to(dtype)
        got = w.mm(x)
        assert torch.equal(got, want), (m, (got.float() - want.float()).abs().max().item())
        assert (got[:, 1::group].abs().float() % 2 == 0).all()  # 2.5 -> 2, 3.5 -> 4: even


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_more_rows_than_a_pass_takes_give_each_row_its_own_result(dtype):
    """Past MAX_ROWS rows (a prefill) the kernel makes more passes over each weight block: the
    reference holds, and every row's result is bitwise the one it gets alone or in any pass."""
    for m in (native_int4.MAX_ROWS + 1, 64, 97):
        packed, x, ref = _case(130, 256, m, 64, dtype)
        assert native_int4.supports(x, packed.scale_zero)
        y = packed.mm(x)
        _check(y, ref, dtype)
        for i in (0, native_int4.MAX_ROWS - 1, native_int4.MAX_ROWS, m - 1):
            assert torch.equal(y[i], packed.mm(x[i:i + 1])[0]), (m, i)
        assert torch.equal(y[native_int4.MAX_ROWS:], packed.mm(x[native_int4.MAX_ROWS:]))


def test_threads_are_torchs_own():
    """Linked against the libgomp torch loaded: torch.set_num_threads sets the kernel's too."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert native_int4.module().features()[1] == 1
        packed, x, ref = _case(960, 576, 1, 32, torch.float32)
        one = packed.mm(x)
        torch.set_num_threads(max(2, before))
        assert native_int4.module().features()[1] == max(2, before)
        assert torch.equal(packed.mm(x), one)  # rows split between threads, sums alike
    finally:
        torch.set_num_threads(before)


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {f for line in text.splitlines() if line.startswith("flags") for f in line.split(":")[1].split()}


def _extremes(m: int, group: int):
    """Every code 15 times activations of one sign each at their largest (127 after quantizing):
    the largest integer sums a group can make, over 4 groups (rows alternate the sign)."""
    k = 4 * group
    q = torch.full((70, k), 15, dtype=torch.uint8)
    d = torch.full((70, k // group), 2.0**-6)
    w = dataclasses.replace(Int4Weight.from_codes(q, d, torch.zeros_like(d), torch.float32),
                            int8_activations=True)
    x = torch.ones(m, k) * torch.tensor([1.0 if r % 2 else -1.0 for r in range(m)])[:, None]
    return w, x, group


def _check_extremes(case) -> None:
    w, x, group = case
    want = native_int4.quantize_activations(x, group).double() @ w.dequantize(torch.float64).t()
    assert want.abs().min() == 15 * 2.0**-6 * x.shape[1]  # nothing lost before the kernel
    _check(native_int4.mm(x, w.packed, w.scale_zero, group, 70), want, torch.float32)


@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("m", [1, 8, 20, 32])
def test_the_largest_sums_do_not_overflow(m, group):
    # The AVX2 rows-from-L1 path adds pairs of products in int16 for 8 steps of 4 columns
    # (30480 at most) and then widens them; 16 steps (a group of 64) in int16 would wrap.
    _check_extremes(_extremes(m, group))


@pytest.mark.parametrize("march,path", [("haswell", "avx2"), ("x86-64", "scalar")])
def test_other_simd_paths_give_the_same_sums(march, path, tmp_path, monkeypatch):
    """The AVX2 path (no VNNI) and plain C, built as they would be on such a CPU."""
    if march == "haswell" and not {"avx2", "fma", "bmi2"} <= _cpu_flags():
        pytest.skip("this CPU cannot run an AVX2 build")
    monkeypatch.setenv("SGLANG_LITE_CACHE", str(tmp_path))
    mod = build_extension(native_int4._SOURCE, native_int4._NAME,
                          ("-O2", f"-march={march}", "-fopenmp", f"-I{native_int4._SOURCE.parent.parent}"),
                          tag=march.encode())
    assert mod.features()[0] == path
    monkeypatch.setattr(native_int4, "_loaded", [mod])
    for dtype in (torch.float32, torch.bfloat16):
        for m, group in ((1, 32), (3, 32), (20, 32), (20, 64)):  # 3 and up: AVX2's rows-from-L1 path
            packed, x, ref = _case(130, 128, m, group, dtype)
            _check(native_int4.mm(x, packed.packed, packed.scale_zero, group, 130), ref, dtype)
        for m in (1, 3):
            packed, x, ref = _case(130, 96, m, 32, dtype)
            _check(native_int4.mm(x, packed.packed, packed.scale_zero, 32, 130), ref, dtype)
            blocks = packed.for_c_kernel()  # fp16 block scales: F16C's conversion or the bitwise one
            assert blocks.block_scales.dtype == torch.float16
            ref = native_int4.quantize_activations(x, 32).double() @ blocks.dequantize(torch.float64).t()
            _check(blocks.mm(x), ref, dtype)
    monkeypatch.setattr(native_int4, "codes8", lambda: bool(mod.features()[2]))
    if path == "scalar":  # byte codes' plain loops: the same sums
        assert mod.features()[2] == 1
        for m in (1, 3, 20):
            w, q, d = _q8_case(130, 128, 32)
            _check_codes8(w, q, d, m, torch.float32)
    else:  # maddubs would saturate: no byte codes, and Q8_0 keeps its int4 halves
        assert mod.features()[2] == 0
        from sglang_lite.quant.int8 import GroupInt8Weight

        halves = GroupInt8Weight.from_codes(torch.randint(-128, 128, (64, 64), dtype=torch.int8),
                                            torch.full((64, 2), 0.01), torch.float32)
        assert isinstance(halves.for_c_kernel(), GroupInt8Weight)
        with pytest.raises(ValueError, match="no byte-code path"):
            mod.codes8_mm(0, 0, 1, 64, 0, 64, 0, 2, 32, 0, 64, 0)
    # fp16 subnormals held exactly (d = 2^-20, m = -3 * 2^-24) stay fp16: converted alike
    sub = _gguf_like(64, 64, 32, torch.float32)
    sub = Int4Weight.from_codes(cpu_layout_codes(sub.packed)[:64], torch.full((64, 2), 2.0**-20),
                                torch.full((64, 2), -3 * 2.0**-24), torch.float32).for_c_kernel()
    assert sub.block_scales.dtype == torch.float16 and sub.block_scales.abs().max() < 2.0**-14
    x = torch.randn(2, 64)
    ref = native_int4.quantize_activations(x, 32).double() @ sub.dequantize(torch.float64).t()
    _check(sub.mm(x), ref, torch.float32)
    _check_extremes(_extremes(20, 64))


@pytest.mark.parametrize("codes8", [True, False])
def test_use_int8_activations_flags_every_int4_weight_and_keeps_shared_ones_shared(codes8, monkeypatch):
    """A tied head and embedding share one Q8_0 weight: converted once, still one object (byte
    codes where the kernel takes them, else two flagged int4 halves); ByRowsWeight's packed
    weight flagged, its dense copy kept; int8 untouched."""
    from torch import nn

    from sglang_lite.quant.apply import resident_weight_bytes, use_int8_activations
    from sglang_lite.quant.by_rows import ByRowsWeight
    from sglang_lite.quant.int8 import GroupInt8Weight, Int8BlockWeight, Int8Weight
    from sglang_lite.quant.modules import QuantEmbedding, QuantLinear

    if codes8 and not native_int4.codes8():
        pytest.skip("this build of the kernel takes no byte codes (AVX2 without VNNI)")
    monkeypatch.setattr(native_int4, "codes8", lambda: codes8)
    w = torch.randn(128, 64)
    head = GroupInt8Weight.from_codes((w * 50).round().clamp(-128, 127).to(torch.int8),
                                      torch.full((128, 2), 0.02), torch.float32)
    model = nn.ModuleDict({
        "embed": QuantEmbedding(head, torch.float32), "head": QuantLinear(head),
        "mlp": QuantLinear(ByRowsWeight.of(Int4Weight.quantize(w, 32, torch.float32), torch.float32, 8)),
        "int8": QuantLinear(Int8Weight.quantize(w))})
    before = resident_weight_bytes(model)
    use_int8_activations(model)
    assert model["embed"].weight_q is model["head"].weight_q
    assert model["mlp"].weight_q.packed.int8_activations and model["mlp"].weight_q.max_rows == 8
    assert isinstance(model["int8"].weight_q, Int8Weight)
    mlp_scales = model["mlp"].weight_q.packed.block_scales
    assert mlp_scales.dtype == torch.float16  # its fp32 scale_zero replaced by fp16 blocks: half the bytes
    head_bytes = head.nbytes
    if codes8:  # a byte a weight, and each block's (s, c) in fp16 (0.02 and -2.56 hold there)
        new = model["head"].weight_q
        assert isinstance(new, Int8BlockWeight) and new.block_scales.dtype == torch.float16
        assert new.nbytes == 128 * 64 + 2 * 2 * 128 * 2 and new.nbytes < head_bytes
        # the same weight, its scales within fp16's precision (block_scales_from)
        assert torch.allclose(new.dequantize(), head.dequantize(), rtol=2.0**-11, atol=0)
        ids = torch.tensor([0, 37, 127])
        assert torch.equal(new.rows(ids, torch.float32), new.dequantize()[ids])
        head_bytes -= new.nbytes
    else:
        assert model["head"].weight_q.hi.int8_activations and model["head"].weight_q.lo.int8_activations
        assert model["head"].weight_q.hi.scale_zero is None
        head_bytes = (head.hi.scale_zero.nbytes + head.lo.scale_zero.nbytes) // 2
    assert resident_weight_bytes(model) == before - head_bytes - mlp_scales.nbytes
    x = torch.randn(2, 64)
    ref = native_int4.quantize_activations(x, 32).double() @ model["head"].weight_q.dequantize(torch.float64).t()
    _check(model["head"](x), ref, torch.float32)


def test_a_q8_0_head_takes_the_c_kernel_past_torchs_rows(monkeypatch):
    """A tied Q8_0 head (two int4 halves) at more rows than torch's kernel takes (a step of many
    requests) multiplies through the C kernel, never through its whole weight dequantized."""
    from sglang_lite.quant.apply import use_int8_activations
    from sglang_lite.quant.int8 import GroupInt8Weight
    from sglang_lite.quant.modules import QuantLinear

    w = torch.randn(200, 64)
    head = QuantLinear(GroupInt8Weight.from_codes((w * 50).round().clamp(-128, 127).to(torch.int8),
                                                  torch.full((200, 2), 0.02), torch.float32))
    use_int8_activations(head)
    packed = head.weight_q
    ref = native_int4.quantize_activations(x := torch.randn(48, 64), 32).double() @ packed.dequantize(torch.float64).t()

    def whole(*args):
        raise AssertionError("the whole weight dequantized")

    monkeypatch.setattr(GroupInt8Weight, "dequantize", whole)
    assert x.shape[0] > Int4Weight.KERNEL_MAX_ROWS
    _check(head(x), ref, torch.float32)


def _q8_case(n: int, k: int, group: int, extreme: bool = False):
    """A Q8_0-like weight (codes over all of -128..127, fp32 d) as byte codes: (weight, q, d)."""
    from sglang_lite.quant.int8 import Int8BlockWeight

    g = torch.Generator().manual_seed(n + 3 * k + group)
    q = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int16)
    if extreme:  # the largest sums a group can make: every code at an end of the range
        q = torch.where(torch.arange(n)[:, None] % 2 == 0, -128, 127).expand(n, k)
    d = torch.rand(n, k // group, generator=g) * 0.01 + 1e-3
    return Int8BlockWeight.from_codes(q.to(torch.int8), d, group), q, d


def _check_codes8(w, q, d, m: int, dtype: torch.dtype, extreme: bool = False) -> None:
    g = torch.Generator().manual_seed(m)
    x = (torch.randn(m, q.shape[1], generator=g) * 3).to(dtype)
    if extreme:
        x = torch.ones(m, q.shape[1], dtype=dtype) * torch.tensor([1.0 if r % 2 else -1.0 for r in range(m)],
                                                                  dtype=dtype)[:, None]
    dense = q.double() * w.block_scales.double()[:, :, 0].permute(0, 2, 1).reshape(-1, d.shape[1])[: q.shape[0]] \
        .repeat_interleave(w.group, 1)
    ref = native_int4.quantize_activations(x, w.group).double() @ dense.t()
    _check(w.mm(x), ref, dtype)


@pytest.mark.parametrize("n,k,group", [(64, 32, 32), (100, 96, 32), (130, 256, 64), (960, 576, 32), (70, 512, 128)])
def test_byte_codes_match_the_dequantized_weight_times_the_quantized_activations(n, k, group):
    """Q8_0 as one weight of byte codes in the kernel's order (Int8BlockWeight): every row count
    up to a pass and past it, both dtypes, against the codes times d in float64; dequantize and
    rows read the same weight back from that order."""
    if not native_int4.codes8():
        pytest.skip("this build of the kernel takes no byte codes (AVX2 without VNNI)")
    w, q, d = _q8_case(n, k, group)
    assert w.codes.shape == (-(-n // 64), k // 4, 8, 32) and w.in_features == k
    dense = q.float() * d.repeat_interleave(group, 1)
    assert torch.allclose(w.dequantize(), dense, rtol=2.0**-11, atol=0)  # d kept to fp16's precision
    ids = torch.tensor(sorted({0, 3, 4, 15, 16, 31, 32, 47, 63, n - 1}))
    assert torch.equal(w.rows(ids, torch.float32), w.dequantize()[ids])
    for i in ids.tolist():  # one id (a batch-1 step's embedding): read through views
        assert torch.equal(w.rows(torch.tensor([i]), torch.bfloat16), w.dequantize(torch.bfloat16)[i:i + 1])
    for dtype in (torch.float32, torch.bfloat16):
        for m in (*range(1, 10), 16, native_int4.MAX_ROWS, native_int4.MAX_ROWS + 5):
            _check_codes8(w, q, d, m, dtype)


@pytest.mark.parametrize("m", [1, 2, 3, 8, 33])
def test_the_largest_byte_code_sums_do_not_overflow(m):
    if not native_int4.codes8():
        pytest.skip("this build of the kernel takes no byte codes (AVX2 without VNNI)")
    w, q, d = _q8_case(70, 512, 128, extreme=True)
    _check_codes8(w, q, d, m, torch.float32, extreme=True)


def test_byte_codes_give_the_int4_halves_products():
    """The halves (hi * 16 d + lo * d) and the byte codes are one weight: the same integer sums,
    so the products agree to float rounding; a kernel without byte codes keeps the halves."""
    from sglang_lite.quant.int8 import GroupInt8Weight, Int8BlockWeight

    if not native_int4.codes8():
        pytest.skip("this build of the kernel takes no byte codes (AVX2 without VNNI)")
    g = torch.Generator().manual_seed(5)
    q = torch.randint(-128, 128, (200, 128), generator=g).to(torch.int8)
    d = (torch.rand(200, 4, generator=g) * 0.01 + 1e-3).half().float()  # GGUF's fp16 d: exact in both
    halves = GroupInt8Weight.from_codes(q, d, torch.float32)
    flagged = GroupInt8Weight(halves.hi.for_c_kernel(), halves.lo.for_c_kernel())
    blocks = halves.for_c_kernel()
    assert isinstance(blocks, Int8BlockWeight) and torch.equal(blocks.dequantize(), halves.dequantize())
    for m in (1, 5, 40):
        x = torch.randn(m, 128, generator=g)
        assert torch.allclose(blocks.mm(x), flagged.mm(x), rtol=1e-5, atol=1e-5 * flagged.mm(x).abs().max())


def test_byte_codes_refuse_what_they_cannot_read():
    if not native_int4.codes8():
        pytest.skip("this build of the kernel takes no byte codes (AVX2 without VNNI)")
    w, q, d = _q8_case(64, 64, 32)
    x, y = torch.randn(1, 64), torch.empty(1, 64)
    kernel = native_int4.module().codes8_mm
    with pytest.raises(ValueError, match="byte codes: 2-3"):  # torch's (s, z) layout: not for bytes
        kernel(x.data_ptr(), 0, 1, 64, w.codes.data_ptr(), 64, w.block_scales.data_ptr(), 0, 32, y.data_ptr(), 64, 0)
    with pytest.raises(ValueError, match="32-byte aligned"):
        kernel(x.data_ptr(), 0, 1, 64, w.codes.data_ptr() + 1, 64, w.block_scales.data_ptr(),
               native_int4.scales_code(w.block_scales), 32, y.data_ptr(), 64, 0)


def _gguf_like(n: int, k: int, group: int, dtype: torch.dtype, tiny: bool = False) -> Int4Weight:
    """Codes with fp16 d and m, as a GGUF Q4_1 file holds them (tiny: some d far below fp16's
    normal range, which fp16 cannot hold to its precision)."""
    g = torch.Generator().manual_seed(n + k + group)
    q = torch.randint(0, 16, (n, k), generator=g)
    d = (torch.rand(n, k // group, generator=g) * 0.02 + 1e-3).half().float()
    m = (-8 * d * torch.rand(n, k // group, generator=g)).half().float()
    if tiny:
        d[0, 0] = 3e-9
    return Int4Weight.from_codes(q, d, m, dtype)


@pytest.mark.parametrize("n,k,group", [(64, 32, 32), (130, 256, 64), (960, 576, 32), (70, 512, 128)])
def test_block_scales_multiply_as_torchs_layout_does(n, k, group):
    """for_c_kernel's block layout (one stream per 64-row block; fp16 where that is exact
    enough, fp32 else) holds the same s and c: the same products, bitwise, at any row count;
    dequantize, rows and the rebuilt scale_zero agree; the weight keeps one copy of its scales."""
    for tiny, kept in ((False, torch.float16), (True, torch.float32)):
        torchs = dataclasses.replace(_gguf_like(n, k, group, torch.float32, tiny), int8_activations=True)
        blocks = torchs.for_c_kernel()
        assert blocks.scale_zero is None and blocks.block_scales.dtype == kept
        assert blocks.block_scales.shape == (torchs.packed.shape[0] // 64, k // group, 2, 64)
        assert blocks.nbytes == torchs.packed.nbytes + torchs.scale_zero.nbytes // (2 if kept == torch.float16 else 1)
        assert native_int4.supports(torch.zeros(1, k), blocks.scales)
        for m in (1, 2, 8, 9, native_int4.MAX_ROWS + 3):
            x = torch.randn(m, k, generator=torch.Generator().manual_seed(m))
            assert torch.equal(blocks.mm(x), torchs.mm(x)), m
        assert torch.equal(blocks.dequantize(), torchs.dequantize())
        ids = torch.tensor(sorted({0, 5, 63, min(64, n - 1), n - 1}))
        assert torch.equal(blocks.rows(ids, torch.float32), torchs.rows(ids, torch.float32))
        assert torch.equal(blocks.scale_zero_as(torch.float32), torchs.scale_zero)
        assert blocks.for_c_kernel().block_scales is blocks.block_scales


def test_a_block_weight_runs_torchs_kernel_where_the_c_kernel_does_not():
    """Where the C kernel does not take the input, torch's kernel gets scale_zero rebuilt from the
    blocks, once per dtype."""
    torchs = _gguf_like(128, 64, 32, torch.float32)
    blocks = torchs.for_c_kernel()
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    ref = x.float() @ torchs.dequantize().t()
    assert torch.allclose(dataclasses.replace(blocks, int8_activations=False).mm(x).float(), ref, rtol=2e-2, atol=2e-2)
    assert blocks.scale_zero_as(torch.bfloat16) is blocks.scale_zero_as(torch.bfloat16)


def test_an_unknown_scale_layout_is_refused():
    packed, x, _ = _case(64, 64, 1, 32, torch.float32)
    y = torch.empty(1, 64)
    with pytest.raises(ValueError, match="no scale layout 4"):
        native_int4.module().int4_mm(x.data_ptr(), 0, 1, 64, packed.packed.data_ptr(), 64,
                                     packed.scale_zero.data_ptr(), 4, 32, y.data_ptr(), 64, 0)
