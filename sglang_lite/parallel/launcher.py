"""Rank 0's side of tensor parallelism: it starts the worker ranks (one subprocess each,
``python -m sglang_lite.parallel.worker``), joins them in the group, loads its own shard, and
watches the workers: one that dies fails the engine at once with a ``RankFailed`` naming the
rank and how it ended, never a hang.

Why rank 0 plans and the workers only compute: the scheduler, radix cache, grammar matchers
and sampler are the engine's state, large and full of host-side decisions; running one copy
and broadcasting the few tensors a forward needs (``plan.py``) keeps the workers small (a
model shard, its KV pool, a loop) and makes divergence between ranks impossible by
construction. Running the same deterministic scheduler on every rank would need every input,
every grammar compile and every clock-dependent choice (abort, timeouts) replayed identically.
Logits are all-gathered and sampled once, on rank 0; the next plan carries the token.
"""

from __future__ import annotations

import datetime
import logging
import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from sglang_lite.config import EngineConfig
from sglang_lite.errors import RankFailed
from sglang_lite.model.loader import ModelSource, load_model
from sglang_lite.parallel.group import MASTER_ADDR, TPComm, rank_device
from sglang_lite.parallel.plan import send_stop
from sglang_lite.parallel.shard import ShardLayout, plan_layout, shard_model
from sglang_lite.quant.apply import quantize_model

log = logging.getLogger(__name__)

STEP_TIMEOUT_S = 120.0  # a collective inside a forward waits at most this long for a peer
CONNECT_TIMEOUT_S = 120.0  # for every rank to join the group
START_TIMEOUT_S = 1800.0  # for every rank to load its shard
_POLL_S = 0.05
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding sglang_lite/


@dataclass(frozen=True, slots=True)
class WorkerArgs:
    """What a worker rank is started with (pickled on its stdin)."""

    config: EngineConfig
    source: ModelSource
    requested_backend: str
    rank: int
    port: int


def load_shard(cfg: EngineConfig, source: ModelSource, layout: ShardLayout, rank: int,
               comm: TPComm | None, device: torch.device) -> torch.nn.Module:
    """Rank ``rank``'s shard: the model loaded on the CPU, cut down, then moved to ``device``
    (so a GPU never holds more than its share), then packed if ``cfg.quantization`` asks. The
    int4 / fp8 groups (32 input features) fall inside one rank's slice of a row-parallel
    weight, so each rank packs exactly the codes tp=1 would; int8's per-row scales of O and
    down are computed over each rank's slice."""
    model = load_model(source, cfg.torch_dtype, torch.device("cpu"), cfg.seed, "none")
    model = shard_model(model, layout, rank, comm).to(device)
    model.tie_weights()
    model.build_rope_tables(device)
    if cfg.quantization != "none":
        quantize_model(model, cfg.quantization)
    return model


