"""Token bitmask + temperature / top-k / top-p / min-p sampling, seeded per request.

Semantics (the Triton kernel and ``sample_ref`` implement the same ones):

1. bitmask: bit ``i % 32`` of int32 word ``i // 32`` set = token ``i`` allowed (the
   ``constraints/`` layout, little-endian); a disallowed token's logit becomes -inf. Tokens past
   the bitmask's ``32 * num_words`` (a padded model vocabulary) are disallowed.
2. temperature == 0: greedy argmax (ties: lowest index).
3. else ``s = logits / temperature``, ``p = softmax(s)``, then the kept set is
   * top-k (``0 < k < V``): tokens with ``s >=`` the k-th largest ``s`` (ties at the edge kept);
   * top-p (``p < 1``): of those, the highest-probability tokens whose mass reaches
     ``top_p`` of the top-k mass, as a value threshold (at least one token; ties kept);
   * min-p: tokens with ``p >= min_p * max(p)``.
4. draw a kept token with probability proportional to ``p``, reproducibly from (seed, step):
   the Triton kernel uses the exponential race (``argmax p_i / E_i``, ``E_i ~ Exp(1)`` from a
   counter-based hash of (seed, step, token id)); ``sample_ref``, the CPU path, draws one
   uniform per row from the same hash of (seed, step) and inverts the CDF (one cumsum instead
   of a hash per token). Same law, different draws; ``sample_race_ref`` reproduces the
   kernel's draws in torch for tests. Either way a row's draw depends only on its own logits,
   parameters, seed and step: never on the batch around it or its row position.
"""

from __future__ import annotations

import torch

from sglang_lite_kernels._triton import HAS_TRITON, tl, triton

_M32 = 0xFFFFFFFF
_FMIX_C1 = 0x85EBCA6B
_FMIX_C2 = 0xC2B2AE35
_GOLDEN = 0x9E3779B9


# ----------------------------------------------------------------------------- arguments


def _check_vector(name: str, t: torch.Tensor, batch: int, kind: str, device) -> None:
    if not isinstance(t, torch.Tensor) or t.shape != (batch,):
        shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name}: expected shape ({batch},), got {shape}")
    ok = t.dtype.is_floating_point if kind == "float" else not t.dtype.is_floating_point
    if not ok or t.dtype == torch.bool:
        raise ValueError(f"{name}: expected a {kind} tensor, got {t.dtype}")
    if t.device != device:
        raise ValueError(f"{name}: on {t.device}, logits on {device}")


def _check_sample_args(logits, temperatures, top_ks, top_ps, min_ps, seeds, steps, bitmask):
    if logits.dim() != 2 or not logits.dtype.is_floating_point:
        raise ValueError(f"logits: expected a float [B, V] tensor, got {logits.dtype} {tuple(logits.shape)}")
    batch, device = logits.shape[0], logits.device
    for name, t, kind in (
        ("temperatures", temperatures, "float"),
        ("top_ks", top_ks, "int"),
        ("top_ps", top_ps, "float"),
        ("min_ps", min_ps, "float"),
        ("seeds", seeds, "int"),
        ("steps", steps, "int"),
    ):
        _check_vector(name, t, batch, kind, device)
    if bitmask is not None:
        _check_bitmask(logits, bitmask)
    return batch, logits.shape[1]


def _check_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    if bitmask.dtype != torch.int32 or bitmask.dim() != 2 or bitmask.shape[0] != logits.shape[0]:
        raise ValueError(
            f"bitmask: expected int32 [{logits.shape[0]}, ceil(V/32)], "
            f"got {bitmask.dtype} {tuple(bitmask.shape)}"
        )
    if bitmask.device != logits.device:
        raise ValueError(f"bitmask: on {bitmask.device}, logits on {logits.device}")


# ----------------------------------------------------------------------------- torch reference


