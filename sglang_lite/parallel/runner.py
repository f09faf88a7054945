"""Rank 0's model runner under tensor parallelism: before each forward of its own shard it
broadcasts the step's plan, so the workers run the same forward and join its collectives."""

from __future__ import annotations

import torch

from sglang_lite.attention.base import ForwardBatch
from sglang_lite.model_runner import ModelRunner
from sglang_lite.parallel.launcher import TensorParallel
from sglang_lite.parallel.plan import send_plan


class TPModelRunner(ModelRunner):
    def __init__(self, tp: TensorParallel, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tp = tp

    def run_model(self, fb: ForwardBatch) -> torch.Tensor:
        self.tp.raise_if_failed()  # a dead rank: fail now, never wait on it
        try:
            send_plan(self.tp.comm, fb)
            return super().run_model(fb)
        except RuntimeError as e:  # gloo / NCCL: a peer closed its connection or timed out
            raise self.tp.explain(e) from e
