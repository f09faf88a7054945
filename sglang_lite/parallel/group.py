"""One rank's view of the tensor-parallel group: process groups built directly on a TCP
store (no ``torch.distributed`` default group, so two engines in one process never collide).

A gloo group on the CPU carries the step plans and start-up agreements on every device; the
model's collectives run on gloo too on CPU, on NCCL on CUDA. Collectives of the model's
forward time out after ``step_timeout``; waiting for the next plan (an idle server) does not.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

MASTER_ADDR = "127.0.0.1"  # one node: the ranks are this machine's processes
_IDLE = datetime.timedelta(days=365)  # a worker waits this long for the next plan


def rank_device(device: str, rank: int) -> torch.device:
    """Rank ``rank``'s device: the CPU for every rank, else the ``rank``-th GPU from the one
    named (``cuda`` = ``cuda:0``)."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return dev
    return torch.device("cuda", (dev.index or 0) + rank)


class TPComm:
    def __init__(self, store: dist.Store, rank: int, world_size: int, device: torch.device,
                 step_timeout: float):
        self.rank, self.world_size, self.device = rank, world_size, device
        timeout = datetime.timedelta(seconds=step_timeout)
        self.cpu = dist.ProcessGroupGloo(dist.PrefixStore("tp-cpu", store), rank, world_size, timeout)
        if device.type == "cuda":
            torch.cuda.set_device(device)
            opts = dist.ProcessGroupNCCL.Options()
            opts._timeout = timeout
            self.model = dist.ProcessGroupNCCL(dist.PrefixStore("tp-nccl", store), rank, world_size, opts)
        else:
            self.model = self.cpu

    @classmethod
    def connect(cls, port: int, rank: int, world_size: int, device: torch.device, step_timeout: float,
                connect_timeout: float) -> TPComm:
        """Join the group whose store rank 0 serves on ``port``."""
        store = dist.TCPStore(MASTER_ADDR, port, world_size, is_master=False,
                              timeout=datetime.timedelta(seconds=connect_timeout))
        return cls(store, rank, world_size, device, step_timeout)

    # ---- the model's collectives ------------------------------------------------------------
    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum of ``x`` over ranks, in place."""
        self.model.allreduce([x]).wait()
        return x

    def all_gather(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's ``x`` (same shape on each), in rank order."""
        out = [torch.empty_like(x) for _ in range(self.world_size)]
        self.model.allgather([out], [x]).wait()
        return out

    # ---- plans and agreements (CPU) -----------------------------------------------------------
    def broadcast_cpu(self, t: torch.Tensor, idle: bool = False) -> torch.Tensor:
        """Rank 0's ``t`` on every rank, in place; ``idle``: no time limit (waiting for work)."""
        self.cpu.broadcast(t, 0, _IDLE if idle else None).wait()
        return t

    def min_cpu_async(self, value: int) -> tuple[dist.Work, torch.Tensor]:
        """Start the minimum of ``value`` over ranks; ``work.wait()`` then read ``int(t)``."""
        t = torch.tensor([value], dtype=torch.int64)
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MIN
        return self.cpu.allreduce([t], opts), t
