"""A step's plan on the wire: rank 0 broadcasts the ``ForwardBatch`` of every forward, and the
workers rebuild it and run the same forward on their shard.

Two broadcasts a step over the CPU group: a fixed-size int64 header (the op, the forward mode,
each field's kind and length), then every field flattened into one int64 buffer. The page
table travels as the batch's own rows (``req_to_token[req_pool_indices, :max(seq_lens)]``), so
workers keep no request table: on a worker request i reads row i. Fields are walked in
``ForwardBatch``'s declared order on both sides, so a field added there travels without
changes here (tensors of integers, lists of ints, None; anything else is refused loudly).
"""

from __future__ import annotations

import dataclasses
import enum

import torch

from sglang_lite.attention.base import ForwardBatch, ForwardMode
from sglang_lite.parallel.group import TPComm

OP_FORWARD, OP_STOP = 1, 2
_TENSOR, _LIST, _TABLE, _NONE = 1, 2, 3, 4
_DTYPES = (torch.int64, torch.int32)
_FIELDS = [f.name for f in dataclasses.fields(ForwardBatch)]
_HEADER = 4 + 3 * len(_FIELDS)  # op, mode, table width, batch size; (kind, dtype, numel) per field
_LOCAL = ("mode", "req_pool_indices", "req_pool_indices_cpu")  # rebuilt on the worker


def send_plan(comm: TPComm, batch: ForwardBatch) -> None:
    """Rank 0: broadcast ``batch`` (call right before running it)."""
    header, payload = _pack(batch)
    comm.broadcast_cpu(header)
    comm.broadcast_cpu(payload)


def send_stop(comm: TPComm) -> None:
    header = torch.zeros(_HEADER, dtype=torch.int64)
    header[0] = OP_STOP
    comm.broadcast_cpu(header)


def recv_plan(comm: TPComm, device: torch.device) -> ForwardBatch | None:
    """A worker: wait (without a time limit) for rank 0's next plan; None means stop."""
    header = comm.broadcast_cpu(torch.zeros(_HEADER, dtype=torch.int64), idle=True)
    if int(header[0]) == OP_STOP:
        return None
    meta = header.tolist()
    payload = comm.broadcast_cpu(torch.empty(sum(meta[6::3]), dtype=torch.int64))
    return _unpack(meta, payload, device)


def _pack(batch: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(max(batch.seq_lens_cpu, default=0), 1)
    rows = batch.req_to_token.index_select(0, batch.req_pool_indices)[:, :width]  # [B, width]
    header = [OP_FORWARD, _mode_index(batch.mode), width, batch.batch_size]
    parts = []
    for name in _FIELDS:
        value = getattr(batch, name)
        if name in _LOCAL:
            header += [0, 0, 0]
            continue
        if value is None:
            header += [_NONE, 0, 0]
            continue
        if name == "req_to_token":
            value, kind = rows, _TABLE
        elif isinstance(value, torch.Tensor):
            kind = _TENSOR
        elif isinstance(value, list):
            value, kind = torch.tensor(value, dtype=torch.int64), _LIST
        else:
            raise TypeError(f"ForwardBatch.{name}: a {type(value).__name__} cannot be broadcast to the workers")
        if value.dtype not in _DTYPES:
            raise TypeError(f"ForwardBatch.{name}: dtype {value.dtype} cannot be broadcast to the workers")
        flat = value.reshape(-1).to("cpu", torch.int64)
        header += [kind, _DTYPES.index(value.dtype), flat.numel()]
        parts.append(flat)
    return torch.tensor(header, dtype=torch.int64), torch.cat(parts)


def _unpack(meta: list[int], payload: torch.Tensor, device: torch.device) -> ForwardBatch:
    width, batch_size = meta[2], meta[3]
    values, offset = {}, 0
    for i, name in enumerate(_FIELDS):
        kind, dtype, numel = meta[4 + 3 * i : 7 + 3 * i]
        if name in _LOCAL:
            continue
        if kind == _NONE:
            values[name] = None
            continue
        flat = payload[offset : offset + numel]
        offset += numel
        if kind == _LIST:
            values[name] = flat.tolist()
        else:
            t = flat.to(device, _DTYPES[dtype])
            values[name] = t.view(batch_size, width) if kind == _TABLE else t
    values["mode"] = list(ForwardMode)[meta[1]]
    values["req_pool_indices"] = torch.arange(batch_size, dtype=torch.int64, device=device)
    values["req_pool_indices_cpu"] = list(range(batch_size))
    return ForwardBatch(**values)


def _mode_index(mode: enum.Enum) -> int:
    return list(ForwardMode).index(mode)
