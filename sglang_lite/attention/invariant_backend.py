"""Batch-invariant paged attention (``--deterministic``): a token's output depends only on
its own query and its request's keys, never on the batch, the chunk it was prefilled in,
or whether its prefix came from the radix cache.

Every new token is one query unit, whether it is a decode step or a row of a prefill
chunk. Its keys are cut into blocks of ``BLOCK`` positions counted from position 0, and
every matmul has one fixed shape: scores [group, head_dim] x [head_dim, BLOCK] and
weighted values [group, BLOCK] x [BLOCK, head_dim], batched over (unit, kv head, block)
(``check_batch_invariance`` verifies at start that a batched matmul's result for one
element does not depend on the batch count). The softmax uses the unit's maximum over all
its blocks, and the blocks' sums are added in block order in a plain loop, so the
association of every sum is fixed. Blocks past a unit's position (padding to the longest
unit of the step) are masked entirely and add exact zeros. exp runs in float64 (see
``model/batch_invariant.py``).

Slower than the torch backend (each decode row pays its own query unit; keys are copied
per unit); this is the price of the option, not the default.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sglang_lite.attention.base import AttentionBackend, ForwardBatch
from sglang_lite.mem.kv_pool import KVPool

BLOCK = 64  # key positions per block
MAX_PAIRS = 1024  # (unit, block) pairs per batched matmul: bounds the copied keys (~50 MB fp32)


@dataclass(slots=True)
class _Group:
    """Consecutive query units computed together: token rows [start, stop)."""

    start: int
    stop: int
    slots: torch.Tensor  # [U, NB * BLOCK] pool slots of key positions (masked ones point at slot 0)
    positions: torch.Tensor  # [U, 1] each unit's absolute position
    num_blocks: int
    windowed: dict[int | None, torch.Tensor] = field(default_factory=dict)  # window -> [U, 1, NB, 1, BLOCK]

    def mask_for(self, window: int | None) -> torch.Tensor:
        if window not in self.windowed:
            kv_pos = torch.arange(self.num_blocks * BLOCK, device=self.slots.device)[None, :]
            visible = kv_pos <= self.positions
            if window is not None:
                visible &= kv_pos > self.positions - window
            u = visible.shape[0]
            self.windowed[window] = visible.view(u, 1, self.num_blocks, 1, BLOCK)
        return self.windowed[window]


class BatchInvariantAttentionBackend(AttentionBackend):
    def __init__(self, kv_pool: KVPool):
        self.kv_pool = kv_pool
        self._groups: list[_Group] = []

    def init_forward_metadata(self, batch: ForwardBatch) -> None:
        rows, positions = [], []
        for row, prefix, n in zip(batch.req_pool_indices_cpu, batch.prefix_lens_cpu, batch.extend_lens_cpu):
            rows.extend([row] * n)
            positions.extend(range(prefix, prefix + n))
        self._groups = [_build_group(batch, rows, positions, a, b) for a, b in _split(positions)]

    def forward(self, q, k, v, layer_id: int, batch: ForwardBatch, sm_scale: float, *,
                sliding_window: int | None = None, logit_softcap: float | None = None) -> torch.Tensor:
        self.kv_pool.store(layer_id, batch.out_cache_loc, k, v)
        outs = [_attend(q[g.start : g.stop], *self.kv_pool.gather_slots(layer_id, g.slots.reshape(-1)), g,
                        sm_scale, sliding_window, logit_softcap)
                for g in self._groups]
        return outs[0] if len(outs) == 1 else torch.cat(outs)


def _split(positions: list[int]) -> list[tuple[int, int]]:
    """Token rows cut into groups of at most MAX_PAIRS (unit, block) pairs."""
    groups, start, widest = [], 0, 0
    for i, pos in enumerate(positions):
        blocks = pos // BLOCK + 1
        if i > start and (i - start + 1) * max(widest, blocks) > MAX_PAIRS:
            groups.append((start, i))
            start, widest = i, 0
        widest = max(widest, blocks)
    groups.append((start, len(positions)))
    return groups


def _build_group(batch: ForwardBatch, rows: list[int], positions: list[int], a: int, b: int) -> _Group:
    device = batch.req_to_token.device
    pos = torch.tensor(positions[a:b], dtype=torch.long, device=device)[:, None]
    num_blocks = max(positions[a:b]) // BLOCK + 1
    kv_pos = torch.arange(num_blocks * BLOCK, device=device)
    width = batch.req_to_token.shape[1]
    row_t = torch.tensor(rows[a:b], dtype=torch.long, device=device)[:, None]
    slots = batch.req_to_token[row_t, kv_pos.clamp(max=width - 1)[None, :]].long()
    slots = torch.where(kv_pos[None, :] <= pos, slots, 0)
    return _Group(a, b, slots, pos, num_blocks)


def _attend(q, k, v, g: _Group, sm_scale: float, window: int | None, softcap: float | None):
    # q: [U, Hq, D]; k/v: [U * NB * BLOCK, Hkv, D], the group's key positions (the pool's
    # gather, decoded from 8-bit codes where the pool stores them). Batched over (unit, kv head, block).
    u, hq, d = q.shape
    hkv = k.shape[1]
    group, nb = hq // hkv, g.num_blocks
    # Contiguous whatever the batch: for one unit and one block the permuted reshape stays a
    # strided view (for more it is a copy), and a GEMM fed other strides may take another
    # kernel: on an AVX512 EPYC a decode step alone and in a batch then differed in last bits.
    keys = k.view(u, nb, BLOCK, hkv, d).permute(0, 3, 1, 4, 2).reshape(-1, d, BLOCK).float().contiguous()
    vals = v.view(u, nb, BLOCK, hkv, d).permute(0, 3, 1, 2, 4).reshape(-1, BLOCK, d).float().contiguous()
    qs = q.view(u, hkv, 1, group, d).expand(u, hkv, nb, group, d).reshape(-1, group, d).float()
    scores = torch.bmm(qs, keys).view(u, hkv, nb, group, BLOCK) * sm_scale
    if softcap is not None:
        scores = torch.tanh(scores.double() / softcap).float() * softcap
    scores = scores.masked_fill(~g.mask_for(window), float("-inf"))
    top = scores.amax(dim=(2, 4), keepdim=True)  # max is exact in any order
    probs = torch.exp((scores - top).double()).float()
    sums = probs.sum(-1)  # [U, Hkv, NB, group], each over BLOCK values
    weighted = torch.bmm(probs.view(-1, group, BLOCK), vals).view(u, hkv, nb, group, d)
    acc, den = weighted[:, :, 0], sums[:, :, 0]
    for blk in range(1, nb):  # in block order: one fixed association
        acc = acc + weighted[:, :, blk]
        den = den + sums[:, :, blk]
    return (acc / den[..., None]).reshape(u, hq, d).to(q.dtype)
