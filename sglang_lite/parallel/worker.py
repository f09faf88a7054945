"""A worker rank (``python -m sglang_lite.parallel.worker``, started by ``launcher.py``): its
model shard, its share of the KV pool (its own KV heads, rank 0's slot numbering), and a loop
that runs each plan rank 0 broadcasts. No scheduler, radix tree, tokenizer or sampler."""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import sys
import threading

import torch

from sglang_lite.attention import create_backend, fit_attention_backend
from sglang_lite.mem.kv_pool import KVPool
from sglang_lite.mem.sizing import kv_pool_pages
from sglang_lite.model.batch_invariant import BatchInvariantMode
from sglang_lite.parallel.group import TPComm, rank_device
from sglang_lite.parallel.launcher import CONNECT_TIMEOUT_S, STEP_TIMEOUT_S, WorkerArgs, load_shard
from sglang_lite.parallel.plan import recv_plan
from sglang_lite.parallel.shard import plan_layout

log = logging.getLogger("sglang_lite.parallel.worker")


def main() -> int:
    args: WorkerArgs = pickle.load(sys.stdin.buffer)
    # A worker follows rank 0 alone (a stop plan, or EOF on stdin): a Ctrl-C or a SIGTERM sent
    # to the whole process group must let rank 0 drain, not kill a rank under it.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    threading.Thread(target=_exit_with_rank0, name="tp-rank0-watch", daemon=True).start()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s [tp rank {args.rank}] %(message)s")
    cfg = args.config
    device = rank_device(cfg.device, args.rank)
    if device.type == "cpu":
        torch.set_num_threads(cfg.num_threads or max(1, (os.cpu_count() or 1) // cfg.tp))
    comm = TPComm.connect(args.port, args.rank, cfg.tp, device, STEP_TIMEOUT_S, CONNECT_TIMEOUT_S)
    try:
        run_worker(args, comm, device)
    except RuntimeError as e:  # rank 0 went away mid-collective
        log.error("stopping: %s", e)
        return 1
    return 0


def run_worker(args: WorkerArgs, comm: TPComm, device: torch.device) -> None:
    cfg = args.config
    from sglang_lite.model.loader import load_model_config

    mc = load_model_config(args.source)
    layout = plan_layout(mc, cfg.tp)
    model = load_shard(cfg, args.source, layout, args.rank, comm, device)
    cfg = fit_attention_backend(cfg, model.config, args.requested_backend)
    num_kv_heads = len(layout.heads[args.rank].kv_heads)
    work, pages = comm.min_cpu_async(kv_pool_pages(cfg, mc, num_kv_heads, device))
    work.wait()
    pool = KVPool(int(pages), cfg.page_size, mc.num_layers, num_kv_heads, mc.head_dim, cfg.torch_dtype,
                  device, cfg.kv_format)
    backend = create_backend(cfg.attention_backend, pool)
    numerics = BatchInvariantMode if cfg.deterministic else contextlib.nullcontext
    log.info("ready: %d query / %d KV heads, KV pool %d pages", len(layout.heads[args.rank].q_heads),
             num_kv_heads, int(pages))
    with torch.inference_mode():
        while (fb := recv_plan(comm, device)) is not None:
            backend.init_forward_metadata(fb)
            with numerics():
                model(fb, backend)  # logits are gathered on every rank; rank 0 samples


def _exit_with_rank0() -> None:
    """Rank 0 holds our stdin open: EOF means it is gone (or closing); do not outlive it."""
    sys.stdin.buffer.read()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