_BYTE_BITS = (torch.arange(256)[:, None] >> torch.arange(8)) & 1 != 0  # [256, 8] bool


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[B, W] int32 packed bitmask -> [B, vocab_size] bool (True = allowed)."""
    return _expand_bits(bitmask, vocab_size, _BYTE_BITS, False)


_BYTE_BIAS = torch.zeros(256, 8).masked_fill_(~_BYTE_BITS, float("-inf"))  # [256, 8] fp32


def bitmask_bias(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[B, W] int32 packed bitmask -> [B, vocab_size] fp32: 0 where allowed, -inf elsewhere.

    Adding it masks logits without a per-element branch: on CPU 0.2 ms for 16 x 49152 against
    0.3-1.5 ms for ``where`` on the unpacked bools (the slower the less regular the mask).
    """
    return _expand_bits(bitmask, vocab_size, _BYTE_BIAS, float("-inf"))


def _expand_bits(bitmask: torch.Tensor, vocab_size: int, table: torch.Tensor, disallowed) -> torch.Tensor:
    """One ``table`` [256, 8] row per byte of the bitmask (little-endian host: byte j of a word
    holds bits 8j..8j+7) -> [B, vocab_size]; tokens past the bitmask get ``disallowed``."""
    batch = bitmask.shape[0]
    byte_idx = bitmask.contiguous().view(torch.uint8).reshape(-1).to(torch.int32)  # [B * W * 4]
    out = table.to(bitmask.device).index_select(0, byte_idx).reshape(batch, -1)[:, :vocab_size]
    missing = vocab_size - out.shape[1]
    if missing > 0:
        out = torch.nn.functional.pad(out, (0, missing), value=disallowed)
    return out


