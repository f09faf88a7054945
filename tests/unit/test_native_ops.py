"""The decoder's elementwise ops in C (sglang_lite/model/native_ops.c) against the plain-torch
references they stand in for (residual add + RMSNorm, RoPE in place, SiLU-and-mul) over odd
widths, chunk boundaries and many-row (threaded) batches, fp32 and bf16; and the model with
them against the model with the torch chains, on the tiny model and on partial-rotary and
Gemma-style families."""

from __future__ import annotations

import random

import pytest
import torch

from sglang_lite import Engine
from sglang_lite.model import native_ops
from sglang_lite.model.rope import rope_tables
from sglang_lite_kernels.activation import silu_and_mul_ref
from sglang_lite_kernels.rmsnorm import rmsnorm_ref
from sglang_lite_kernels.rope import rotate_ref

pytestmark = pytest.mark.skipif(native_ops.module() is None, reason="the C ops do not build here")

DTYPES = [torch.float32, torch.bfloat16]


def _ulps_apart(a: torch.Tensor, b: torch.Tensor) -> int:
    """The most units in the last place of a's dtype between a and b (same signs assumed)."""
    ints = {torch.float32: torch.int32, torch.bfloat16: torch.int16}[a.dtype]
    return int((a.view(ints).int() - b.view(ints).int()).abs().max())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width", [(1, 576), (5, 300), (40, 97)])  # 300: two chunks; 40 rows: threaded
def test_rmsnorm_matches_the_reference(rows, width, dtype):
    g = torch.Generator().manual_seed(rows * width)
    x = (torch.randn(rows, width, generator=g) * 3).to(dtype)
    residual = torch.randn(rows, width, generator=g).to(dtype)
    w = (torch.rand(width, generator=g) + 0.5).to(dtype)
    out, h = native_ops.rmsnorm(x, w, 1e-5, residual)
    ref_out, ref_h = rmsnorm_ref(x, w, 1e-5, residual)
    assert torch.equal(h, ref_h)  # the residual sum, rounded once as torch rounds it
    # The sum of squares adds in another order and 1 / sqrt is not torch's rsqrt: a few fp32
    # ulps, which rounding to bf16 mostly absorbs (two roundings: a tie may flip each once).
    most = 8 if dtype == torch.float32 else 2
    assert _ulps_apart(out, ref_out) <= most
    out, h = native_ops.rmsnorm(x, w, 1e-5)
    assert h is x and _ulps_apart(out, rmsnorm_ref(x, w, 1e-5)[0]) <= most


def test_rmsnorm_declines_layouts_it_does_not_take():
    x = torch.randn(4, 64)
    w = torch.ones(64)
    assert native_ops.rmsnorm(x.t().contiguous().t(), w, 1e-5) is None  # columns, not rows
    assert native_ops.rmsnorm(x, w.double(), 1e-5) is None
    assert native_ops.rmsnorm(x, w, 1e-5, torch.randn(4, 64).bfloat16()) is None
    assert native_ops.rmsnorm(x, torch.ones(32), 1e-5) is None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,inter", [(1, 1536), (3, 300), (40, 64)])
