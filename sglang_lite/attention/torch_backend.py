"""Plain-torch paged attention: gather each request's k/v through req_to_token, then
matmul/SDPA. Runs on CPU and GPU; the reference the Triton backend is checked against.

Rows with one new token (decode) are batched into one padded gather; rows with several
(prefill / chunk) are processed one request at a time with a causal mask offset by the
cached prefix. On a CPU, eager, decode rows whose layer the C kernel takes (a pool in the
model's fp32 / bf16, no window, no soft-cap: ``native_decode.py``) attend in place through
their page tables, each to its own length, and extend rows through their slots where its
vector code takes the head size; otherwise a decode batch whose lengths differ
widely is cut into a few batches of similar lengths (by length rank), so the padding gathered
and attended shrinks.
Grouped-query attention never repeats k/v: decode folds the q heads of a kv head into the
query axis, extend lets SDPA broadcast (``enable_gqa``).

Sliding-window layers narrow the mask (their KV stays in the pool: correct, not smaller);
soft-capped scores (Gemma 2) need the scores themselves, so those layers compute attention
by hand instead of through SDPA.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from sglang_lite.attention import native_decode
from sglang_lite.attention.base import AttentionBackend, ForwardBatch
from sglang_lite.mem.kv_pool import KVPool


@dataclass(slots=True)
class _DecodeRows:
    token_rows: torch.Tensor  # [Bd] rows of the token axis
    pages: torch.Tensor  # [Bd * max_pages] KV pages, row-major (padding points at page 0)
    mask: torch.Tensor  # [Bd, 1, 1, max_pages * page_size] True = attend
    padded_len: int
    seq_lens: torch.Tensor  # [Bd, 1, 1, 1]
    page_table: torch.Tensor  # [Bd, max_pages] int64, contiguous (the C kernel reads it)
    lens: torch.Tensor  # [Bd] int64, contiguous
    windowed: dict[int, torch.Tensor] = field(default_factory=dict)  # window -> mask, built on first use

    def mask_for(self, window: int | None) -> torch.Tensor:
        if window is None:
            return self.mask
        if window not in self.windowed:
            kv_pos = torch.arange(self.padded_len, device=self.mask.device)
            self.windowed[window] = self.mask & (kv_pos >= self.seq_lens - window)  # query at seq_len - 1
        return self.windowed[window]


@dataclass(slots=True)
class _ExtendRow:
    start: int
    length: int
    slots: torch.Tensor  # [L] pool slots of the whole visible sequence
    mask: torch.Tensor  # [n, L] True = attend
    q_pos: torch.Tensor  # [n, 1] absolute positions of the new tokens
    windowed: dict[int, torch.Tensor] = field(default_factory=dict)

    def mask_for(self, window: int | None) -> torch.Tensor:
        if window is None:
            return self.mask
        if window not in self.windowed:
            kv_pos = torch.arange(self.mask.shape[1], device=self.mask.device)
            self.windowed[window] = self.mask & (kv_pos > self.q_pos - window)
        return self.windowed[window]


# Decode batches of at least this many rows are cut by length (eager, on a CPU) into batches
# of about DECODE_PART_ROWS rows of similar lengths (at most DECODE_PARTS of them), where that
# gathers at most PARTS_BELOW of the pages one padded batch would. Measured on SDPA over
# gathered pages (2 cores, bf16, lengths 40-384): 32 rows in one batch 5.1 ms a layer, in 4
# parts 1.3; 64 rows 11.8 ms, in 8 parts 2.6; equal lengths gain little (1.5 ms either way at 32).
DECODE_PARTS_FROM = 8
DECODE_PART_ROWS = 8
DECODE_PARTS = 8
PARTS_BELOW = 0.8


class TorchAttentionBackend(AttentionBackend):
    def __init__(self, kv_pool: KVPool):
        self.kv_pool = kv_pool
        self._decode: _DecodeRows | None = None
        # the decode rows by length (eager CPU steps): the groups, and their rows once a layer
        # asks (a step whose attention runs in C never builds them)
        self._part_groups: list[list[int]] = []
        self._decode_parts: list[_DecodeRows] | None = None
        self._batch: ForwardBatch | None = None
        self._extend: list[_ExtendRow] = []

    def init_forward_metadata(self, batch: ForwardBatch) -> None:
        device = batch.input_ids.device
        decode_idx = [i for i, n in enumerate(batch.extend_lens_cpu) if n == 1]
        page_size = self.kv_pool.page_size
        self._decode = _build_decode_rows(batch, decode_idx, page_size, device) if decode_idx else None
        self._part_groups = _length_parts(batch, decode_idx, page_size) if device.type == "cpu" else []
        self._decode_parts, self._batch = None, batch
        self._extend = []
        start = 0  # rows on the token axis, from the host copy of extend_lens
        for i, n in enumerate(batch.extend_lens_cpu):
            if n > 1:
                self._extend.append(_build_extend_row(batch, i, start, device))
            start += n

    def step_tensors(self) -> list[torch.Tensor]:
        d = self._decode
        return [] if d is None else [d.token_rows, d.pages, d.mask, d.seq_lens]

    def forward(self, q, k, v, layer_id: int, batch: ForwardBatch, sm_scale: float, *,
                sliding_window: int | None = None, logit_softcap: float | None = None) -> torch.Tensor:
        pool = self.kv_pool
        pool.store(layer_id, batch.out_cache_loc, k, v)
        how = _How(sm_scale, sliding_window, logit_softcap)
        d = self._decode
        # The C kernel reads the pool in place, each row to its own length (native_decode.py).
        native = (d is not None and how.window is None and how.softcap is None and not pool.format.scaled
                  and native_decode.usable(q, pool.k_buffers[layer_id], pool.dtype))
        # A compiled step (compiled_decode.py) traces the one padded batch: its sizes are symbolic.
        parts = self._parts() if self._part_groups and not native and not torch.compiler.is_compiling() else None
        if not self._extend and d is not None and parts is None:  # all decode, in order
            return self._native(q, layer_id, how) if native else _decode_attention(q, pool, layer_id, d, how)
        out = torch.empty_like(q)
        if native:
            out[d.token_rows] = self._native(q[d.token_rows], layer_id, how)
        else:
            for rows in parts or ([d] if d is not None else []):
                out[rows.token_rows] = _decode_attention(q[rows.token_rows], pool, layer_id, rows, how)
        native_extend = (self._extend and how.window is None and how.softcap is None and not pool.format.scaled
                         and native_decode.extend_usable(q, pool.k_buffers[layer_id], pool.dtype))
        for row in self._extend:
            qs = q[row.start : row.start + row.length]
            if native_extend:
                out[row.start : row.start + row.length] = native_decode.extend_attention(
                    qs, pool.k_buffers[layer_id], pool.v_buffers[layer_id], row.slots, how.sm_scale)
            else:
                out[row.start : row.start + row.length] = _extend_attention(qs, pool, layer_id, row, how)
        return out

    def _parts(self) -> list[_DecodeRows]:
        if self._decode_parts is None:
            batch = self._batch
            self._decode_parts = [_build_decode_rows(batch, p, self.kv_pool.page_size, batch.input_ids.device)
                                  for p in self._part_groups]
        return self._decode_parts

    def _native(self, q, layer_id: int, how: _How) -> torch.Tensor:
        pool, d = self.kv_pool, self._decode
        return native_decode.decode_attention(q, pool.k_buffers[layer_id], pool.v_buffers[layer_id], d.page_table,
                                              d.lens, pool.page_size, how.sm_scale)


@dataclass(frozen=True, slots=True)
class _How:
    """One layer's attention: scale, sliding window, score soft-cap."""

    sm_scale: float
    window: int | None = None
    softcap: float | None = None


