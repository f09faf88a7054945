"""Sampling: bitmask, greedy, top-k / top-p / min-p, seeded draws; torch ref and Triton kernel."""

import pytest
import torch

from sglang_lite_kernels.sampling import (
    _inverse_cdf,
    apply_token_bitmask_inplace_ref,
    apply_token_bitmask_inplace_triton,
    exponential_noise,
    rng_keys,
    sample,
    sample_race_ref,
    sample_ref,
    sample_triton,
    unpack_bitmask,
)

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _params(batch, temp=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0, device="cpu"):
    def full(value, dtype):
        return torch.full((batch,), value, dtype=dtype, device=device)

    return dict(
        temperatures=full(temp, torch.float32),
        top_ks=full(top_k, torch.int32),
        top_ps=full(top_p, torch.float32),
        min_ps=full(min_p, torch.float32),
        seeds=full(seed, torch.int64),
        steps=torch.arange(batch, dtype=torch.int64, device=device),
    )


def _pack(allowed: torch.Tensor) -> torch.Tensor:
    """[B, V] bool -> [B, ceil(V/32)] int32, bit i of word i // 32 (the constraints layout)."""
    batch, vocab = allowed.shape
    words = torch.zeros(batch, (vocab + 31) // 32, dtype=torch.int64)
    for i in range(vocab):
        words[:, i // 32] |= allowed[:, i].long() << (i % 32)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def _fmix32(h: int) -> int:
    m = 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    return h ^ (h >> 16)


# ----------------------------------------------------------------------------- reference


def test_unpack_bitmask_matches_bit_layout():
    allowed = torch.rand(3, 70, generator=torch.Generator().manual_seed(0)) < 0.5  # [3, 70]
    allowed[:, 31] = True  # sign bit of word 0
    assert torch.equal(unpack_bitmask(_pack(allowed), 70), allowed)
    # Tokens beyond the bitmask's words are disallowed (padded model vocabulary).
    assert not unpack_bitmask(_pack(allowed), 100)[:, 96:].any()


def test_rng_matches_python_integers():
    seeds = torch.tensor([0, 1, 2**40 + 7, -5], dtype=torch.int64)
    steps = torch.tensor([0, 3, 2**33, 9], dtype=torch.int64)
    keys = rng_keys(seeds, steps)
    for seed, step, key in zip(seeds.tolist(), steps.tolist(), keys.tolist()):
        m = 0xFFFFFFFF
        want = _fmix32((seed & m) ^ 0x9E3779B9)
        for word in ((seed >> 32) & m, step & m, (step >> 32) & m):
            want = _fmix32(want ^ word)
        assert key == want
    noise = exponential_noise(keys, torch.arange(5))  # [4, 5]
    for r, key in enumerate(keys.tolist()):
        for t in range(5):
            u = ((_fmix32(t ^ key) >> 8) + 0.5) / 2**24
            assert noise[r, t].item() == pytest.approx(-torch.log(torch.tensor(u)).item(), rel=1e-6)


def test_greedy_is_argmax_lowest_tie():
    logits = torch.tensor([[0.0, 3.0, 3.0, 1.0], [5.0, -1.0, 5.0, 0.0]])
    assert sample_ref(logits, **_params(2, temp=0.0)).tolist() == [1, 0]


@pytest.mark.parametrize("temp", [0.0, 1.0])
def test_masked_but_one_picks_that_token(temp):
    logits = torch.randn(4, 100, generator=torch.Generator().manual_seed(1))
    logits[:, 7] = -50.0  # the only allowed token is the least likely one
    allowed = torch.zeros(4, 100, dtype=torch.bool)
    allowed[:, 7] = True
    ids = sample_ref(logits, **_params(4, temp=temp, top_p=0.5), bitmask=_pack(allowed))
    assert ids.tolist() == [7] * 4


def test_top_k_one_is_greedy():
    logits = torch.randn(16, 500, generator=torch.Generator().manual_seed(2))
    ids = sample_ref(logits, **_params(16, temp=1.5, top_k=1))
    assert torch.equal(ids, logits.argmax(-1))


def test_seeded_draws_do_not_depend_on_the_batch():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(8, 300, generator=gen)
    params = _params(8, temp=1.0, top_p=0.9)
    params["seeds"] = torch.arange(100, 108)
    ids = sample_ref(logits, **params)
    assert torch.equal(ids, sample_ref(logits, **params))
    perm = torch.randperm(8, generator=gen)
    shuffled = sample_ref(logits[perm], **{k: v[perm] for k, v in params.items()})
    assert torch.equal(shuffled, ids[perm])
    alone = sample_ref(logits[2:3], **{k: v[2:3] for k, v in params.items()})
    assert alone.item() == ids[2].item()


def _expected_law(logits, temp, top_k, top_p, min_p):
    """Probabilities after the filters, by sorting (independent of the implementations)."""
    p = torch.softmax(logits / temp, -1)  # [V]
    order = p.argsort(descending=True)
    kept = torch.zeros_like(p, dtype=torch.bool)
    k = top_k if 0 < top_k < len(p) else len(p)
    kept[order[:k]] = True
    mass = p[order[:k]].cumsum(0) / p[order[:k]].sum()
    cut = int((mass < top_p).sum()) + 1 if top_p < 1 else k
    top_p_kept = torch.zeros_like(kept)
    top_p_kept[order[:cut]] = True
    kept &= top_p_kept & (p >= min_p * p.max())
    q = torch.where(kept, p, 0.0)
    return q / q.sum()


LAWS = [(1.0, 0, 1.0, 0.0), (0.7, 3, 1.0, 0.0), (1.3, 0, 0.8, 0.0), (1.0, 5, 0.9, 0.05)]


@pytest.mark.parametrize("sampler", [sample_ref, sample_race_ref])
@pytest.mark.parametrize("temp,top_k,top_p,min_p", LAWS)
def test_ref_follows_the_distribution(sampler, temp, top_k, top_p, min_p):
    # sample_race_ref draws what the Triton kernel draws (test_triton_matches_race_ref).
    logits = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0])
    draws = 20000
    params = _params(draws, temp=temp, top_k=top_k, top_p=top_p, min_p=min_p, seed=11)
    ids = sampler(logits.expand(draws, -1), **params)
    freq = torch.bincount(ids, minlength=8).float() / draws
    assert torch.allclose(freq, _expected_law(logits, temp, top_k, top_p, min_p), atol=0.015)