def test_silu_and_mul_matches_the_reference(rows, inter, dtype):
    g = torch.Generator().manual_seed(rows + inter)
    x = (torch.randn(rows, 2 * inter, generator=g) * 4).to(dtype)
    x[0, :8] = torch.tensor([-120.0, -87.5, -30.0, -1e-3, 0.0, 1e-3, 30.0, 120.0]).to(dtype)  # the exp's ends
    out = native_ops.silu_and_mul(x)
    ref = silu_and_mul_ref(x)
    assert out.shape == ref.shape and torch.isfinite(out).all()
    tiny = ref.float().abs() < 1e-30  # where torch's exp overflows to 0 and ours stops at e^87
    assert (out.float()[tiny].abs() < 1e-30).all()
    assert _ulps_apart(out[~tiny], ref[~tiny]) <= 4  # the exp is ours (within 2 ulp), then rounded
    if dtype == torch.bfloat16:  # silu rounded to bf16 before the product, as torch rounds it
        assert (out[~tiny] != ref[~tiny]).float().mean() < 0.01


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rotary_dim", [64, 32])  # 32: Phi-4-mini's partial rotary
@pytest.mark.parametrize("tokens", [1, 6, 40])
def test_rope_rotates_q_and_k_in_place_exactly_as_the_reference(rotary_dim, tokens, dtype):
    g = torch.Generator().manual_seed(tokens * rotary_dim)
    hq, hk, d = 9, 3, 64
    cos, sin = rope_tables(rotary_dim, 1000, 10000.0, None)
    qkv = torch.randn(tokens, (hq + 2 * hk) * d, generator=g).to(dtype)  # the projection's rows
    q = qkv[:, : hq * d].view(tokens, hq, d)
    k = qkv[:, hq * d: (hq + hk) * d].view(tokens, hk, d)
    positions = torch.randint(0, 1000, (tokens,), generator=g)
    c, s = cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)
    want_q = torch.cat((rotate_ref(q[..., :rotary_dim], c, s), q[..., rotary_dim:]), -1)
    want_k = torch.cat((rotate_ref(k[..., :rotary_dim], c, s), k[..., rotary_dim:]), -1)
    v_before = qkv[:, (hq + hk) * d:].clone()
    assert native_ops.rope_(q, k, cos, sin, positions, rotary_dim)
    assert torch.equal(q, want_q) and torch.equal(k, want_k)  # products rounded before their sum, as torch
    assert torch.equal(qkv[:, (hq + hk) * d:], v_before)


def test_rope_refuses_a_position_past_its_tables():
    cos, sin = rope_tables(64, 100, 10000.0, None)
    q, k = torch.randn(2, 2, 64), torch.randn(2, 1, 64)
    with pytest.raises(IndexError, match="position 100"):
        native_ops.rope_(q, k, cos, sin, torch.tensor([3, 100]), 64)
    assert not native_ops.rope_(q.half(), k.half(), cos, sin, torch.tensor([3, 4]), 64)  # fp16: the torch path


def _generate(model: str, native: bool, dtype: str, prompts, monkeypatch) -> list[dict]:
    monkeypatch.setattr(native_ops, "_loaded", [native_ops.module() if native else None])
    eng = Engine(model, dtype=dtype, max_total_tokens=1024, max_running_requests=4)
    try:
        return eng.generate(input_ids=prompts, return_logprob=True, logprob_start_len=0,
                            sampling_params={"temperature": 0, "max_new_tokens": 6, "ignore_eos": True})
    finally:
        eng.shutdown()


def _assert_same(with_c, plain, tol):
    for a, b in zip(with_c, plain):
        assert a["output_ids"] == b["output_ids"]
        for key in ("input_token_logprobs", "output_token_logprobs"):
            x = [lp for lp, _, _ in a["meta_info"][key] if lp is not None]
            y = [lp for lp, _, _ in b["meta_info"][key] if lp is not None]
            torch.testing.assert_close(torch.tensor(x), torch.tensor(y), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-4), ("bfloat16", 0.05)])
def test_the_model_with_the_c_ops_matches_the_torch_chains(dtype, tol, monkeypatch):
    rng = random.Random(0)
    prompts = [[rng.randrange(100, 40000) for _ in range(n)] for n in (5, 23, 40)]
    _assert_same(_generate("dummy:tiny", True, dtype, prompts, monkeypatch),
                 _generate("dummy:tiny", False, dtype, prompts, monkeypatch), tol)


@pytest.mark.parametrize("kind", ["phi4-mini", "gemma3"])
def test_the_c_ops_match_the_torch_chains_on_other_families(tmp_path, kind, monkeypatch):
    """Partial rotary (the first rotary_dim dims of each head turn), Gemma's (1 + w) and
    sandwich norms with GELU (the torch path) and its local RoPE."""
    from tests.unit.test_model_families import _family, _perturbed

    torch.manual_seed(0)
    _perturbed(_family(kind).float().eval()).save_pretrained(tmp_path)
    prompt = [[random.Random(1).randrange(3, 500) for _ in range(40)]]
    _assert_same(_generate(str(tmp_path), True, "float32", prompt, monkeypatch),
                 _generate(str(tmp_path), False, "float32", prompt, monkeypatch), 1e-4)
