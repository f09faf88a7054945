"""Weight-only and int8 GEMM kernels of the installed torch against bf16 ``F.linear``, on the
embedded model's linear shapes, at several batch sizes:

  python -m sglang_lite.bench.quant_kernels [--batches 1 8 32 256] [--min-time 0.2]

Prints microseconds per call (the fastest of torch.utils.benchmark's blocks) and writes JSON
with ``--output``. Where our C kernel builds (``sglang_lite.quant.native_int4``: int8
activations times the packed int4 codes, what a GGUF Q4 model runs on this CPU), it is a
column too (``c_int4``), and the last lines sum a decoder layer's four matmuls (qkv, o,
gate_up, down) per batch size: bf16 against the C kernel, with the ratio.

``KERNEL_MAX_ROWS`` in ``sglang_lite.quant.int4`` / ``int8`` (torch's kernel up to that many
rows, dequantize + GEMM above) comes from this table; run it again on a new CPU before
changing them.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils import benchmark

from sglang_lite.quant import native_int4
from sglang_lite.quant.int4 import Int4Weight
from sglang_lite.quant.int8 import GroupInt8Weight, Int8Weight

# SmolLM2-135M: (name, out_features, in_features)
SHAPES = [("qkv", 960, 576), ("o", 576, 576), ("gate_up", 3072, 576), ("down", 576, 1536),
          ("lm_head", 49152, 576)]
GROUP = 32
DECODER = ("qkv", "o", "gate_up", "down")  # a decoder layer's matmuls


def _candidates(w: torch.Tensor) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Each way to multiply by ``w``: bf16, and our packed formats through each of their paths."""
    wb = w.bfloat16()
    int4 = Int4Weight.quantize(w, GROUP, torch.bfloat16)
    int8 = Int8Weight.quantize(w)
    scale8, q8t = int8.scale.bfloat16(), int8.q.t().contiguous()
    q8 = GroupInt8Weight.from_codes(int8.q, int8.scale[:, None].expand(-1, w.shape[1] // GROUP), torch.bfloat16)

    def dyn_int8(x):  # int8 activations (per row) x int8 weights, int32 accumulators
        xs = x.abs().amax(-1, keepdim=True).float().clamp(min=1e-8) / 127
        xq = (x / xs).round().to(torch.int8)
        return (torch._int_mm(xq, q8t).float() * xs * int8.scale).to(x.dtype)

    ours = {}
    if native_int4.module() is not None:
        c_int4 = int4.for_c_kernel()
        ours["c_int4"] = lambda x: c_int4.mm(x)
    return {
        "bf16": lambda x: F.linear(x, wb),
        **ours,
        "int4_kernel": lambda x: torch.ops.aten._weight_int4pack_mm_for_cpu(x, int4.for_torch(), GROUP, int4.scale_zero),
        "int4_dequant": lambda x: F.linear(x, int4._dequantize_padded(x.dtype)),
        "int8_kernel": lambda x: torch._weight_int8pack_mm(x, int8.q, scale8),
        "int8_dequant": lambda x: F.linear(x, int8.q.to(x.dtype)) * scale8,
        "q8_0_halves": lambda x: q8.hi.mm(x) + q8.lo.mm(x) if x.shape[0] <= 32 else q8.mm(x),
        "int8_dyn_act": dyn_int8,
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
                # the fastest block: on a shared machine the median mostly measures the neighbours
                row[label] = min(t.blocked_autorange(min_run_time=min_time).times) * 1e6
            rows.append(row)
            print(_format(row), flush=True)
    return rows


def _format(row: dict) -> str:
    cells = "  ".join(f"{k} {v:8.1f}" for k, v in row.items() if isinstance(v, float))
    return f"{row['layer']:8s} {row['n']:5d}x{row['k']:<5d} M={row['m']:<4d} {cells}"


def layer_summary(rows: list[dict]) -> list[str]:
    """Per batch size, a decoder layer's four matmuls summed: bf16 against our C kernel."""
    out = []
    for m in sorted({r["m"] for r in rows}):
        layer = [r for r in rows if r["m"] == m and r["layer"] in DECODER]
        if len(layer) != len(DECODER) or any("c_int4" not in r for r in layer):
            continue
        bf16, c = sum(r["bf16"] for r in layer), sum(r["c_int4"] for r in layer)
        out.append(f"decoder layer M={m:<4d} bf16 {bf16:8.1f} us, c_int4 {c:8.1f} us: {bf16 / c:.2f}x")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 256])
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--output", default=None)
    args = ap.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}; microseconds per call")
    rows = measure(args.batches, args.min_time)
    for line in layer_summary(rows):
        print(line)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
