"""What the scheduler decided for one step, as the model runner and the CUDA graphs read it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from sglang_lite.request import Req


@dataclass(slots=True)
class ScheduledBatch:
    """What the scheduler decided for one step: each request computes ``extend_lens[i]``
    new tokens, starting at its kv_len, into ``slots[i]``. A continuous decode batch runs
    ``num_steps`` decode steps back to back: ``slots[i]`` then holds one slot per step."""

    reqs: list[Req]
    extend_lens: list[int]
    slots: list[torch.Tensor]
    num_steps: int = 1

    @property
    def is_decode(self) -> bool:
        return all(n == 1 for n in self.extend_lens)