def test_large_vocab_draws_follow_the_law_across_blocks():
    # Past 4096 columns the CPU draw scans block sums, then one block: allowed tokens on both
    # sides of block edges (1024-column blocks) must keep their probabilities.
    vocab, draws = 4200, 6000
    allowed_ids = [0, 1023, 1024, 2047, 3000, 4099, 4199]
    logits = torch.zeros(vocab)
    logits[allowed_ids] = torch.tensor([0.0, 1.0, -0.5, 0.5, 0.2, -1.0, 0.8])
    allowed = torch.zeros(1, vocab, dtype=torch.bool)
    allowed[0, allowed_ids] = True
    params = _params(draws, temp=1.0, seed=5)
    ids = sample_ref(logits.expand(draws, -1), **params, bitmask=_pack(allowed).expand(draws, -1))
    assert set(ids.tolist()) <= set(allowed_ids)
    freq = torch.bincount(ids, minlength=vocab).float()[allowed_ids] / draws
    want = torch.softmax(logits[allowed_ids], -1)
    assert torch.allclose(freq, want, atol=0.02)


def test_inverse_cdf_never_picks_a_zero_weight_column():
    # Uniforms at the ends of (0, 1) and weight only next to block edges: rounding must not
    # land on a zero-weight column (a token the grammar or top-p removed).
    weights = torch.zeros(5, 6000)
    weights[:, [1023, 1024, 5000]] = torch.tensor([1e-7, 3.0, 1e-7])
    uniforms = torch.tensor([0.0, 2.0**-24, 0.5, 1 - 2.0**-24, 1.0])
    cols = _inverse_cdf(weights, uniforms, None)
    assert set(cols.tolist()) <= {1023, 1024, 5000}
    assert cols[2].item() == 1024


@pytest.mark.parametrize("sampler", [sample_ref, sample_race_ref])
def test_top_p_needs_more_than_the_first_candidate_block(sampler):
    # A slowly decaying distribution over 5000 tokens (shuffled): top_p 0.8 keeps its 1583
    # likeliest tokens, more than the largest partial top-K (1024) holds, and drops 20% of
    # the mass. Draws stay in the kept set, and reach its part beyond the first 1024.
    vocab, draws = 5000, 3000
    rank = torch.randperm(vocab, generator=torch.Generator().manual_seed(6))  # rank of each token
    logits = -0.001 * rank.float()
    kept = _expected_law(logits, 1.0, 0, 0.8, 0.0) > 0
    assert int(kept.sum()) == 1583
    params = _params(draws, temp=1.0, top_p=0.8, seed=13)
    ids = sampler(logits.expand(draws, -1), **params)
    assert kept[ids].all()
    beyond = (rank[ids] >= 1024).float().mean().item()
    assert 0.15 < beyond < 0.23  # 19% of the kept mass lies past rank 1024


