"""Quantized weights on a CUDA GPU, one prepared run (an H200 finishes it in about 3 minutes):

  python -m sglang_lite.bench.quant_gpu [--phases kernels engine] [--quick]

kernels: per linear shape (Llama-3-8B, Llama-3.2-1B, SmolLM2-135M) and row count, the Triton
weight-only kernels (``sglang_lite_kernels.quant_mm``: int4 by rows and in torch's CPU layout,
int8, fp8) against bf16 ``F.linear`` (cuBLAS) and against what a packed weight did on CUDA before them (dequantize the
whole weight, then GEMM), in the same run: median microseconds (``triton.testing.do_bench``,
which clears the L2 between calls), the weight bytes read per microsecond, and each kernel's
relative error against fp64 on its own dequantized weight.

engine: this engine on a random-weight model (Llama-3.2-1B shape, bf16, CUDA graphs) with
``quantization`` none / int8 / int4 / fp8, one after the other: weight bytes resident, batch-1
decode ms/token, batch-32 decode tokens/s, and the greedy tokens' agreement with ``none``.

Writes ``quant_gpu.json`` and ``quant_gpu.txt`` to ``$OUT`` if set, else ``bench_results/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

# (model, layer, out_features, in_features)
SHAPES = [("llama-3-8b", "qkv", 6144, 4096), ("llama-3-8b", "o", 4096, 4096),
          ("llama-3-8b", "gate_up", 28672, 4096), ("llama-3-8b", "down", 4096, 14336),
          ("llama-3.2-1b", "qkv", 3072, 2048), ("llama-3.2-1b", "gate_up", 16384, 2048),
          ("llama-3.2-1b", "down", 2048, 8192), ("llama-3.2-1b", "lm_head", 128256, 2048),
          ("smollm2-135m", "gate_up", 3072, 576), ("smollm2-135m", "down", 576, 1536)]
ROWS = [1, 4, 16, 64, 256]
QUANTIZATIONS = ["none", "int8", "int4", "fp8"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _rel_err(got: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> float:
    ref = x.double() @ w.double().t()
    return ((got.double() - ref).norm() / ref.norm()).item()


def _median_us(fn, x) -> float:
    from triton.testing import do_bench

    return do_bench(lambda: fn(x), warmup=10, rep=40, return_mode="median") * 1e3


def _candidates(w: torch.Tensor) -> dict:
    """label -> (x -> x @ w.T, weight bytes read, the packed weight or None)."""
    from sglang_lite.quant.fp8 import Fp8Weight
    from sglang_lite.quant.int4 import Int4Weight
    from sglang_lite.quant.int8 import Int8Weight
    from sglang_lite.quant.modules import packed_to
    from sglang_lite_kernels import quant_mm

    dev = torch.device("cuda")
    wb = w.to(dev, torch.bfloat16)
    i4_cpu = Int4Weight.quantize(w, 32, torch.bfloat16)
    i4 = packed_to(i4_cpu, dev)  # by rows (Int4RowsWeight), as the engine holds it on CUDA
    i4_cpu = dataclasses.replace(i4_cpu, packed=i4_cpu.packed.to(dev), scale_zero=i4_cpu.scale_zero.to(dev))
    i8 = packed_to(Int8Weight.quantize(w), dev)
    f8 = packed_to(Fp8Weight.quantize(w, 32), dev)
    return {
        "bf16": (lambda x: F.linear(x, wb), wb.nbytes, None),
        "int4": (lambda x: quant_mm.int4_rows_mm(x, i4.q, i4.scale, i4.zero), i4.nbytes, i4),
        "int4_cpu_layout": (lambda x: quant_mm.int4_mm(x, i4_cpu.packed, i4_cpu.scale_zero, 32), i4_cpu.nbytes,
                            i4_cpu),
        "int4_dequant_gemm": (lambda x: F.linear(x, i4._dequantize_padded(x.dtype)), i4.nbytes, None),
        "int8": (lambda x: quant_mm.int8_mm(x, i8.q, i8.scale), i8.nbytes, i8),
        "fp8": (lambda x: quant_mm.fp8_mm(x, f8.q, f8.scale), f8.nbytes, f8),
    }


def phase_kernels(rows: list[int], shapes) -> list[dict]:
    out = []
    for model, layer, n, k in shapes:
        fns = _candidates(torch.randn(n, k) * 0.02)
        for m in rows:
            x = torch.randn(m, k, device="cuda").bfloat16()
            row = {"model": model, "layer": layer, "n": n, "k": k, "m": m}
            for label, (fn, nbytes, packed) in fns.items():
                row[f"{label}_us"] = us = _median_us(fn, x)
                row[f"{label}_gbps"] = nbytes / us / 1e3
                if packed is not None:
                    row[f"{label}_err"] = _rel_err(fn(x)[:, :n].float(), x.float(),
                                                   packed.dequantize(torch.float32))
            row["int4_vs_bf16"] = row["bf16_us"] / row["int4_us"]
            log(f"{model:12s} {layer:8s} {n:6d}x{k:<5d} M={m:<4d} " + " ".join(
                f"{lab} {row[f'{lab}_us']:8.1f}us" for lab in fns))
            out.append(row)
        del fns
        torch.cuda.empty_cache()
    return out


def phase_tiles(shapes) -> list[dict]:
    """The kernels without a dot (gemv) against those with one, and their tile depth and warps
    per program, on a few shapes at 1, 2 and 4 rows."""
    from sglang_lite_kernels import quant_mm

    variants = [(True, 128, 4), (True, 256, 4), (True, 256, 8), (False, 64, 4), (False, 128, 4)]
    out = []
    for model, layer, n, k in shapes:
        fns = _candidates(torch.randn(n, k) * 0.02)
        i4, i8, f8 = fns["int4"][2], fns["int8"][2], fns["fp8"][2]
        for m in (1, 2, 4):
            x = torch.randn(m, k, device="cuda").bfloat16()
            bf16 = _median_us(fns["bf16"][0], x)
            for gemv, block_k, warps in variants:
                opts = dict(block_k=block_k, num_warps=warps, gemv=gemv)
                row = {"model": model, "layer": layer, "m": m, "gemv": gemv, "block_k": block_k,
                       "num_warps": warps, "bf16_us": bf16,
                       "int4_us": _median_us(lambda x, w=i4, o=opts: quant_mm.int4_rows_mm(
                           x, w.q, w.scale, w.zero, **o), x),
                       "int8_us": _median_us(lambda x, w=i8, o=opts: quant_mm.int8_mm(x, w.q, w.scale, **o), x),
                       "fp8_us": _median_us(lambda x, w=f8, o=opts: quant_mm.fp8_mm(x, w.q, w.scale, **o), x)}
                log(f"tiles {model} {layer} M={m} gemv {gemv} block_k {block_k} warps {warps}: bf16 {bf16:.1f}us "
                    f"int4 {row['int4_us']:.1f}us int8 {row['int8_us']:.1f}us fp8 {row['fp8_us']:.1f}us")
                out.append(row)
    return out


def phase_engine(model: str, new_tokens: int) -> list[dict]:
    from sglang_lite import Engine
    from sglang_lite.bench.decode_steps import batch1_ms_per_token, batch_tok_per_s
    from sglang_lite.bench.gpu_common import workload
    from sglang_lite.quant.apply import resident_weight_bytes

    prompts = [p for p, _ in workload(4, 32000, 11, (32, 128), (1, 1))]
    batch = [p for p, _ in workload(32, 32000, 12, (64, 256), (1, 1))]
    results, reference = [], None
    for q in QUANTIZATIONS:
        t0 = time.perf_counter()
        if torch.cuda.is_available():
            log(f"GPU memory free / total: {[round(v / 2**30, 1) for v in torch.cuda.mem_get_info()]} GiB")
        eng = Engine(model, tokenizer=None, dtype="bfloat16", quantization=q, max_total_tokens=65536)
        try:
            row = {"quantization": q, "startup_s": time.perf_counter() - t0,
                   "weight_mb": resident_weight_bytes(eng.model) / 2**20}
            params = {"temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": True}
            outs = eng.generate(input_ids=prompts, sampling_params=[params] * len(prompts))
            tokens = [o["output_ids"] for o in outs]
            if reference is None:
                reference = tokens
            same = sum(a == b for ta, tb in zip(tokens, reference) for a, b in zip(ta, tb))
            row["greedy_agreement"] = same / sum(len(t) for t in reference)
            batch1_ms_per_token(eng, prompts[0], new_tokens)  # warm-up
            row["batch1_ms_per_token"] = batch1_ms_per_token(eng, prompts[0], new_tokens)
            row["batch32_tok_per_s"] = batch_tok_per_s(eng, batch, new_tokens)
        finally:
            eng.shutdown()
        log(f"engine {q:5s}: {row['weight_mb']:7.0f} MB, batch-1 {row['batch1_ms_per_token']:.3f} ms/token, "
            f"batch-32 {row['batch32_tok_per_s']:,.0f} tok/s, greedy agreement {row['greedy_agreement']:.1%}")
        results.append(row)
        torch.cuda.empty_cache()
    return results


def render(res: dict) -> str:
    lines = []
    if res.get("kernels"):
        lines += ["| model | layer | N x K | M | bf16 us | int4 us | int4 (CPU layout) us | int8 us | fp8 us "
                  "| dequant+GEMM us | int4 / bf16 speed-up | int4 GB/s | max rel err |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in res["kernels"]:
            err = max(r["int4_err"], r["int4_cpu_layout_err"], r["int8_err"], r["fp8_err"])
            lines.append(f"| {r['model']} | {r['layer']} | {r['n']}x{r['k']} | {r['m']} | {r['bf16_us']:.1f} | "
                         f"{r['int4_us']:.1f} | {r['int4_cpu_layout_us']:.1f} | {r['int8_us']:.1f} | {r['fp8_us']:.1f} | "
                         f"{r['int4_dequant_gemm_us']:.1f} | {r['int4_vs_bf16']:.2f}x | "
                         f"{r['int4_gbps']:,.0f} | {err:.1e} |")
    if res.get("engine"):
        lines += ["", "| quantization | weights MB | batch-1 ms/token | batch-32 tok/s | greedy agreement |",
                  "|---|---|---|---|---|"]
        for r in res["engine"]:
            lines.append(f"| {r['quantization']} | {r['weight_mb']:.0f} | {r['batch1_ms_per_token']:.3f} | "
                         f"{r['batch32_tok_per_s']:,.0f} | {r['greedy_agreement']:.1%} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phases", nargs="+", default=["kernels", "tiles", "engine"],
                    choices=["kernels", "tiles", "engine"])
    ap.add_argument("--quick", action="store_true", help="fewer shapes and rows")
    ap.add_argument("--model", default="dummy:llama-3.2-1b")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("quant_gpu: needs a CUDA device")
    res: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    outdir = Path(os.environ.get("OUT") or "bench_results")
    outdir.mkdir(parents=True, exist_ok=True)

    def save():
        (outdir / "quant_gpu.json").write_text(json.dumps(res, indent=1))
        (outdir / "quant_gpu.txt").write_text(render(res) + "\n")

    if "kernels" in args.phases:
        shapes = SHAPES[::3] if args.quick else SHAPES
        res["kernels"] = phase_kernels([1, 16, 256] if args.quick else ROWS, shapes)
        save()
    if "tiles" in args.phases:
        res["tiles"] = phase_tiles([SHAPES[2], SHAPES[3], SHAPES[7]])
        save()
    if "engine" in args.phases:
        res["engine"] = phase_engine(args.model, 32 if args.quick else 128)
        save()
    print(render(res))


if __name__ == "__main__":
    main()
