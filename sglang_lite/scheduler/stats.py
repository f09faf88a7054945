"""The scheduler's counters, read by the engine's stats and the server's metrics."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class SchedulerStats:
    num_steps: int = 0
    num_prefill_tokens: int = 0  # computed prompt (and recomputed) tokens
    num_generated_tokens: int = 0
    num_prompt_tokens: int = 0  # prompt tokens of admitted requests (first admission)
    num_cached_prompt_tokens: int = 0
    num_retractions: int = 0
    num_finished: int = 0
    num_aborted: int = 0
    num_jump_forward_tokens: int = 0

    @property
    def cache_hit_rate(self) -> float:
        return self.num_cached_prompt_tokens / self.num_prompt_tokens if self.num_prompt_tokens else 0.0
