"""The model with its fused Triton ops (what CUDA runs; here through the interpreter) against
the plain-torch model on the same weights: prefill and decode, logits and greedy tokens."""

import random

import pytest
import torch

from sglang_lite import Engine
from sglang_lite_kernels._triton import HAS_TRITON

pytestmark = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")


def test_fused_ops_match_plain_torch_end_to_end():
    rng = random.Random(0)
    prompts = [[rng.randrange(100, 40000) for _ in range(n)] for n in (5, 23, 40)]
    params = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}
    outs = {}
    for fused in (False, True):
        eng = Engine("dummy:tiny", dtype="float32", max_total_tokens=1024, max_running_requests=4)
        try:
            eng.model.use_fused_ops(fused)
            outs[fused] = eng.generate(input_ids=prompts, sampling_params=params, return_logprob=True,
                                       logprob_start_len=0)
        finally:
            eng.shutdown()
    for plain, fused in zip(outs[False], outs[True]):
        assert fused["output_ids"] == plain["output_ids"]
        for key in ("input_token_logprobs", "output_token_logprobs"):
            a = [lp for lp, _, _ in plain["meta_info"][key] if lp is not None]
            b = [lp for lp, _, _ in fused["meta_info"][key] if lp is not None]
            torch.testing.assert_close(torch.tensor(b), torch.tensor(a), rtol=1e-4, atol=1e-4)


def test_use_fused_ops_reaches_every_fused_module():
    eng = Engine("dummy:tiny", max_total_tokens=256, max_running_requests=2)
    try:
        flagged = [m for m in eng.model.modules() if hasattr(m, "fused")]
        # per layer: 2 norms + MLP; plus the final norm and the shared RoPE
        assert len(flagged) == 3 * eng.model_config.num_layers + 2
        eng.model.use_fused_ops(True)
        assert all(m.fused is True for m in flagged)
    finally:
        eng.shutdown()


@pytest.mark.parametrize("kind", ["phi4-mini", "gemma3"])
def test_fused_ops_match_plain_torch_on_other_families(tmp_path, kind):
    """Partial rotary through the fused RoPE kernel (a view of each head), and Gemma's
    (1 + w) norms, sandwich norms and local RoPE through the fused norm kernels."""
    from tests.unit.test_model_families import _family, _perturbed

    torch.manual_seed(0)
    _perturbed(_family(kind).float().eval()).save_pretrained(tmp_path)
    prompt = [random.Random(1).randrange(3, 500) for _ in range(40)]
    outs = {}
    for fused in (False, True):
        eng = Engine(str(tmp_path), dtype="float32", max_total_tokens=512, max_running_requests=2)
        try:
            eng.model.use_fused_ops(fused)
            outs[fused] = eng.generate(input_ids=prompt, return_logprob=True, logprob_start_len=0,
                                       sampling_params={"temperature": 0, "max_new_tokens": 4, "ignore_eos": True})
        finally:
            eng.shutdown()
    assert outs[True]["output_ids"] == outs[False]["output_ids"]
    for key in ("input_token_logprobs", "output_token_logprobs"):
        a = [lp for lp, _, _ in outs[False]["meta_info"][key] if lp is not None]
        b = [lp for lp, _, _ in outs[True]["meta_info"][key] if lp is not None]
        torch.testing.assert_close(torch.tensor(b), torch.tensor(a), rtol=1e-4, atol=1e-4)
