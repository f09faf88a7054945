"""8-bit KV formats: coding error bounds, what the pool stores and reads back, the byte budget,
and how the option resolves."""

from __future__ import annotations

import pytest
import torch

from sglang_lite.config import EngineConfig
from sglang_lite.mem import KVPool
from sglang_lite.mem.kv_format import kv_format, resolve_kv_cache_dtype

SHAPES = [(1, 1, 64), (7, 3, 64), (33, 2, 80), (5, 4, 17)]


def _heads(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.rand(shape[:2] + (1,), generator=g) * 20
    x[0, 0, 0] = 0.0
    if shape[0] > 2:
        x[2] = 0.0  # an all-zero token: its scale must not divide by zero
        x[1, 0, 1] = 500.0  # one outlier: only its own head's scale grows
    return x


@pytest.mark.parametrize("shape", SHAPES)
def test_int8_error_is_at_most_half_a_code_step(shape):
    fmt = kv_format("int8")
    x = _heads(shape, 0)
    codes, scale = fmt.quantize(x)
    assert codes.dtype == torch.int8 and scale.shape == shape[:2]
    err = (fmt.dequantize(codes, scale, torch.float32) - x).abs()
    step = scale.float()[..., None]
    assert torch.all(err <= step / 2 * 1.001 + 1e-30)
    amax = x.abs().amax(-1, keepdim=True)
    assert torch.all(err <= amax / 250)  # 127 codes a side, within the bf16 scale's rounding
    assert torch.equal(fmt.dequantize(codes, scale, torch.float32)[x == 0], x[x == 0])


@pytest.mark.parametrize("shape", SHAPES)
def test_fp8_error_is_relative_with_a_subnormal_floor(shape):
    fmt = kv_format("fp8_e4m3")
    x = _heads(shape, 1)
    codes, scale = fmt.quantize(x)
    assert codes.dtype == torch.float8_e4m3fn
    back = fmt.dequantize(codes, scale, torch.float32)
    s = scale.float()[..., None]
    # 3 mantissa bits: half an ulp is 1/16 of the value; below 2^-6 codes are subnormal, spaced 2^-9.
    assert torch.all((back - x).abs() <= x.abs() / 16 + s * 2.0**-10 + 1e-30)
    assert torch.isfinite(back).all()


def test_quantized_pool_reads_back_what_was_stored_within_the_bound():
    fmt = kv_format("int8")
    pool = KVPool(num_pages=5, page_size=4, num_layers=2, num_kv_heads=3, head_dim=8,
                  dtype=torch.bfloat16, device="cpu", kv_format=fmt)
    k, v = torch.randn(6, 3, 8).bfloat16(), torch.randn(6, 3, 8).bfloat16() * 3
    slots = torch.tensor([4, 5, 6, 7, 13, 9])
    pool.store(1, slots, k, v)
    gk, gv = pool.gather_slots(1, slots)
    assert gk.dtype == torch.bfloat16
    for got, want in ((gk, k), (gv, v)):
        amax = want.float().abs().amax(-1, keepdim=True)
        assert torch.all((got.float() - want.float()).abs() <= amax / 120)  # + bf16 rounding of the product
    pk, pv = pool.gather_pages(1, torch.tensor([1, 0]))  # page 1 = slots 4..7; page 0 never written
    assert pk.shape == (2, 4, 3, 8)
    assert torch.equal(pk[0], gk[:4]) and torch.equal(pv[0], gv[:4])
    assert pk[1].abs().sum() == 0 and pool.gather_slots(0, slots)[0].abs().sum() == 0  # other layer untouched


def test_fp8_pool_stores_through_a_byte_view():
    pool = KVPool(num_pages=3, page_size=2, num_layers=1, num_kv_heads=1, head_dim=4,
                  dtype=torch.float32, device="cpu", kv_format=kv_format("fp8_e4m3"))
    k = torch.tensor([[[1.0, -2.0, 0.5, 448.0]]])
    pool.store(0, torch.tensor([3]), k, -k)
    gk, gv = pool.gather_slots(0, torch.tensor([3]))
    assert pool.k_buffers[0].dtype == torch.float8_e4m3fn
    assert torch.allclose(gk, k, rtol=1 / 16) and torch.allclose(gv, -k, rtol=1 / 16)


def test_eight_bit_pool_holds_about_twice_the_tokens_of_bf16():
    bf16 = KVPool.bytes_per_token(30, 3, 64, torch.bfloat16)
    for name in ("int8", "fp8_e4m3"):
        per_token = KVPool.bytes_per_token(30, 3, 64, torch.bfloat16, kv_format(name))
        assert per_token == 2 * 30 * 3 * (64 + 2)  # codes + one bf16 scale per head
        assert 1.9 < bf16 / per_token < 2.0
    assert KVPool.bytes_per_token(30, 3, 64, torch.float32, kv_format("bfloat16")) == bf16


@pytest.mark.parametrize(("option", "model_dtype", "resolved"), [
    ("auto", "float32", "float32"), ("auto", "bf16", "bfloat16"), ("bf16", "float32", "bfloat16"),
    ("fp8", "bfloat16", "fp8_e4m3"), ("fp8_e4m3", "float32", "fp8_e4m3"), ("int8", "float32", "int8"),
])
def test_kv_cache_dtype_resolves(option, model_dtype, resolved):
    assert resolve_kv_cache_dtype(option, model_dtype) == resolved
    cfg = EngineConfig.create(device="cpu", dtype=model_dtype, kv_cache_dtype=option)
    assert cfg.kv_cache_dtype == resolved and cfg.kv_format.name == resolved


def test_unknown_kv_cache_dtype_is_refused_and_triton_takes_8_bit():
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        EngineConfig.create(device="cpu", kv_cache_dtype="int4")
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        EngineConfig(device="cuda", dtype="bfloat16", attention_backend="triton", kv_cache_dtype="int4",
                     num_continuous_decode_steps=8).validate()
    for kv in ("int8", "fp8_e4m3", "auto"):  # the triton kernels read 8-bit codes with their scales
        EngineConfig(device="cuda", dtype="bfloat16", attention_backend="triton", kv_cache_dtype=kv,
                     num_continuous_decode_steps=8).validate()


def test_serve_flag_reaches_the_engine_options():
    from sglang_lite.server.args import parse_args

    assert parse_args(["--kv-cache-dtype", "fp8_e4m3"]).engine_options == {"kv_cache_dtype": "fp8_e4m3"}


def test_triton_backend_takes_an_8_bit_pool():
    # what it computes on one: tests/kernels/test_triton_backend.py
    pytest.importorskip("triton")
    from sglang_lite.attention import create_backend
    from sglang_lite.attention.triton_backend import TritonAttentionBackend

    pool = KVPool(num_pages=3, page_size=2, num_layers=1, num_kv_heads=1, head_dim=4,
                  dtype=torch.float32, device="cpu", kv_format=kv_format("int8"))
    assert isinstance(create_backend("triton", pool), TritonAttentionBackend)