def apply_token_bitmask_inplace_ref(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set disallowed logits [B, V] to -inf in place."""
    _check_bitmask(logits, bitmask)
    logits.add_(bitmask_bias(bitmask, logits.shape[1]))


def _mul32(a: torch.Tensor, c: int) -> torch.Tensor:
    # (a * c) mod 2**32 in int64 without overflowing it: split c into 16-bit halves.
    lo = a * (c & 0xFFFF)
    hi = ((a * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & _M32


def _fmix32_i64(h: torch.Tensor) -> torch.Tensor:
    h = h ^ (h >> 16)
    h = _mul32(h, _FMIX_C1)
    h = h ^ (h >> 13)
    h = _mul32(h, _FMIX_C2)
    return h ^ (h >> 16)


def rng_keys(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """[B] int64 seeds and steps -> [B] int64 per-row 32-bit keys (uint32 values)."""
    seeds, steps = seeds.to(torch.int64), steps.to(torch.int64)
    key = _fmix32_i64((seeds & _M32) ^ _GOLDEN)
    key = _fmix32_i64(key ^ ((seeds >> 32) & _M32))
    key = _fmix32_i64(key ^ (steps & _M32))
    return _fmix32_i64(key ^ ((steps >> 32) & _M32))


def _signed32(c: int) -> int:
    return c - (1 << 32) if c >= 1 << 31 else c


def exponential_noise(keys: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """E ~ Exp(1) for each (row key, token id): keys [b], token_ids [V] or [b, n] -> fp32 [b, n].

    int32 arithmetic (wrapping multiply, masked shifts) because it is the CPU hot path.
    """
    keys32 = torch.where(keys >= 1 << 31, keys - (1 << 32), keys).to(torch.int32)
    h = token_ids.to(torch.int32) ^ keys32.unsqueeze(1)  # [b, n]
    h = h ^ ((h >> 16) & 0xFFFF)
    h = h * _signed32(_FMIX_C1)
    h = h ^ ((h >> 13) & 0x7FFFF)
    h = h * _signed32(_FMIX_C2)
    h = h ^ ((h >> 16) & 0xFFFF)
    u = ((h >> 8) & 0xFFFFFF).to(torch.float32).add_(0.5).mul_(2.0**-24)  # (0, 1)
    return u.log_().neg_()


def _top_k_top_p_threshold(s, e, top_ks, top_ps):
    """Value thresholds [b, 1] on s from top-k then top-p, plus the top-K (vals, ids, e) used.

    Grows K until every top-p row's kept set fits, so the common case never sorts the vocab.
    """
    b, vocab = s.shape
    need_k = (top_ks > 0) & (top_ks < vocab)  # [b]
    need_p = top_ps < 1  # [b]
    k = torch.where(need_k, top_ks.to(torch.int64), vocab)  # [b]
    size = min(vocab, max(128, int(k[need_k].max()) if bool(need_k.any()) else 0))
    neg_inf = s.new_full((b, 1), float("-inf"))
    mass_all = e.sum(-1, keepdim=True)  # [b, 1]
    while True:
        if size == vocab:
            vals, ids = torch.sort(s, dim=-1, descending=True)  # [b, V]
        else:
            vals, ids = torch.topk(s, size, dim=-1)  # [b, K] descending
        t_k = torch.where(need_k[:, None], vals.gather(1, (k.clamp(max=size) - 1)[:, None]), neg_inf)
        e_sorted = e.gather(1, ids)  # [b, K]
        mass = (e_sorted * (vals >= t_k)).cumsum(-1)  # [b, K]
        mass_k = _top_k_mass(s, e, t_k, vals, mass, need_k, mass_all)  # [b, 1]
        reached = mass >= top_ps[:, None] * mass_k  # [b, K]
        if size == vocab or bool((reached[:, -1] | ~need_p).all()):
            break
        size = size * 8 if size * 8 <= min(1024, vocab // 4) else vocab
    first = torch.where(reached.any(-1), reached.to(torch.int8).argmax(-1), size - 1)  # [b]
    t_p = torch.where(need_p[:, None], vals.gather(1, first[:, None]), neg_inf)
    return torch.maximum(t_k, t_p), vals, ids, e_sorted


def _top_k_mass(s, e, t_k, vals, mass, need_k, mass_all):
    # Mass of the top-k set: from the top-K alone unless ties at t_k run past column K.
    if bool((vals[:, -1:] < t_k).all()):
        return torch.where(need_k[:, None], mass[:, -1:], mass_all)
    return torch.where(need_k[:, None], (e * (s >= t_k)).sum(-1, keepdim=True), mass_all)


def _probs(logits, temperatures, min_ps):
    """s = logits / temperature [b, V], p = softmax(s), and the min-p drop mask [b, V] (or None).

    One fused softmax: an unfused exp over the -inf of masked tokens takes a slow path on CPU
    (2 ms instead of 0.2 for 16 x 49152).
    """
    s = logits / temperatures.to(torch.float32)[:, None]
    p = torch.softmax(s, -1)
    min_ps = min_ps.to(torch.float32).clamp(max=1.0)[:, None]  # [b, 1]; the max always stays
    drop = p < min_ps * p.amax(-1, keepdim=True) if bool((min_ps > 0).any()) else None
    return s, p, drop


def _sample_rows_ref(logits, temperatures, top_ks, top_ps, min_ps, uniforms):
    """Sampled (temperature > 0) rows: logits [b, V] fp32 -> token ids [b] int64."""
    s, p, drop = _probs(logits, temperatures, min_ps)
    restricted = ((top_ks > 0) & (top_ks < s.shape[1])) | (top_ps < 1)  # [b]
    if bool(restricted.any()):
        thr = _top_k_top_p_threshold(s, p, top_ks, top_ps.to(torch.float32))[0]
        drop = s < thr if drop is None else drop | (s < thr)
    # Always draw in vocabulary order: a row's pick must not depend on which path the rest
    # of the batch sends it down (sorted order would change the token a uniform maps to).
    return _inverse_cdf(p if drop is None else p.masked_fill_(drop, 0.0), uniforms, None)


_CDF_BLOCK = 1024


def _inverse_cdf(weights, uniforms, ids):
    """Draw one column per row with probability proportional to weights [b, n] (>= 0).

    ids [b, n] maps columns to token ids (None: identity). One uniform per row keeps the CPU
    path to a single scan; the Triton kernel's exponential race draws from the same law. The
    scan is two-level over a large vocabulary: block sums pick the block, then one block is
    scanned (a flat cumsum over 49152 columns is the slowest op of a CPU sampling step).
    """
    b, n = weights.shape
    if n <= 4 * _CDF_BLOCK:
        col = _search_cdf(weights.cumsum(-1), uniforms[:, None] * weights.sum(-1, keepdim=True))
    else:
        nb = -(-n // _CDF_BLOCK)
        blocks = torch.nn.functional.pad(weights, (0, nb * _CDF_BLOCK - n)).view(b, nb, _CDF_BLOCK)
        sums = blocks.sum(-1)  # [b, nb]
        cum = sums.cumsum(-1)  # [b, nb]
        target = uniforms[:, None] * cum[:, -1:]  # [b, 1]
        blk = _search_cdf(cum, target)  # [b, 1] a block with weight > 0
        inner = blocks.gather(1, blk[:, :, None].expand(b, 1, _CDF_BLOCK)).squeeze(1)  # [b, block]
        before = torch.where(blk > 0, cum.gather(1, (blk - 1).clamp(min=0)), 0.0)  # [b, 1] <= target
        rest = target - before  # [b, 1] >= 0, so the pick inside the block has weight
        col = blk * _CDF_BLOCK + _search_cdf(inner.cumsum(-1), rest)
    return (col if ids is None else ids.gather(1, col)).squeeze(1)


def _search_cdf(cum, target):
    """First column whose running sum exceeds target [b, 1], never past the last column
    with weight (rounding can put target at or beyond the total) -> [b, 1]."""
    col = torch.searchsorted(cum, target, right=True)
    last = torch.searchsorted(cum, cum[:, -1:].contiguous())  # first column reaching the total
    return torch.minimum(col, last)


def uniforms_from_keys(keys: torch.Tensor) -> torch.Tensor:
    """[b] row keys -> [b] fp32 uniforms in (0, 1): one draw per (seed, step)."""
    return ((_fmix32_i64(keys ^ _GOLDEN) >> 8).to(torch.float32) + 0.5) * 2.0**-24


def _kept_weights_ref(logits, temperatures, top_ks, top_ps, min_ps):
    """[b, V] probabilities of the kept tokens (0 elsewhere), full vocabulary."""
    s, p, drop = _probs(logits, temperatures, min_ps)
    thr = _top_k_top_p_threshold(s, p, top_ks, top_ps.to(torch.float32))[0]  # [b, 1]
    return p.masked_fill_(s < thr if drop is None else drop | (s < thr), 0.0)


def sample_race_ref(logits, temperatures, top_ks, top_ps, min_ps, seeds, steps, bitmask=None):
    """The Triton kernel's exponential race in torch (slow, for tests): same draws. -> [B]."""
    _check_sample_args(logits, temperatures, top_ks, top_ps, min_ps, seeds, steps, bitmask)
    logits = logits.float()
    if bitmask is not None:
        logits = logits + bitmask_bias(bitmask, logits.shape[1])
    weights = _kept_weights_ref(logits, temperatures.clamp(min=1e-30), top_ks, top_ps, min_ps)
    token_ids = torch.arange(logits.shape[1], device=logits.device)
    noise = exponential_noise(rng_keys(seeds, steps), token_ids)  # [B, V]
    score = torch.where(weights > 0, weights / noise, -1.0)  # [B, V]
    return torch.where(temperatures > 0, score.argmax(-1), logits.argmax(-1))


def sample_ref(
    logits: torch.Tensor,
    temperatures: torch.Tensor,
    top_ks: torch.Tensor,
    top_ps: torch.Tensor,
    min_ps: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    bitmask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Plain-torch sampler (the engine's CPU sampler): see the module docstring. -> [B] int64.

    Vectorized over rows; all-greedy batches cost one argmax, and top-k / top-p use a partial
    top-K instead of a full sort whenever the kept set fits in it.
    """
    _check_sample_args(logits, temperatures, top_ks, top_ps, min_ps, seeds, steps, bitmask)
    logits = logits.float()
    if bitmask is not None:
        logits = logits + bitmask_bias(bitmask, logits.shape[1])
    rows = (temperatures > 0).nonzero().squeeze(1)  # [b]
    if rows.numel() == 0:
        return logits.argmax(-1)  # [B] greedy; ties take the lowest index
    if rows.numel() == logits.shape[0]:  # no greedy rows: no argmax, no row copies
        return _sample_rows_ref(logits, temperatures, top_ks, top_ps, min_ps,
                                uniforms_from_keys(rng_keys(seeds, steps)))
    uniforms = uniforms_from_keys(rng_keys(seeds[rows], steps[rows]))  # [b]
    picked = _sample_rows_ref(
        logits[rows], temperatures[rows], top_ks[rows], top_ps[rows], min_ps[rows], uniforms
    )
    return logits.argmax(-1).index_copy(0, rows, picked)


# ----------------------------------------------------------------------------- Triton


@triton.jit
def _fmix32(h):
    h ^= h >> 16
    h *= 0x85EBCA6B
    h ^= h >> 13
    h *= 0xC2B2AE35
    h ^= h >> 16
    return h


@triton.jit
def _row_key(seed, step):
    key = _fmix32(seed.to(tl.uint32) ^ 0x9E3779B9)
    key = _fmix32(key ^ (seed >> 32).to(tl.uint32))
    key = _fmix32(key ^ step.to(tl.uint32))
    return _fmix32(key ^ (step >> 32).to(tl.uint32))


@triton.jit
def _exp_noise(offs, key):
    h = _fmix32(offs.to(tl.uint32) ^ key)
    u = ((h >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
    return -tl.log(u)


@triton.jit
def _ordered_key(x):
    # fp32 -> int32 whose signed order is the float order.
    bits = x.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _masked_logits(row_logits, row_mask, n_words, offs, V, HAS_MASK: tl.constexpr):
    logit = tl.load(row_logits + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
    if HAS_MASK:
        words = offs // 32
        word = tl.load(row_mask + words, mask=(offs < V) & (words < n_words), other=0)
        logit = tl.where(((word >> (offs % 32)) & 1) != 0, logit, float("-inf"))
    return logit


@triton.jit
def _argmax_pass(row_logits, row_mask, n_words, V, HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    best = tl.full((), float("-inf"), tl.float32)
    best_idx = tl.full((), 0, tl.int32)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        logit = _masked_logits(row_logits, row_mask, n_words, offs, V, HAS_MASK)
        blk_max = tl.max(logit, 0)
        better = blk_max > best
        best_idx = tl.where(better, start + tl.argmax(logit, 0), best_idx)
        best = tl.where(better, blk_max, best)
    return best, best_idx


@triton.jit
def _topk_threshold(row_logits, row_mask, n_words, V, temp, k, s_max,
                    HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    # Largest ordered key t with count(key(s) >= t) >= k: the k-th largest s, by bisection.
    lo = tl.full((), -2147483648, tl.int64)
    hi = _ordered_key(s_max).to(tl.int64) + 1
    for _ in range(32):
        mid = (lo + hi) >> 1
        count = tl.full((), 0, tl.int32)
        for start in range(0, V, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            s = _masked_logits(row_logits, row_mask, n_words, offs, V, HAS_MASK) / temp
            count += tl.sum(((_ordered_key(s) >= mid) & (offs < V)).to(tl.int32), 0)
        ok = count >= k
        lo = tl.where(ok, mid, lo)
        hi = tl.where(ok, hi, mid)
    return lo


@triton.jit
def _mass_ge(row_logits, row_mask, n_words, V, temp, s_max, t,
             HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    mass = tl.full((), 0.0, tl.float32)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        s = _masked_logits(row_logits, row_mask, n_words, offs, V, HAS_MASK) / temp
        e = tl.exp(s - s_max)
        mass += tl.sum(tl.where(_ordered_key(s) >= t, e, 0.0), 0)
    return mass


@triton.jit
def _topp_threshold(row_logits, row_mask, n_words, V, temp, top_p, s_max, thr,
                    HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    # Largest t >= thr whose mass(key(s) >= t) reaches top_p of mass(key(s) >= thr).
    target = top_p * _mass_ge(row_logits, row_mask, n_words, V, temp, s_max, thr, HAS_MASK, BLOCK)
    lo = thr
    hi = _ordered_key(s_max).to(tl.int64) + 1
    for _ in range(32):
        mid = (lo + hi) >> 1
        ok = _mass_ge(row_logits, row_mask, n_words, V, temp, s_max, mid, HAS_MASK, BLOCK) >= target
        lo = tl.where(ok, mid, lo)
        hi = tl.where(ok, hi, mid)
    return lo


@triton.jit
def _race_pass(row_logits, row_mask, n_words, V, temp, s_max, thr, min_p, key,
               HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    best = tl.full((), -1.0, tl.float32)
    best_idx = tl.full((), 0, tl.int32)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        s = _masked_logits(row_logits, row_mask, n_words, offs, V, HAS_MASK) / temp
        e = tl.exp(s - s_max)
        keep = (_ordered_key(s) >= thr) & (e >= min_p) & (e > 0.0) & (offs < V)
        score = tl.where(keep, e / _exp_noise(offs, key), -1.0)
        blk_max = tl.max(score, 0)
        better = blk_max > best
        best_idx = tl.where(better, start + tl.argmax(score, 0), best_idx)
        best = tl.where(better, blk_max, best)
    return best_idx


@triton.jit
def _sample_kernel(
    logits_ptr, logits_stride, temps_ptr, top_ks_ptr, top_ps_ptr, min_ps_ptr, seeds_ptr,
    steps_ptr, mask_ptr, mask_stride, n_words, out_ptr, V,
    HAS_MASK: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    row_logits = logits_ptr + row.to(tl.int64) * logits_stride
    row_mask = mask_ptr + row.to(tl.int64) * mask_stride
    temp = tl.load(temps_ptr + row).to(tl.float32)
    best, best_idx = _argmax_pass(row_logits, row_mask, n_words, V, HAS_MASK, BLOCK)
    if temp > 0:
        s_max = best / temp
        k = tl.load(top_ks_ptr + row)
        top_p = tl.load(top_ps_ptr + row).to(tl.float32)
        thr = tl.full((), -2147483648, tl.int64)
        if (k > 0) & (k < V):
            thr = _topk_threshold(row_logits, row_mask, n_words, V, temp, k, s_max, HAS_MASK, BLOCK)
        if top_p < 1.0:
            thr = _topp_threshold(row_logits, row_mask, n_words, V, temp, top_p, s_max, thr,
                                  HAS_MASK, BLOCK)
        min_p = tl.minimum(tl.load(min_ps_ptr + row).to(tl.float32), 1.0)  # the max always stays
        key = _row_key(tl.load(seeds_ptr + row).to(tl.int64), tl.load(steps_ptr + row).to(tl.int64))
        idx = _race_pass(row_logits, row_mask, n_words, V, temp, s_max, thr, min_p, key,
                         HAS_MASK, BLOCK)
        tl.store(out_ptr + row, idx.to(tl.int64))
    else:
        tl.store(out_ptr + row, best_idx.to(tl.int64))


def _check_triton_tensors(logits: torch.Tensor, vectors, bitmask) -> None:
    if not HAS_TRITON:
        raise RuntimeError("sample_triton: triton is not installed")
    if logits.stride(1) != 1:
        raise ValueError(f"logits: last dim must be contiguous, strides {logits.stride()}")
    for name, t in vectors:
        if t.stride(0) != 1 and t.numel() > 1:
            raise ValueError(f"{name}: must be contiguous, stride {t.stride()}")
    if bitmask is not None and bitmask.stride(1) != 1:
        raise ValueError(f"bitmask: last dim must be contiguous, strides {bitmask.stride()}")


def sample_triton(
    logits: torch.Tensor,
    temperatures: torch.Tensor,
    top_ks: torch.Tensor,
    top_ps: torch.Tensor,
    min_ps: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    bitmask: torch.Tensor | None = None,
    block: int = 1024,
) -> torch.Tensor:
    """One fused Triton launch, one program per row, no host synchronization. -> [B] int64."""
    batch, vocab = _check_sample_args(logits, temperatures, top_ks, top_ps, min_ps, seeds, steps, bitmask)
    vectors = (("temperatures", temperatures), ("top_ks", top_ks), ("top_ps", top_ps),
               ("min_ps", min_ps), ("seeds", seeds), ("steps", steps))
    _check_triton_tensors(logits, vectors, bitmask)
    out = torch.empty(batch, dtype=torch.int64, device=logits.device)
    if batch == 0:
        return out
    has_mask = bitmask is not None
    mask = bitmask if has_mask else torch.zeros((1, 1), dtype=torch.int32, device=logits.device)
    _sample_kernel[(batch,)](
        logits, logits.stride(0), temperatures, top_ks, top_ps, min_ps, seeds, steps,
        mask, mask.stride(0), mask.shape[1], out, vocab,
        HAS_MASK=has_mask, BLOCK=min(block, triton.next_power_of_2(vocab)),
    )
    return out


@triton.jit
def _apply_bitmask_kernel(logits_ptr, logits_stride, mask_ptr, mask_stride, n_words, V,
                          BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    words = offs // 32
    word = tl.load(mask_ptr + row * mask_stride + words, mask=(offs < V) & (words < n_words), other=0)
    allowed = ((word >> (offs % 32)) & 1) != 0
    tl.store(logits_ptr + row * logits_stride + offs, float("-inf"), mask=(offs < V) & ~allowed)


def apply_token_bitmask_inplace_triton(logits: torch.Tensor, bitmask: torch.Tensor, block: int = 1024) -> None:
    """Set disallowed logits [B, V] to -inf in place (one Triton launch)."""
    if logits.dim() != 2 or not logits.dtype.is_floating_point:
        raise ValueError(f"logits: expected a float [B, V] tensor, got {logits.dtype} {tuple(logits.shape)}")
    _check_bitmask(logits, bitmask)
    _check_triton_tensors(logits, (), bitmask)
    batch, vocab = logits.shape
    if batch == 0:
        return
    block = min(block, triton.next_power_of_2(vocab))
    _apply_bitmask_kernel[(batch, triton.cdiv(vocab, block))](
        logits, logits.stride(0), bitmask, bitmask.stride(0), bitmask.shape[1], vocab, BLOCK=block
    )


# ----------------------------------------------------------------------------- dispatch


def sample(
    logits: torch.Tensor,
    temperatures: torch.Tensor,
    top_ks: torch.Tensor,
    top_ps: torch.Tensor,
    min_ps: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    bitmask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The Triton kernel for CUDA tensors, ``sample_ref`` otherwise. -> [B] int64."""
    if logits.is_cuda and HAS_TRITON:
        return sample_triton(logits, temperatures, top_ks, top_ps, min_ps, seeds, steps, bitmask)
    return sample_ref(logits, temperatures, top_ks, top_ps, min_ps, seeds, steps, bitmask)