class TensorParallel:
    """Rank 0's handle on the group: the layout, the communicator, the worker processes."""

    def __init__(self, cfg: EngineConfig, source: ModelSource, model_config, requested_backend: str):
        self.config, self.source = cfg, source
        self.layout = plan_layout(model_config, cfg.tp)  # a bad tp fails before anything starts
        self.device = rank_device(cfg.device, 0)
        self._failure: RankFailed | None = None
        self._closing = False
        self._listeners: list[Callable[[RankFailed], None]] = []
        self._lock = threading.Lock()
        if self.device.type == "cpu" and not cfg.num_threads:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // cfg.tp))  # the ranks share the cores
        store = dist.TCPStore(MASTER_ADDR, 0, cfg.tp, is_master=True, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=CONNECT_TIMEOUT_S))
        self._store = store
        self.procs = [self._spawn(WorkerArgs(cfg, source, requested_backend, rank, store.port))
                      for rank in range(1, cfg.tp)]
        for rank, proc in enumerate(self.procs, start=1):
            threading.Thread(target=self._watch, args=(rank, proc), name=f"tp-watch-{rank}", daemon=True).start()
        try:
            self.comm = self._wait_for(lambda: TPComm(store, 0, cfg.tp, self.device, STEP_TIMEOUT_S),
                                       CONNECT_TIMEOUT_S, "joining the group")
        except BaseException:
            self.close()
            raise

    @property
    def num_kv_heads(self) -> int:
        """KV heads in rank 0's pool."""
        return len(self.layout.heads[0].kv_heads)

    def load_model(self) -> torch.nn.Module:
        return load_shard(self.config, self.source, self.layout, 0, self.comm, self.device)

    def agree_num_pages(self, num_pages: int) -> int:
        """The KV pool size every rank can hold (the smallest rank's), once all have loaded."""
        work, t = self.comm.min_cpu_async(num_pages)
        self._wait_for(work.wait, START_TIMEOUT_S, "loading the model shards")
        return int(t)

    # ---- failures ---------------------------------------------------------------------------
    def on_failure(self, fn: Callable[[RankFailed], None]) -> None:
        """Call ``fn(error)`` (once, from a watcher thread) when the group fails."""
        with self._lock:
            self._listeners.append(fn)
            failure = self._failure
        if failure is not None:
            fn(failure)

    @property
    def failure(self) -> RankFailed | None:
        return self._failure

    def raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    def explain(self, error: Exception) -> RankFailed:
        """The failure behind a collective's ``error``: a worker found dead within a moment, or
        else the error itself; either way the group is done."""
        deadline = time.monotonic() + 2.0
        while self._failure is None and time.monotonic() < deadline:
            for rank, proc in enumerate(self.procs, start=1):
                if proc.poll() is not None:
                    self._fail(_died(rank, proc))
            time.sleep(_POLL_S)
        if self._failure is None:
            self._fail(RankFailed(f"tensor parallelism: a collective failed ({error}); the engine is shut down"))
        return self._failure

    def _watch(self, rank: int, proc: subprocess.Popen) -> None:
        proc.wait()
        if not self._closing:
            self._fail(_died(rank, proc))

    def _fail(self, error: RankFailed) -> None:
        with self._lock:
            if self._failure is not None:
                return
            self._failure = error
            listeners = list(self._listeners)
        log.error("%s", error)
        for fn in listeners:
            fn(error)

    def _wait_for(self, fn: Callable[[], object], timeout: float, what: str):
        """``fn()`` run in a helper thread while the workers are watched: a worker that dies
        (or a deadline that passes) ends the wait with ``RankFailed``."""
        box: dict[str, object] = {}

        def run() -> None:
            try:
                box["result"] = fn()
            except BaseException as e:  # handed to the waiting thread
                box["error"] = e

        helper = threading.Thread(target=run, name="tp-start", daemon=True)
        helper.start()
        deadline = time.monotonic() + timeout
        while helper.is_alive():
            helper.join(_POLL_S)
            self.raise_if_failed()
            if time.monotonic() > deadline:
                raise RankFailed(f"tensor parallelism: ranks not ready after {timeout:.0f} s ({what})")
        if "error" in box:
            if self._failure is not None:
                raise self._failure from box["error"]
            raise box["error"]
        return box["result"]

    # ---- processes --------------------------------------------------------------------------
    def _spawn(self, args: WorkerArgs) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(_PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        proc = subprocess.Popen([sys.executable, "-m", "sglang_lite.parallel.worker"],
                                stdin=subprocess.PIPE, env=env)
        # stdin stays open: a worker exits when it reads EOF (rank 0 gone, however it ended).
        pickle.dump(args, proc.stdin)
        proc.stdin.flush()
        log.info("tensor parallelism: rank %d started (pid %d)", args.rank, proc.pid)
        return proc

    def close(self, timeout: float = 10.0) -> None:
        """Stop the workers: a stop plan when the group is healthy, then EOF, then a kill."""
        if self._closing:
            return
        self._closing = True
        comm = getattr(self, "comm", None)
        if comm is not None and self._failure is None:
            try:
                send_stop(comm)
            except RuntimeError as e:
                log.warning("tensor parallelism: stop plan not delivered: %s", e)
        for proc in self.procs:
            try:
                proc.stdin.close()
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _died(rank: int, proc: subprocess.Popen) -> RankFailed:
    code = proc.returncode
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return RankFailed(f"tensor parallelism: rank {rank} (pid {proc.pid}) died ({how}); the engine is shut down")
