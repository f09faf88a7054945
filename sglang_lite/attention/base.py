"""The seam between the model and its attention implementation.

The model computes q/k/v for the new tokens of a batch and hands them to an
``AttentionBackend``; the backend writes k/v into the paged pool and returns the
attention output. Everything a backend needs about the batch is in ``ForwardBatch``,
built once per step by the model runner and passed down explicitly (no globals).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch


class ForwardMode(enum.Enum):
    EXTEND = enum.auto()  # some request computes more than one new token (prefill / chunk)
    DECODE = enum.auto()  # every request computes exactly one new token


@dataclass(slots=True)
class ForwardBatch:
    """One step's batch, as tensors on the model's device.

    B = number of requests, T = total number of new tokens (sum of extend_lens).
    Requests are laid out in order: request i owns rows
    ``extend_start_loc[i] : extend_start_loc[i] + extend_lens[i]`` of the token axis.
    A decode request is simply a request with ``extend_len == 1``.
    """

    mode: ForwardMode
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64, absolute position of each new token
    out_cache_loc: torch.Tensor  # [T] int64, pool slot where each new token's k/v goes
    req_pool_indices: torch.Tensor  # [B] int64, row of each request in req_to_token
    seq_lens: torch.Tensor  # [B] int64, prefix_len + extend_len (tokens visible after the step)
    prefix_lens: torch.Tensor  # [B] int64, tokens already in the pool before this step
    extend_lens: torch.Tensor  # [B] int64
    extend_start_loc: torch.Tensor  # [B] int64, exclusive cumsum of extend_lens
    logits_indices: torch.Tensor  # [B] int64, row in T of each request's last new token
    req_to_token: torch.Tensor  # [max_reqs, max_context_len] int32, position -> pool slot
    # Host copies, so the torch backend can loop without syncing on device tensors.
    seq_lens_cpu: list[int]
    prefix_lens_cpu: list[int]
    extend_lens_cpu: list[int]
    req_pool_indices_cpu: list[int]

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens_cpu)

    @property
    def num_tokens(self) -> int:
        return sum(self.extend_lens_cpu)


class AttentionBackend(ABC):
    """Paged attention over a ``KVPool``.

    Contract of ``forward``:
      * q: [T, num_heads, head_dim], k/v: [T, num_kv_heads, head_dim] for the new tokens.
      * First writes k/v of the new tokens into ``kv_pool`` at ``batch.out_cache_loc``
        for layer ``layer_id``; then each new token attends, causally, to every token of
        its own request at positions <= its own (cached prefix read through
        ``batch.req_to_token``, plus the new tokens up to itself).
      * Grouped-query attention: head h uses kv head ``h // (num_heads // num_kv_heads)``;
        kv is never repeated in memory by the caller.
      * Returns [T, num_heads, head_dim] in q's dtype.
      * ``sliding_window`` W (when given): a token at position p sees only positions > p - W
        (itself and the W - 1 before it), as transformers' sliding-window layers.
        ``logit_softcap`` c: scores become ``c * tanh(scores / c)`` before the softmax (Gemma 2).
        A backend that cannot do one raises ``UnsupportedAttention`` naming it (and
        ``fit_attention_backend`` refuses such a model up front).
    ``init_forward_metadata`` is called once per step before the model runs, so a backend
    can precompute per-batch indices (and, on GPU, fill CUDA-graph input buffers).
    """

    def init_forward_metadata(self, batch: ForwardBatch) -> None:  # noqa: B027
        """Optional per-step precomputation."""

    def step_tensors(self) -> list[torch.Tensor]:
        """The tensors ``init_forward_metadata`` built for this step, whose every size may
        change from step to step (compiled_decode.py compiles them as symbolic sizes)."""
        return []

    @abstractmethod
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
    ) -> torch.Tensor: ...


class UnsupportedAttention(ValueError):
    """An attention feature the backend does not implement."""


def model_attention_features(model_config) -> list[str]:
    """Config fields of ``model_config`` that ask for more than plain causal attention."""
    features = []
    if model_config.has_sliding_window:
        features.append("sliding_window")
    if model_config.attn_logit_softcap is not None:
        features.append("attn_logit_softcapping")
    return features
