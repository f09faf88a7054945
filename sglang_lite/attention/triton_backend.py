"""Paged attention through the Triton kernels in ``sglang_lite_kernels/`` (the default on CUDA).

Decode steps (one new token per request) run flash-decoding with a split count chosen from
the batch size alone (the kernel's default rounded down to a power of two, so a handful of
kernel variants cover every batch size), so the launch has no data-dependent shapes and can
be captured in a CUDA graph per batch size (``supports_cuda_graph``). Extend steps
(prefill, chunks, and mixed batches whose decode rows are simply extend_len == 1) run the
extend kernel over every request in one launch. Both store the new k/v first.
"""

from __future__ import annotations

import torch

from sglang_lite.attention.base import (
    AttentionBackend,
    ForwardBatch,
    ForwardMode,
    UnsupportedAttention,
)
from sglang_lite.mem.kv_pool import KVPool
from sglang_lite_kernels.decode_attention import decode_attention, default_num_kv_splits
from sglang_lite_kernels.extend_attention import extend_attention
from sglang_lite_kernels.store_kv import store_kv


class TritonAttentionBackend(AttentionBackend):
    supports_cuda_graph = True

    def __init__(self, kv_pool: KVPool, num_kv_splits: int | None = None):
        self.kv_pool = kv_pool
        self.num_kv_splits = num_kv_splits
        self._max_extend_len = 0
        self._splits: dict[tuple[int, int], int] = {}  # (batch size, kv heads) -> kv splits

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
        *,
        sliding_window: int | None = None,
        logit_softcap: float | None = None,
    ) -> torch.Tensor:
        if sliding_window is not None or logit_softcap is not None:
            raise UnsupportedAttention("attention_backend: the triton kernels implement neither sliding_window "
                                       "nor logit soft-capping; use attention_backend='torch'")
        pool = self.kv_pool
        k_buf = pool.k_buffers[layer_id]  # [num_slots, num_kv_heads, head_dim]
        v_buf = pool.v_buffers[layer_id]
        scales = {}
        if pool.format.scaled:  # 8-bit codes: coded by the pool (one bf16 scale a token and head)
            pool.store(layer_id, batch.out_cache_loc, k, v)
            scales = {"k_scale": pool.k_scales[layer_id], "v_scale": pool.v_scales[layer_id]}
        else:
            store_kv(_last_dim_contiguous(k), _last_dim_contiguous(v), k_buf, v_buf, batch.out_cache_loc)
        q = _last_dim_contiguous(q)  # [T, num_heads, head_dim]
        if batch.mode == ForwardMode.DECODE:
            return decode_attention(
                q, k_buf, v_buf, batch.req_to_token, batch.req_pool_indices, batch.seq_lens,
                sm_scale, num_kv_splits=self.decode_num_kv_splits(q.shape[0], k_buf.shape[1], q.device),
                **scales,
            )
        max_extend_len = self._max_extend_len or max(batch.extend_lens_cpu, default=0)
        return extend_attention(
            q, k_buf, v_buf, batch.req_to_token, batch.req_pool_indices, batch.prefix_lens,
            batch.extend_lens, batch.extend_start_loc, sm_scale, max_extend_len=max_extend_len, **scales,
        )

    def decode_num_kv_splits(self, batch_size: int, num_kv_heads: int, device: torch.device) -> int:
        """From host values only: fixed for a captured batch size, whatever the contexts."""
        if self.num_kv_splits is not None:
            return self.num_kv_splits
        key = (batch_size, num_kv_heads)
        if key not in self._splits:
            self._splits[key] = _floor_pow2(default_num_kv_splits(batch_size, num_kv_heads, device))
        return self._splits[key]


def _floor_pow2(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()
