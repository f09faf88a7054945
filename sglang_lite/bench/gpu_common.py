"""What every phase of the GPU benchmark shares: the model shapes, the seeded workload,
the log line, partial results saved as they come."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

MODELS = {"smollm2-135m": "dummy:smollm2-135m", "llama-3.2-1b": "dummy:llama-3.2-1b",
          "tiny": "dummy:tiny"}  # tiny: --dry-run, the plumbing on a CPU
TARGET_MODEL = "llama-3.2-1b"  # the targets are stated for this shape


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def workload(n: int, vocab: int, seed: int, prompt: tuple[int, int], output: tuple[int, int]):
    """[(prompt ids, max_new_tokens)]: lengths from ``seed`` alone, so every model gets the
    same lengths whatever its vocabulary."""
    lengths = random.Random(seed)
    sizes = [(lengths.randint(*prompt), lengths.randint(*output)) for _ in range(n)]
    tokens = random.Random(seed + 1)
    return [([tokens.randrange(100, vocab - 100) for _ in range(p)], m) for p, m in sizes]


def shape(args) -> dict:
    """The workload's size for the run's mode: n requests, prompt and output length ranges."""
    if args.dry_run:
        return dict(n=8, prompt=(8, 64), output=(2, 8))
    if args.quick:
        return dict(n=48, prompt=(64, 512), output=(16, 96))
    return dict(n=256, prompt=(64, 1024), output=(32, 512))


def preset(name: str):
    from sglang_lite.model.config import PRESETS

    return PRESETS[name]


def save(args, res: dict) -> None:
    """Results so far, so a phase stopped at its time limit still reports what it measured."""
    if args.result:
        Path(args.result).write_text(json.dumps(res, default=str))


def sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)

