"""The model's fused elementwise kernels (SiLU-and-mul, RoPE in place) against their torch
references, and the references against transformers."""

import pytest
import torch

from sglang_lite_kernels.activation import silu_and_mul, silu_and_mul_ref
from sglang_lite_kernels.rope import apply_rope_, apply_rope_ref


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
@pytest.mark.parametrize("tokens,inter", [(5, 40), (3, 2048 + 24)])  # masked tails, several blocks
def test_silu_and_mul_matches_ref(device, dtype, tol, tokens, inter):
    gen = torch.Generator().manual_seed(0)
    x = (3 * torch.randn(tokens, 2 * inter, generator=gen)).to(device, dtype)
    torch.testing.assert_close(silu_and_mul(x), silu_and_mul_ref(x), atol=tol, rtol=tol)


def test_silu_and_mul_ref_is_llama_mlp_activation():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    mlp = LlamaMLP(LlamaConfig(hidden_size=16, intermediate_size=24, num_attention_heads=2, num_key_value_heads=2)).eval()
    x = torch.randn(4, 16)
    gate_up = torch.cat([x @ mlp.gate_proj.weight.T, x @ mlp.up_proj.weight.T], dim=-1)
    with torch.no_grad():
        torch.testing.assert_close(mlp.down_proj(silu_and_mul_ref(gate_up)), mlp(x))


def test_silu_and_mul_rejects_bad_input():
    with pytest.raises(ValueError, match="x: expected"):
        silu_and_mul(torch.randn(2, 7))


def _tables(max_pos: int, half: int):
    inv = 1.0 / (10000 ** (torch.arange(half, dtype=torch.float32) / half))
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32), inv)
    return freqs.cos(), freqs.sin()


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
@pytest.mark.parametrize("hq,hkv,head_dim", [(4, 2, 16), (9, 3, 64), (8, 1, 10), (3, 3, 32)])
def test_rope_in_place_on_qkv_views_matches_ref(device, dtype, tol, hq, hkv, head_dim):
    tokens = 7
    gen = torch.Generator().manual_seed(1)
    qkv = torch.randn(tokens, (hq + 2 * hkv) * head_dim, generator=gen).to(device, dtype)
    q, k, v = qkv.split([hq * head_dim, hkv * head_dim, hkv * head_dim], dim=-1)
    q, k = q.view(tokens, hq, head_dim), k.view(tokens, hkv, head_dim)  # strided, as in the model
    cos, sin = (t.to(device) for t in _tables(300, head_dim // 2))
    positions = torch.tensor([0, 1, 5, 299, 17, 17, 128], device=device)
    want_q, want_k = apply_rope_ref(q, k, cos, sin, positions)
    v_before = v.clone()
    apply_rope_(q, k, cos, sin, positions)
    torch.testing.assert_close(q, want_q, atol=tol, rtol=tol)
    torch.testing.assert_close(k, want_k, atol=tol, rtol=tol)
    assert torch.equal(v, v_before)  # the v part of the buffer is untouched


def test_rope_ref_matches_transformers():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    tokens, heads, head_dim = 6, 4, 16
    q, k = torch.randn(tokens, heads, head_dim), torch.randn(tokens, 2, head_dim)
    cos, sin = _tables(64, head_dim // 2)
    positions = torch.tensor([3, 0, 9, 63, 1, 2])
    got_q, got_k = apply_rope_ref(q, k, cos, sin, positions)
    full_cos = torch.cat([cos[positions]] * 2, dim=-1)[None]  # HF: [1, T, D], heads on dim 1
    full_sin = torch.cat([sin[positions]] * 2, dim=-1)[None]
    want_q, want_k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], full_cos, full_sin)
    torch.testing.assert_close(got_q, want_q[0].transpose(0, 1))
    torch.testing.assert_close(got_k, want_k[0].transpose(0, 1))


def test_rope_rejects_bad_input():
    cos, sin = _tables(8, 4)
    q, k = torch.randn(2, 2, 8), torch.randn(2, 1, 8)
    with pytest.raises(ValueError, match="positions"):
        apply_rope_(q, k, cos, sin, torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="cos_cache"):
        apply_rope_(q, k, cos.double(), sin, torch.tensor([0, 1]))