def _build_decode_rows(batch: ForwardBatch, idx: list[int], page_size: int, device) -> _DecodeRows:
    # Gather whole pages (page_size contiguous slots) rather than single slots: far fewer,
    # larger copies. A request's page j holds its positions j*page_size ...
    idx_t = torch.tensor(idx, dtype=torch.long, device=device)
    seq_lens = batch.seq_lens[idx_t]
    # At least two pages (the padding is masked): a compiled step (compiled_decode.py) keeps
    # the page count symbolic, which torch.compile assumes is never 1.
    max_pages = max(2, -(-max(batch.seq_lens_cpu[i] for i in idx) // page_size))
    padded = max_pages * page_size
    rows = batch.req_pool_indices[idx_t]
    first_slots = batch.req_to_token[rows, :padded:page_size].long()  # [Bd, max_pages]
    page_valid = torch.arange(max_pages, device=device)[None, :] * page_size < seq_lens[:, None]
    pages = torch.where(page_valid, first_slots // page_size, 0)
    mask = torch.arange(padded, device=device)[None, :] < seq_lens[:, None]  # [Bd, padded]
    return _DecodeRows(batch.extend_start_loc[idx_t], pages.reshape(-1), mask[:, None, None, :], padded,
                       seq_lens[:, None, None, None], pages.contiguous(), seq_lens.to(torch.int64).contiguous())


def _length_parts(batch: ForwardBatch, idx: list[int], page_size: int) -> list[list[int]]:
    """``idx`` (decode rows) cut by length rank into groups of about DECODE_PART_ROWS (at most
    DECODE_PARTS groups), where their padded pages come to at most PARTS_BELOW of one padded
    batch's; else none (the one batch is used)."""
    if len(idx) < DECODE_PARTS_FROM:
        return []
    lens = batch.seq_lens_cpu
    order = sorted(idx, key=lambda i: lens[i])
    pages = [max(2, -(-lens[i] // page_size)) for i in order]  # as _build_decode_rows pads
    parts = min(DECODE_PARTS, max(2, -(-len(order) // DECODE_PART_ROWS)))
    size = -(-len(order) // parts)
    cuts = list(range(0, len(order), size))
    parted = sum(pages[min(c + size, len(order)) - 1] * (min(c + size, len(order)) - c) for c in cuts)
    if parted > PARTS_BELOW * pages[-1] * len(order):
        return []
    return [order[c:c + size] for c in cuts]


def _build_extend_row(batch: ForwardBatch, i: int, start: int, device) -> _ExtendRow:
    n, total = batch.extend_lens_cpu[i], batch.seq_lens_cpu[i]
    slots = batch.req_to_token[batch.req_pool_indices_cpu[i], :total].long()
    q_pos = torch.arange(total - n, total, device=device)  # absolute positions of the new tokens
    mask = torch.arange(total, device=device)[None, :] <= q_pos[:, None]  # [n, L]
    return _ExtendRow(start, n, slots, mask, q_pos[:, None])


def _decode_attention(q, pool: KVPool, layer_id: int, rows: _DecodeRows, how: _How) -> torch.Tensor:
    # q: [Bd, Hq, D] -> [Bd, Hkv, group, D] (the group of q heads sharing a kv head is the
    # query axis); k/v pages gathered: [Bd, Hkv, padded_len, D] (strided views, no copy)
    bd, hq, d = q.shape
    hkv = pool.num_kv_heads
    k, v = pool.gather_pages(layer_id, rows.pages)  # [Bd * max_pages, page_size, Hkv, D]
    k, v = k.view(bd, -1, hkv, d), v.view(bd, -1, hkv, d)  # -1: a size compiled_decode.py keeps symbolic
    qg = q.view(bd, hkv, hq // hkv, d)
    o = _attend(qg, k.transpose(1, 2), v.transpose(1, 2), rows.mask_for(how.window), how)  # [Bd, Hkv, group, D]
    return o.reshape(bd, hq, d)


def _extend_attention(q, pool: KVPool, layer_id: int, row: _ExtendRow, how: _How) -> torch.Tensor:
    # q: [n, Hq, D] -> [1, Hq, n, D]; k/v: [L, Hkv, D] -> [1, Hkv, L, D], grouped-query through
    # enable_gqa (on CPU 1.4-1.5x faster than folding the group into the query axis at 128 new
    # tokens, 3.7x at 512).
    n, hq, d = q.shape
    k, v = pool.gather_slots(layer_id, row.slots)  # [L, Hkv, D]
    k, v = k.transpose(0, 1)[None], v.transpose(0, 1)[None]
    o = _attend(q.transpose(0, 1)[None], k, v, row.mask_for(how.window), how)  # [1, Hq, n, D]
    return o[0].transpose(0, 1)


def _attend(q, k, v, mask, how: _How) -> torch.Tensor:
    # q: [B, Hq, n, D], k/v: [B, Hkv, L, D] (Hq a multiple of Hkv), mask broadcast to [B, Hq, n, L]
    if how.softcap is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=how.sm_scale,
                                              enable_gqa=q.shape[1] != k.shape[1])
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * how.sm_scale
    scores = torch.tanh(scores / how.softcap) * how.softcap
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.matmul(probs, v.float()).to(q.dtype)
