"""Paged attention through the Triton kernels in ``kernels/`` (the default on CUDA).

Decode steps (one new token per request) run flash-decoding with a split count chosen from
the batch size (``None``: the kernel's default), so the launch has no data-dependent shapes and
can be captured in a CUDA graph per batch size. Extend steps
(prefill, chunks, and mixed batches whose decode rows are simply extend_len == 1) run the
extend kernel over every request in one launch. Both store the new k/v first.
"""

from __future__ import annotations

import torch

from kernels.decode_attention import decode_attention
from kernels.extend_attention import extend_attention
from kernels.store_kv import store_kv
from sglang_lite.attention.base import AttentionBackend, ForwardBatch, ForwardMode
from sglang_lite.mem.kv_pool import KVPool


class TritonAttentionBackend(AttentionBackend):
    def __init__(self, kv_pool: KVPool, num_kv_splits: int | None = None):
        self.kv_pool = kv_pool
        self.num_kv_splits = num_kv_splits
        self._max_extend_len = 0

    def init_forward_metadata(self, batch: ForwardBatch) -> None:
        # From the host copy: sizing the extend grid must not sync on device tensors.
        self._max_extend_len = max(batch.extend_lens_cpu, default=0)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer_id: int,
        batch: ForwardBatch,
        sm_scale: float,
    ) -> torch.Tensor:
        k_buf = self.kv_pool.k_buffers[layer_id]  # [num_slots, num_kv_heads, head_dim]
        v_buf = self.kv_pool.v_buffers[layer_id]
        store_kv(_last_dim_contiguous(k), _last_dim_contiguous(v), k_buf, v_buf, batch.out_cache_loc)
        q = _last_dim_contiguous(q)  # [T, num_heads, head_dim]
        if batch.mode == ForwardMode.DECODE:
            return decode_attention(
                q, k_buf, v_buf, batch.req_to_token, batch.req_pool_indices, batch.seq_lens,
                sm_scale, num_kv_splits=self.num_kv_splits,
            )
        max_extend_len = self._max_extend_len or max(batch.extend_lens_cpu, default=0)
        return extend_attention(
            q, k_buf, v_buf, batch.req_to_token, batch.req_pool_indices, batch.prefix_lens,
            batch.extend_lens, batch.extend_start_loc, sm_scale, max_extend_len=max_extend_len,
        )


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()
