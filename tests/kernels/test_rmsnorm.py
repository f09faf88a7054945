"""Fused residual + RMSNorm: Triton vs ref vs transformers' LlamaRMSNorm."""

import pytest
import torch

from sglang_lite_kernels.rmsnorm import rmsnorm, rmsnorm_ref


def test_ref_matches_llama_rmsnorm():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(48, eps=1e-5)
    torch.nn.init.normal_(norm.weight)
    x = torch.randn(5, 48)
    out, h = rmsnorm_ref(x, norm.weight.detach(), 1e-5)
    torch.testing.assert_close(out, norm(x).detach())
    assert h is x


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
@pytest.mark.parametrize("with_residual", [False, True])
def test_triton_matches_ref(device, dtype, tol, with_residual):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 40, generator=gen).to(device, dtype)  # hidden 40: masked tail
    weight = torch.randn(40, generator=gen).to(device, dtype)
    residual = torch.randn(6, 40, generator=gen).to(device, dtype) if with_residual else None
    out, h = rmsnorm(x, weight, 1e-6, residual)
    want_out, want_h = rmsnorm_ref(x, weight, 1e-6, residual)
    torch.testing.assert_close(h, want_h, atol=tol, rtol=tol)
    torch.testing.assert_close(out, want_out, atol=tol, rtol=tol)


def test_rejects_bad_shapes():
    with pytest.raises(ValueError, match="weight"):
        rmsnorm(torch.randn(2, 8), torch.randn(7), 1e-6)
