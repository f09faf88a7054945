"""Turns a scheduled batch into tensors, runs the model through the attention backend,
and returns logits."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sglang_lite.attention.base import AttentionBackend, ForwardBatch, ForwardMode
from sglang_lite.mem.req_to_token import ReqToTokenPool
from sglang_lite.request import Req


@dataclass(slots=True)
class ScheduledBatch:
    """What the scheduler decided for one step: each request computes ``extend_lens[i]``
    new tokens, starting at its kv_len, into ``slots[i]``."""

    reqs: list[Req]
    extend_lens: list[int]
    slots: list[torch.Tensor]

    @property
    def is_decode(self) -> bool:
        return all(n == 1 for n in self.extend_lens)


class ModelRunner:
    def __init__(self, model: torch.nn.Module, backend: AttentionBackend, req_pool: ReqToTokenPool,
                 device: torch.device):
        self.model = model
        self.backend = backend
        self.req_pool = req_pool
        self.device = device

    def build_forward_batch(self, batch: ScheduledBatch) -> ForwardBatch:
        ids, positions = [], []
        prefix_lens = [r.kv_len for r in batch.reqs]
        for req, n, start in zip(batch.reqs, batch.extend_lens, prefix_lens):
            ids.extend(req.fill_ids[start : start + n])
            positions.extend(range(start, start + n))
        extend = torch.tensor(batch.extend_lens, dtype=torch.int64)
        start_loc = torch.cumsum(extend, 0) - extend
        seq_lens = [p + n for p, n in zip(prefix_lens, batch.extend_lens)]
        rows = [r.req_pool_idx for r in batch.reqs]
        dev = self.device

        def to_dev(x):
            return torch.as_tensor(x, dtype=torch.int64).to(dev, non_blocking=True)

        return ForwardBatch(
            mode=ForwardMode.DECODE if batch.is_decode else ForwardMode.EXTEND,
            input_ids=to_dev(ids),
            positions=to_dev(positions),
            out_cache_loc=to_dev(torch.cat(batch.slots)),
            req_pool_indices=to_dev(rows),
            seq_lens=to_dev(seq_lens),
            prefix_lens=to_dev(prefix_lens),
            extend_lens=to_dev(extend),
            extend_start_loc=to_dev(start_loc),
            logits_indices=to_dev(start_loc + extend - 1),
            req_to_token=self.req_pool.req_to_token,
            seq_lens_cpu=seq_lens,
            prefix_lens_cpu=prefix_lens,
            extend_lens_cpu=list(batch.extend_lens),
            req_pool_indices_cpu=rows,
        )

    @torch.inference_mode()
    def forward(self, batch: ScheduledBatch) -> torch.Tensor:
        """Logits [B, vocab] fp32 at each request's last new token."""
        fb = self.build_forward_batch(batch)
        self.backend.init_forward_metadata(fb)
        return self.model(fb, self.backend)
