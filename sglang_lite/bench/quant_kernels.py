"""Weight-only and int8 GEMM kernels of the installed torch against bf16 ``F.linear``, on the
embedded model's linear shapes, at several batch sizes:

  python -m sglang_lite.bench.quant_kernels [--batches 1 8 32 256] [--min-time 0.2]

Prints microseconds per call (medians of torch.utils.benchmark's blocked runs) and writes JSON
with ``--output``. This is what ``sglang_lite.quant.linear`` chooses its per-batch-size kernels
from; run it again on a new CPU before changing the thresholds there.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils import benchmark

# SmolLM2-135M: (name, out_features, in_features)
SHAPES = [("qkv", 960, 576), ("o", 576, 576), ("gate_up", 3072, 576), ("down", 576, 1536),
          ("lm_head", 49152, 576)]
GROUP = 32


def _int4_pack(w: torch.Tensor):
    n, k = w.shape
    wg = w.view(n, k // GROUP, GROUP)
    lo, hi = wg.amin(-1, keepdim=True), wg.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp(min=1e-8)
    q = ((wg - lo) / scale).round().clamp(0, 15).to(torch.int32).view(n, k)
    sz = torch.stack([scale[..., 0].t(), (lo + 8 * scale)[..., 0].t()], -1).contiguous().bfloat16()
    return torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1), sz, q, scale, lo


def _int8_pack(w: torch.Tensor):
    s = w.abs().amax(1) / 127
    return (w / s[:, None]).round().clamp(-127, 127).to(torch.int8), s


def _candidates(w: torch.Tensor) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    n, k = w.shape
    wb = w.bfloat16()
    p4, sz, q4, scale4, lo4 = _int4_pack(w)
    q8, s8 = _int8_pack(w)
    s8b, q8t = s8.bfloat16(), q8.t().contiguous()
    scale4b, lo4b = scale4.bfloat16(), lo4.bfloat16()
    q4u8 = q4.to(torch.uint8).view(n, k // GROUP, GROUP)
    scratch = torch.empty(n, k, dtype=torch.bfloat16)

    def int4_dequant(x):
        torch.mul(q4u8, scale4b, out=scratch.view(n, k // GROUP, GROUP)).view(n, k).add_(
            lo4b.expand(n, k // GROUP, GROUP).reshape(n, k))
        return F.linear(x, scratch)

    def int8_dequant(x):
        torch.mul(q8, s8b[:, None], out=scratch)
        return F.linear(x, scratch)

    def dyn_int8(x):
        xs = x.abs().amax(-1, keepdim=True).float().clamp(min=1e-8) / 127
        xq = (x / xs).round().to(torch.int8)
        return (torch._int_mm(xq, q8t).float() * xs * s8).to(x.dtype)

    return {
        "bf16": lambda x: F.linear(x, wb),
        "int8_wo": lambda x: torch._weight_int8pack_mm(x, q8, s8b),
        "int4_wo": lambda x: torch.ops.aten._weight_int4pack_mm_for_cpu(x, p4, GROUP, sz),
        "int8_dyn_act": dyn_int8,
        "int8_dequant": int8_dequant,
        "int4_dequant": int4_dequant,
    }


def measure(batches: list[int], min_time: float) -> list[dict]:
    rows = []
    torch.manual_seed(0)
    for name, n, k in SHAPES:
        w = torch.randn(n, k) * 0.02
        fns = _candidates(w)
        for m in batches:
            x = torch.randn(m, k).bfloat16()
            row = {"layer": name, "n": n, "k": k, "m": m}
            for label, fn in fns.items():
                t = benchmark.Timer("fn(x)", globals={"fn": fn, "x": x}, num_threads=torch.get_num_threads())
                row[label] = t.blocked_autorange(min_run_time=min_time).median * 1e6
            rows.append(row)
            print(_format(row), flush=True)
    return rows


def _format(row: dict) -> str:
    cells = "  ".join(f"{k} {v:8.1f}" for k, v in row.items() if isinstance(v, float))
    return f"{row['layer']:8s} {row['n']:5d}x{row['k']:<5d} M={row['m']:<4d} {cells}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 256])
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--output", default=None)
    args = ap.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}; microseconds per call")
    rows = measure(args.batches, args.min_time)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
