"""The GPU benchmark of issue 5, one prepared run (an H200 finishes it in about 6 minutes):

  python -m sglang_lite.bench.gpu            # full run, hard cap --budget seconds (default 420)
  python -m sglang_lite.bench.gpu --quick    # smoke run, about 2 minutes (small workload, SmolLM2 shape)

Random-weight ``dummy`` models (SmolLM2-135M and Llama-3.2-1B shapes) in bf16; workload 256
requests, prompt lengths 64-1024 and output lengths 32-512 drawn with seed 0, greedy, EOS
ignored. In the same run: this engine, HF transformers static batching (batch 64, sdpa) and
HF transformers continuous batching (per-request max_new_tokens), batch-1 decode ms/token of
both, the decode-attention kernel's bandwidth at 4k+ context against a measured device copy,
and greedy parity of the triton backend (CUDA graphs on and off) against the torch backend.

Each phase runs in its own subprocess with a time limit, so one failing or hanging phase (a
baseline's API change, a CUDA fault that poisons its context) costs only itself. Results go
to ``$OUT`` if set, else ``bench_results/``: ``gpu_bench.json`` and ``gpu_bench.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from sglang_lite.bench.gpu_common import (
    MODELS,
    TARGET_MODEL,
    log,
    preset,
    save,
    shape,
    sync,
    workload,
)
from sglang_lite.bench.gpu_hf import phase_hf
from sglang_lite.bench.gpu_report import render_table, summary


# ---- phase: this engine --------------------------------------------------------------------
def phase_engine(args) -> dict:
    """This engine's throughput and batch-1 decode, with continuous decode runs and then one
    host round trip per decode step (what the runs buy)."""
    cfg = preset(args.model)
    eng, res = _start_engine(args)
    save(args, res)
    try:
        dims = shape(args)
        warm = workload(2 if args.dry_run else 16, cfg.vocab_size, 99, dims["prompt"], (8, 64))
        _generate(eng, warm)  # warm-up: Triton JIT variants of prefill and sampling
        work = workload(dims["n"], cfg.vocab_size, 0, dims["prompt"], dims["output"])
        res["throughput"] = _throughput(eng, work)
        res["throughput"]["steps"] = eng.get_stats().get("num_steps")
        log(f"engine {args.model}: {res['throughput']['output_tokens']} tokens in "
            f"{res['throughput']['seconds']:.2f}s = {res['throughput']['tok_per_s']:,.0f} tok/s")
        save(args, res)
        new_tokens = 8 if args.dry_run else 64 if args.quick else 256
        res["batch1"] = _engine_batch1(eng, cfg.vocab_size, new_tokens)
        log(f"engine {args.model}: batch-1 decode {res['batch1']['ms_per_token']:.3f} ms/token")
        save(args, res)
        steps = eng.scheduler.num_continuous_decode_steps
        eng.scheduler.num_continuous_decode_steps = 1
        res["batch1_one_step"] = _engine_batch1(eng, cfg.vocab_size, new_tokens)
        log(f"engine {args.model}: batch-1 decode, one step per sync "
            f"{res['batch1_one_step']['ms_per_token']:.3f} ms/token (runs of {steps}: "
            f"{res['batch1']['ms_per_token']:.3f})")
        save(args, res)
        eng.flush_cache()  # the same prompts again: recompute them, as the first run did
        one = _throughput(eng, work)
        res["throughput_one_step"] = {"seconds": one["seconds"], "tok_per_s": one["tok_per_s"]}
        log(f"engine {args.model}: one step per sync {one['tok_per_s']:,.0f} tok/s "
            f"(runs of {steps}: {res['throughput']['tok_per_s']:,.0f})")
    finally:
        eng.shutdown()
    return res


def _start_engine(args):
    """(the engine, its startup figures and the settings it resolved)."""
    from sglang_lite import Engine

    t0 = time.perf_counter()
    steps = args.decode_steps or (8 if args.dry_run else None)  # None: the engine's default
    eng = Engine(MODELS[args.model], tokenizer=None,
                 **({"num_continuous_decode_steps": steps} if steps else {}))
    res: dict = {"startup_s": time.perf_counter() - t0, "config": {
        k: getattr(eng.config, k) for k in ("dtype", "attention_backend", "disable_cuda_graph",
                                            "cuda_graph_max_bs", "max_prefill_tokens", "chunked_prefill_size",
                                            "num_continuous_decode_steps")},
        "cuda_graph_sizes": getattr(eng.scheduler.runner.graph_runner, "batch_sizes", None),
        "kv_pool_tokens": eng.kv_pool.num_slots}
    log(f"engine {args.model}: up in {res['startup_s']:.1f}s (graphs: {res['cuda_graph_sizes']})")
    return eng, res


def _throughput(eng, work) -> dict:
    """The whole workload through the engine; every request must get all its tokens."""
    sync(eng.config.torch_device)
    t = time.perf_counter()
    outs = _generate(eng, work)
    seconds = time.perf_counter() - t
    tokens = sum(len(o["output_ids"]) for o in outs)
    assert tokens == sum(m for _, m in work), "engine: some request stopped early"
    return {"requests": len(work), "seconds": seconds, "output_tokens": tokens, "tok_per_s": tokens / seconds}


def _generate(eng, work):
    params = [{"temperature": 0, "max_new_tokens": m, "ignore_eos": True} for _, m in work]
    return eng.generate(input_ids=[p for p, _ in work], sampling_params=params)


def _engine_batch1(eng, vocab: int, new_tokens: int) -> dict:
    """(time for 1 + new_tokens tokens - time for 1 token) / new_tokens: decode only."""
    from sglang_lite.bench.decode_steps import batch1_ms_per_token

    prompt = workload(1, vocab, 7, (128, 128), (1, 1))[0][0]
    batch1_ms_per_token(eng, prompt, new_tokens)  # warm-up
    return {"ms_per_token": batch1_ms_per_token(eng, prompt, new_tokens), "new_tokens": new_tokens,
            "prompt_tokens": len(prompt)}


# ---- phase: decode-attention kernel bandwidth ----------------------------------------------
def phase_kernel(args) -> dict:
    from sglang_lite_kernels.bench_decode import copy_bandwidth_gbps, decode_bandwidth

    c = preset(TARGET_MODEL)
    copy = max(copy_bandwidth_gbps() for _ in range(3))
    log(f"kernel: device copy {copy:,.0f} GB/s")
    shapes = [(32, 4096), (64, 8192)] if args.quick else [(32, 4096), (16, 16384), (64, 8192), (4, 65536),
                                                          (1, 4096), (1, 32768)]
    rows = []
    for batch, ctx in shapes:
        r = decode_bandwidth(batch, ctx, num_heads=c.num_heads, num_kv_heads=c.num_kv_heads, head_dim=c.head_dim)
        r["fraction_of_copy"] = r["gbps"] / copy
        r["kv_bytes"] = 2 * batch * ctx * c.num_kv_heads * c.head_dim * 2
        rows.append(r)
        log(f"kernel: B={batch:3d} ctx={ctx:6d} {r['ms']:.3f} ms {r['gbps']:,.0f} GB/s "
            f"({100 * r['fraction_of_copy']:.0f}% of copy)")
    big = [r for r in rows if r["kv_bytes"] >= 256 << 20]  # well past the 50 MB L2
    return {"copy_gbps": copy, "decode": rows,
            "best_fraction_4k_plus": max((r["fraction_of_copy"] for r in big), default=None)}


# ---- phase: parity triton (graphs on / off) vs torch backend -------------------------------
def phase_parity(args) -> dict:
    import gc

    import torch

    from sglang_lite import Engine

    name = "smollm2-135m"
    work = workload(4 if args.quick else 12, preset(name).vocab_size, 5, (16, 600), (16, 48))
    outs = {}
    for label, opts in (("torch", dict(attention_backend="torch")),
                        ("triton+graphs", {}), ("triton-eager", dict(disable_cuda_graph=True)),
                        ("triton+graphs one-step", dict(num_continuous_decode_steps=1))):
        eng = Engine(MODELS[name], tokenizer=None, max_total_tokens=65536, max_running_requests=32,
                     cuda_graph_max_bs=16, **opts)
        try:
            outs[label] = [o["output_ids"] for o in _generate(eng, work)]
        finally:
            eng.shutdown()
            del eng
            gc.collect()
            torch.cuda.empty_cache()
        log(f"parity: {label} done")
    res = {"model": name, "dtype": "bfloat16", "prompts": len(work)}
    for label in ("triton+graphs", "triton-eager", "triton+graphs one-step"):
        res[label] = _agreement(outs["torch"], outs[label])
    res["graphs_vs_eager"] = _agreement(outs["triton-eager"], outs["triton+graphs"])
    res["runs_vs_one_step"] = _agreement(outs["triton+graphs one-step"], outs["triton+graphs"])
    log(f"parity: {json.dumps({k: v for k, v in res.items() if isinstance(v, dict)})}")
    return res


def _agreement(ref: list[list[int]], got: list[list[int]]) -> dict:
    """Tokens equal before each sequence's first divergence, over all tokens (after a bf16
    near-tie the two sequences continue from different text, so later tokens say nothing)."""
    total = sum(len(r) for r in ref)
    prefix = sum(next((i for i, (a, b) in enumerate(zip(r, g)) if a != b), len(r)) for r, g in zip(ref, got))
    identical = sum(r == g for r, g in zip(ref, got))
    return {"token_agreement": prefix / total, "identical_sequences": identical, "sequences": len(ref)}


# ---- orchestration -------------------------------------------------------------------------
PHASES = {"engine": phase_engine, "hf": phase_hf, "kernel": phase_kernel, "parity": phase_parity}


def _plan(args) -> list[tuple[str, str | None, float, float]]:
    """(phase, model, time limit s, seconds per HF throughput baseline) in priority order:
    the target model first. Expected on an H200: about 20 + 60 + 190 + 50 + 40 + 70 s."""
    if args.dry_run:
        return [("kernel", None, 60, 0), ("engine", "tiny", 120, 0), ("hf", "tiny", 120, 10)]
    if args.quick:
        return [("kernel", None, 40, 0), ("engine", "smollm2-135m", 90, 0), ("hf", "smollm2-135m", 90, 12),
                ("parity", None, 90, 0)]
    return [("kernel", None, 60, 0), ("engine", TARGET_MODEL, 150, 0), ("hf", TARGET_MODEL, 240, args.hf_budget),
            ("parity", None, 100, 0), ("engine", "smollm2-135m", 100, 0), ("hf", "smollm2-135m", 120, 30)]


def _run_phase(phase: str, model: str | None, limit: float, hf_budget: float, args) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        result_path = f.name
    cmd = [sys.executable, "-m", "sglang_lite.bench.gpu", "--phase", phase, "--result", result_path,
           "--hf-budget", str(hf_budget)]
    if args.decode_steps:
        cmd += ["--decode-steps", str(args.decode_steps)]
    if model:
        cmd += ["--model", model]
    for flag in ("quick", "dry_run"):
        if getattr(args, flag):
            cmd.append("--" + flag.replace("_", "-"))
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, timeout=limit, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        rc: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    seconds = time.perf_counter() - t
    try:
        data = json.loads(Path(result_path).read_text() or "{}")
    except (OSError, json.JSONDecodeError):
        data = {}
    finally:
        Path(result_path).unlink(missing_ok=True)
    if rc != 0 and "error" not in data:
        data["error"] = f"phase exited with {rc} after {seconds:.0f}s (limit {limit:.0f}s)"
    data["phase_seconds"] = seconds
    return data


def orchestrate(args) -> dict:
    started = time.perf_counter()
    mode = "dry-run" if args.dry_run else "quick" if args.quick else "full"
    report: dict = {"mode": mode, "workload": shape(args), "budget_s": args.budget, "phases": {}}
    report["machine"] = _machine()
    log(f"gpu bench: {report['machine']}")
    for phase, model, limit, hf_budget in _plan(args):
        left = args.budget - (time.perf_counter() - started)
        key = f"{phase}:{model}" if model else phase
        if left < 20:
            report["phases"][key] = {"error": "skipped: out of time budget"}
            log(f"{key}: skipped (out of budget)")
            continue
        log(f"== {key} (limit {min(limit, left):.0f}s)")
        report["phases"][key] = _run_phase(phase, model, min(limit, left), hf_budget, args)
    report["total_seconds"] = time.perf_counter() - started
    report["summary"] = summary(report)
    return report


def _machine() -> dict:
    try:
        import torch
        import transformers
        import triton

        return {"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                "torch": torch.__version__, "triton": triton.__version__,
                "transformers": transformers.__version__}
    except Exception as e:  # noqa: BLE001
        return {"error": str(e)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2-minute smoke run")
    ap.add_argument("--budget", type=float, default=None, help="hard cap on the whole run, seconds")
    ap.add_argument("--hf-budget", type=float, default=80.0,
                    help="seconds per HF throughput baseline on the target model (then partial)")
    ap.add_argument("--dry-run", action="store_true", help="the plumbing on a CPU with a tiny model")
    ap.add_argument("--decode-steps", type=int, default=None,
                    help="num_continuous_decode_steps of the engine (default: the engine's)")
    ap.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=sorted(MODELS), help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.phase:
        _phase_main(args)
        return
    if args.budget is None:
        args.budget = 300.0 if args.dry_run else 140.0 if args.quick else 420.0
    report = orchestrate(args)
    out_dir = Path(os.environ.get("OUT") or "bench_results")
    out_dir.mkdir(parents=True, exist_ok=True)
    table = render_table(report)
    (out_dir / "gpu_bench.json").write_text(json.dumps(report, indent=2, default=str))
    (out_dir / "gpu_bench.txt").write_text(table + "\n")
    print("\n" + table, flush=True)
    print(f"\nwrote {out_dir / 'gpu_bench.json'} and {out_dir / 'gpu_bench.txt'}", flush=True)


def _phase_main(args) -> None:
    """One phase in this process; its result (or error) goes to --result as JSON."""
    try:
        data = PHASES[args.phase](args)
    except Exception as e:  # noqa: BLE001
        data = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        log(f"phase {args.phase} failed: {data['error']}")
        traceback.print_exc()
    if args.result:
        Path(args.result).write_text(json.dumps(data, default=str))
    sys.exit(1 if "error" in data else 0)


if __name__ == "__main__":
    main()
