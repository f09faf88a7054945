"""The request-to-token table: row r maps request r's positions to KV pool slots."""

from __future__ import annotations

import torch


class ReqToTokenPool:
    """``req_to_token[row, pos]`` is the pool slot holding position ``pos`` of the request in ``row``."""

    def __init__(self, max_reqs: int, max_context_len: int, device: torch.device | str):
        self.max_reqs = max_reqs
        self.max_context_len = max_context_len
        self.req_to_token = torch.zeros((max_reqs, max_context_len), dtype=torch.int32, device=device)
        self._free_rows: list[int] = list(range(max_reqs - 1, -1, -1))

    @property
    def num_free_rows(self) -> int:
        return len(self._free_rows)

    def allocate(self) -> int:
        if not self._free_rows:
            raise MemoryError("req_to_token: no free request rows")
        return self._free_rows.pop()

    def free(self, row: int) -> None:
        self._free_rows.append(row)

    def write_many(self, rows: list[int], positions: list[int], slots: list[int]) -> None:
        """``req_to_token[rows[i], positions[i]] = slots[i]`` in one indexed write."""
        dev = self.req_to_token.device
        idx = torch.tensor([rows, positions], dtype=torch.int64).to(dev, non_blocking=True)
        vals = torch.tensor(slots, dtype=torch.int32).to(dev, non_blocking=True)
        self.req_to_token[idx[0], idx[1]] = vals

    def write(self, row: int, start: int, slots: torch.Tensor | list[int]) -> None:
        """Map positions ``start .. start+len(slots)`` of ``row`` to ``slots``."""
        if not isinstance(slots, torch.Tensor):
            slots = torch.tensor(slots, dtype=torch.int32)
        n = slots.numel()
        self.req_to_token[row, start : start + n] = slots.to(self.req_to_token.device, torch.int32)
