"""How a model's weights split over ``tp`` ranks, and cutting a loaded model down to one
rank's share (in place).

- Attention heads split by KV-head groups: with at least as many KV heads as ranks, rank r
  takes a contiguous run of KV heads (uneven runs allowed: SmolLM2's 3 KV heads over 2 ranks
  are 2 + 1) and every query head that reads them, so each rank's heads keep the model's
  grouped-query layout (q head h reads local kv head ``h // group``). With fewer KV heads than
  ranks, each KV head is replicated on ``tp // num_kv_heads`` ranks and its query heads are
  split among them; that needs ``tp`` to be a multiple of ``num_kv_heads`` and the group size a
  multiple of the replication, else ``tp`` is refused with a ``ValueError`` naming it.
- QKV and gate/up are column-parallel (each rank computes its heads' / its columns' outputs);
  O and down are row-parallel (each rank multiplies its slice of the input features and the
  partial sums are all-reduced; a bias is added by rank 0 only).
- The embedding and the LM head are vocabulary-parallel: rank r holds rows
  ``[r * s, (r + 1) * s)`` with ``s = ceil(vocab / tp)``, the last shard padded with zero rows so
  every rank's logits have the same width for the all-gather.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn


@dataclass(frozen=True, slots=True)
class RankHeads:
    """The attention heads one rank owns (global indices)."""

    q_heads: range
    kv_heads: range


@dataclass(frozen=True, slots=True)
class ShardLayout:
    """Where every weight of a model splits over ``tp`` ranks (pure arithmetic, no tensors)."""

    tp: int
    heads: tuple[RankHeads, ...]
    intermediate: tuple[range, ...]  # MLP columns per rank
    vocab_shard: int  # rows of the embedding / LM head per rank (padded)
    vocab_size: int

    def vocab_rows(self, rank: int) -> range:
        start = rank * self.vocab_shard
        return range(min(start, self.vocab_size), min(start + self.vocab_shard, self.vocab_size))


def split_evenly(n: int, parts: int) -> tuple[range, ...]:
    """``range(n)`` cut into ``parts`` contiguous runs whose lengths differ by at most one."""
    base, extra = divmod(n, parts)
    runs, start = [], 0
    for i in range(parts):
        size = base + (i < extra)
        runs.append(range(start, start + size))
        start += size
    return tuple(runs)


def plan_heads(num_heads: int, num_kv_heads: int, tp: int) -> tuple[RankHeads, ...]:
    """Each rank's query and KV heads (see the module docstring); ``ValueError`` naming ``tp``
    when the heads cannot be split that way."""
    if tp < 1:
        raise ValueError(f"tp: must be >= 1, got {tp}")
    if tp > num_heads:
        raise ValueError(f"tp: {tp} ranks for a model with {num_heads} attention heads (at most {num_heads})")
    group = num_heads // num_kv_heads
    if num_kv_heads >= tp:
        return tuple(RankHeads(range(kv.start * group, kv.stop * group), kv) for kv in split_evenly(num_kv_heads, tp))
    replicas = tp // num_kv_heads
    if tp % num_kv_heads or group % replicas:
        raise ValueError(
            f"tp: {tp} ranks cannot share {num_kv_heads} KV heads ({group} query heads each): with fewer KV "
            f"heads than ranks, tp must be a multiple of {num_kv_heads} whose replication divides {group}; "
            f"use tp <= {num_kv_heads}")
    per = group // replicas
    return tuple(RankHeads(range(r * per, (r + 1) * per), range(r // replicas, r // replicas + 1))
                 for r in range(tp))


def plan_layout(model_config, tp: int) -> ShardLayout:
    mc = model_config
    if mc.intermediate_size < tp:
        raise ValueError(f"tp: {tp} ranks for an MLP of {mc.intermediate_size} columns")
    return ShardLayout(tp, plan_heads(mc.num_heads, mc.num_kv_heads, tp), split_evenly(mc.intermediate_size, tp),
                       -(-mc.vocab_size // tp), mc.vocab_size)


def qkv_rows(heads: RankHeads, num_heads: int, num_kv_heads: int, head_dim: int) -> torch.Tensor:
    """Rows of the merged [q; k; v] weight that ``heads`` own, in q, k, v order."""
    q_size, kv_size = num_heads * head_dim, num_kv_heads * head_dim
    rows = [_head_rows(heads.q_heads, head_dim, 0), _head_rows(heads.kv_heads, head_dim, q_size),
            _head_rows(heads.kv_heads, head_dim, q_size + kv_size)]
    return torch.cat(rows)


def gate_up_rows(cols: range, intermediate_size: int) -> torch.Tensor:
    """Rows of the merged [gate; up] weight for MLP columns ``cols``."""
    idx = torch.arange(cols.start, cols.stop)
    return torch.cat([idx, idx + intermediate_size])


def _head_rows(heads: range, head_dim: int, offset: int) -> torch.Tensor:
    return torch.arange(offset + heads.start * head_dim, offset + heads.stop * head_dim)


def vocab_slice(weight: torch.Tensor, layout: ShardLayout, rank: int) -> torch.Tensor:
    """Rank ``rank``'s rows of an embedding / LM head weight [vocab, hidden], padded with zero
    rows to ``layout.vocab_shard``."""
    rows = layout.vocab_rows(rank)
    out = weight.new_zeros((layout.vocab_shard, weight.shape[1]))
    out[: len(rows)] = weight[rows.start : rows.stop]
    return out


class Communicator(Protocol):
    def all_reduce(self, x: torch.Tensor) -> torch.Tensor: ...
    def all_gather(self, x: torch.Tensor) -> list[torch.Tensor]: ...


class ModelShard:
    """What a sharded model asks of its group during a forward: the sum of row-parallel
    partial outputs, the vocabulary-parallel embedding lookup, the gathered logits."""

    def __init__(self, layout: ShardLayout, rank: int, comm: Communicator):
        self.layout, self.rank, self.comm = layout, rank, comm
        self.vocab_start = rank * layout.vocab_shard

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        return self.comm.all_reduce(x)

    def embed(self, embedding: nn.Module, ids: torch.Tensor) -> torch.Tensor:
        """Embeddings of ``ids`` [T]: each rank looks up the ids in its rows, zeros the rest, and
        the sum over ranks is the full lookup (exact: one nonzero term per token)."""
        local = ids - self.vocab_start
        mine = (local >= 0) & (local < self.layout.vocab_shard)
        x = embedding(torch.where(mine, local, 0))  # [T, hidden]
        x = x * mine.unsqueeze(-1).to(x.dtype)
        return self.comm.all_reduce(x)

    def gather_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """[B, vocab_shard] on each rank -> [B, vocab] (every rank's shard, in rank order)."""
        return torch.cat(self.comm.all_gather(logits.contiguous()), dim=-1)[:, : self.layout.vocab_size]


def shard_model(model: nn.Module, layout: ShardLayout, rank: int, comm: Communicator | None) -> nn.Module:
    """Cut ``model`` (a loaded ``LlamaForCausalLM``, float weights) down to rank ``rank``'s share,
    in place, and wire its collectives through ``comm``."""
    cfg = model.config
    shard = ModelShard(layout, rank, comm)
    heads, cols = layout.heads[rank], layout.intermediate[rank]
    with torch.no_grad():
        for layer in model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            attn.qkv_proj = _column(attn.qkv_proj, qkv_rows(heads, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim))
            attn.o_proj = _row(attn.o_proj, _head_rows(heads.q_heads, cfg.head_dim, 0), rank)
            attn.num_heads, attn.num_kv_heads = len(heads.q_heads), len(heads.kv_heads)
            attn.q_size, attn.kv_size = attn.num_heads * cfg.head_dim, attn.num_kv_heads * cfg.head_dim
            mlp.gate_up_proj = _column(mlp.gate_up_proj, gate_up_rows(cols, cfg.intermediate_size))
            mlp.down_proj = _row(mlp.down_proj, torch.arange(cols.start, cols.stop), rank)
            attn.tp = mlp.tp = shard
        embed = nn.Embedding(layout.vocab_shard, cfg.hidden_size, device="meta")
        embed.weight = nn.Parameter(vocab_slice(model.embed_tokens.weight, layout, rank), requires_grad=False)
        head = nn.Linear(cfg.hidden_size, layout.vocab_shard, bias=False, device="meta")
        head.weight = embed.weight if cfg.tie_word_embeddings else nn.Parameter(
            vocab_slice(model.lm_head.weight, layout, rank), requires_grad=False)
        model.embed_tokens, model.lm_head = embed, head
    model.tp = shard
    return model


def _column(linear: nn.Linear, rows: torch.Tensor) -> nn.Linear:
    """The output rows ``rows`` of ``linear`` (column-parallel: no communication)."""
    out = nn.Linear(linear.in_features, len(rows), bias=linear.bias is not None, device="meta")
    out.weight = nn.Parameter(linear.weight.index_select(0, rows.to(linear.weight.device)), requires_grad=False)
    if linear.bias is not None:
        out.bias = nn.Parameter(linear.bias.index_select(0, rows.to(linear.bias.device)), requires_grad=False)
    return out


def _row(linear: nn.Linear, cols: torch.Tensor, rank: int) -> nn.Linear:
    """The input columns ``cols`` of ``linear`` (row-parallel: the caller all-reduces). The
    bias is rank 0's alone, so the sum over ranks adds it once."""
    out = nn.Linear(len(cols), linear.out_features, bias=linear.bias is not None, device="meta")
    out.weight = nn.Parameter(linear.weight.index_select(1, cols.to(linear.weight.device)), requires_grad=False)
    if linear.bias is not None:
        bias = linear.bias.detach().clone() if rank == 0 else torch.zeros_like(linear.bias)
        out.bias = nn.Parameter(bias, requires_grad=False)
    return out