def test_launcher_rejects_bad_arguments():
    logits = torch.zeros(2, 10)
    with pytest.raises(ValueError, match="top_ks"):
        sample_ref(logits, **{**_params(2), "top_ks": torch.zeros(3, dtype=torch.int32)})
    with pytest.raises(ValueError, match="temperatures"):
        sample_ref(logits, **{**_params(2), "temperatures": torch.zeros(2, dtype=torch.int64)})
    with pytest.raises(ValueError, match="bitmask"):
        sample_ref(logits, **_params(2), bitmask=torch.zeros(2, 1, dtype=torch.int64))


# ----------------------------------------------------------------------------- Triton


def _mixed_batch(batch, vocab, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, vocab, generator=gen) * 2  # [B, V]
    allowed = torch.rand(batch, vocab, generator=gen) < 0.6
    allowed[:, 0] = True
    params = dict(
        temperatures=torch.tensor([0.0, 1.0, 0.7, 1.2, 1.0, 0.5, 1.0, 0.9] * (batch // 8)),
        top_ks=torch.tensor([0, 0, 5, 0, 40, 1, 0, 20] * (batch // 8), dtype=torch.int32),
        top_ps=torch.tensor([1.0, 1.0, 1.0, 0.8, 0.9, 1.0, 1.0, 0.5] * (batch // 8)),
        min_ps=torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.05] * (batch // 8)),
        seeds=torch.arange(batch, dtype=torch.int64) * 7919,
        steps=torch.arange(batch, dtype=torch.int64) + 3,
    )
    moved = {k: v.to(device) for k, v in params.items()}
    return logits.to(device), moved, _pack(allowed).to(device)


@pytest.mark.parametrize("use_mask", [False, True])
def test_triton_matches_race_ref(device, use_mask):
    logits, params, bitmask = _mixed_batch(8, 300, device)
    bitmask = bitmask if use_mask else None
    got = sample_triton(logits, **params, bitmask=bitmask, block=128)
    want = sample_race_ref(logits.cpu(), **{k: v.cpu() for k, v in params.items()},
                           bitmask=None if bitmask is None else bitmask.cpu())
    assert got.tolist() == want.tolist()
    assert sample(logits, **params, bitmask=bitmask).shape == (8,)


def test_triton_masked_but_one_and_top_k_one(device):
    logits = torch.randn(4, 100, generator=torch.Generator().manual_seed(1)).to(device)
    allowed = torch.zeros(4, 100, dtype=torch.bool)
    allowed[:, 77] = True
    params = _params(4, temp=1.0, top_p=0.3, device=device)
    assert sample_triton(logits, **params, bitmask=_pack(allowed).to(device), block=64).tolist() == [77] * 4
    greedy = sample_triton(logits, **_params(4, temp=0.0, device=device), block=64)
    top1 = sample_triton(logits, **_params(4, temp=2.0, top_k=1, device=device), block=64)
    assert torch.equal(greedy, logits.argmax(-1)) and torch.equal(top1, greedy)


def test_triton_bitmask_apply_matches_ref(device):
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(3, 200, generator=gen)
    bitmask = _pack(torch.rand(3, 200, generator=gen) < 0.5)
    want = logits.clone()
    apply_token_bitmask_inplace_ref(want, bitmask)
    got = logits.to(device)
    apply_token_bitmask_inplace_triton(got, bitmask.to(device), block=64)
    assert torch.equal(got.cpu(), want)


# ----------------------------------------------------------------------------- GPU, real shapes


@pytest.mark.gpu
@requires_cuda
def test_gpu_sampling_at_vocab_49152():
    logits, params, bitmask = _mixed_batch(64, 49152, "cuda", seed=9)
    got = sample_triton(logits, **params, bitmask=bitmask)
    want = sample_race_ref(logits.cpu(), **{k: v.cpu() for k, v in params.items()},
                           bitmask=bitmask.cpu())
    # fast-math exp/log on GPU may flip a near-tie; the draws must agree almost everywhere.
    assert (got.cpu() == want).float().mean() >= 0.95
    allowed = unpack_bitmask(bitmask.cpu(), 49152)
    assert allowed.gather(1, got.cpu()[:, None]).all()
