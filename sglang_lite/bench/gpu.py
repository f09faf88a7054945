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
import random
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

MODELS = {"smollm2-135m": "dummy:smollm2-135m", "llama-3.2-1b": "dummy:llama-3.2-1b",
          "tiny": "dummy:tiny"}  # tiny: --dry-run, the plumbing on a CPU
TARGET_MODEL = "llama-3.2-1b"  # the targets are stated for this shape


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- workload -----------------------------------------------------------------------------
def workload(n: int, vocab: int, seed: int, prompt: tuple[int, int], output: tuple[int, int]):
    """[(prompt ids, max_new_tokens)]: lengths from ``seed`` alone, so every model gets the
    same lengths whatever its vocabulary."""
    lengths = random.Random(seed)
    sizes = [(lengths.randint(*prompt), lengths.randint(*output)) for _ in range(n)]
    tokens = random.Random(seed + 1)
    return [([tokens.randrange(100, vocab - 100) for _ in range(p)], m) for p, m in sizes]


def _shape(args) -> dict:
    if args.dry_run:
        return dict(n=8, prompt=(8, 64), output=(2, 8))
    if args.quick:
        return dict(n=48, prompt=(64, 512), output=(16, 96))
    return dict(n=256, prompt=(64, 1024), output=(32, 512))


def _preset(name: str):
    from sglang_lite.model.config import PRESETS

    return PRESETS[name]


# ---- phase: this engine --------------------------------------------------------------------
def phase_engine(args) -> dict:
    from sglang_lite import Engine

    cfg = _preset(args.model)
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
    _save(args, res)
    try:
        shape = _shape(args)
        warm = workload(2 if args.dry_run else 16, cfg.vocab_size, 99, shape["prompt"], (8, 64))
        _generate(eng, warm)  # warm-up: Triton JIT variants of prefill and sampling
        work = workload(shape["n"], cfg.vocab_size, 0, shape["prompt"], shape["output"])
        _sync(eng.config.torch_device)
        t = time.perf_counter()
        outs = _generate(eng, work)
        seconds = time.perf_counter() - t
        tokens = sum(len(o["output_ids"]) for o in outs)
        assert tokens == sum(m for _, m in work), "engine: some request stopped early"
        res["throughput"] = {"requests": len(work), "seconds": seconds, "output_tokens": tokens,
                             "tok_per_s": tokens / seconds, "steps": eng.get_stats().get("num_steps")}
        log(f"engine {args.model}: {tokens} tokens in {seconds:.2f}s = {tokens / seconds:,.0f} tok/s")
        _save(args, res)
        new_tokens = 8 if args.dry_run else 64 if args.quick else 256
        res["batch1"] = _engine_batch1(eng, cfg.vocab_size, new_tokens)
        log(f"engine {args.model}: batch-1 decode {res['batch1']['ms_per_token']:.3f} ms/token")
        _save(args, res)
        # The same engine with one host round trip per decode step: what continuous runs buy.
        steps = eng.scheduler.num_continuous_decode_steps
        eng.scheduler.num_continuous_decode_steps = 1
        res["batch1_one_step"] = _engine_batch1(eng, cfg.vocab_size, new_tokens)
        log(f"engine {args.model}: batch-1 decode, one step per sync "
            f"{res['batch1_one_step']['ms_per_token']:.3f} ms/token (runs of {steps}: "
            f"{res['batch1']['ms_per_token']:.3f})")
        _save(args, res)
        eng.flush_cache()  # the same prompts again: recompute them, as the first run did
        _sync(eng.config.torch_device)
        t = time.perf_counter()
        _generate(eng, work)
        seconds = time.perf_counter() - t
        res["throughput_one_step"] = {"seconds": seconds, "tok_per_s": tokens / seconds}
        log(f"engine {args.model}: one step per sync {tokens / seconds:,.0f} tok/s "
            f"(runs of {steps}: {res['throughput']['tok_per_s']:,.0f})")
    finally:
        eng.shutdown()
    return res


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


# ---- phase: HF transformers ----------------------------------------------------------------
def _hf_model(name: str, device: str = "cuda"):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    c = _preset(name)
    kw = dict(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
              num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
              num_key_value_heads=c.num_kv_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
              max_position_embeddings=c.max_position_embeddings, tie_word_embeddings=c.tie_word_embeddings,
              bos_token_id=c.bos_token_id, eos_token_id=list(c.eos_token_ids), pad_token_id=0)
    rope = {"rope_type": "default", "rope_theta": c.rope_theta, **(c.rope_scaling or {})}
    try:  # transformers 5: rope_parameters; RoPE scaling does not change the work anyway
        hf_cfg = LlamaConfig(**kw, rope_parameters=rope)
    except Exception:  # noqa: BLE001
        hf_cfg = LlamaConfig(**kw, rope_theta=c.rope_theta)
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(hf_cfg, attn_implementation="sdpa", dtype=torch.bfloat16)
        except TypeError:  # older transformers spell it torch_dtype
            model = AutoModelForCausalLM.from_config(hf_cfg, attn_implementation="sdpa", torch_dtype=torch.bfloat16)
    return model.to(device=device, dtype=torch.bfloat16).eval()


def phase_hf(args) -> dict:
    import torch

    cfg = _preset(args.model)
    # No network on the device: transformers must not try the Hub for attention kernels.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    model = _hf_model(args.model, "cpu" if args.dry_run else "cuda")
    res: dict = {"startup_s": time.perf_counter() - t0}
    log(f"hf {args.model}: model built in {res['startup_s']:.1f}s")
    shape = _shape(args)
    work = workload(shape["n"], cfg.vocab_size, 0, shape["prompt"], shape["output"])
    budget = args.hf_budget
    for key, fn in (("batch1", lambda: _hf_batch1(model, cfg.vocab_size, 4 if args.dry_run else 16 if args.quick else 48)),
                    ("static", lambda: _hf_static(model, work, 64, budget)),
                    ("continuous", lambda: _hf_continuous(model, work, budget))):
        try:
            res[key] = fn()
            log(f"hf {args.model} {key}: {_brief(res[key])}")
        except Exception as e:  # noqa: BLE001 - one baseline failing must not lose the others
            res[key] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
            log(f"hf {args.model} {key}: FAILED {type(e).__name__}: {e}")
        torch.cuda.empty_cache()
        _save(args, res)
    return res


def _save(args, res: dict) -> None:
    """Results so far, so a phase stopped at its time limit still reports what it measured."""
    if args.result:
        Path(args.result).write_text(json.dumps(res, default=str))


def _brief(r: dict) -> str:
    if "tok_per_s" in r:
        part = f" (partial: {r['requests_done']}/{r['requests']} requests)" if r.get("partial") else ""
        return f"{r['output_tokens']} tokens in {r['seconds']:.1f}s = {r['tok_per_s']:,.0f} tok/s{part}"
    return f"{r.get('ms_per_token', 0):.2f} ms/token"


def _hf_batch1(model, vocab: int, new_tokens: int) -> dict:
    import torch

    prompt = torch.tensor([workload(1, vocab, 7, (128, 128), (1, 1))[0][0]], device=model.device)
    times = {}
    for n in (1, 1 + new_tokens, 1, 1 + new_tokens):
        _sync(model.device)
        t = time.perf_counter()
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                                 min_new_tokens=n, do_sample=False, pad_token_id=0)
        _sync(model.device)
        times[n] = time.perf_counter() - t
        assert out.shape[1] == prompt.shape[1] + n
    return {"ms_per_token": 1000 * (times[1 + new_tokens] - times[1]) / new_tokens, "new_tokens": new_tokens}


def _hf_static(model, work, batch_size: int, budget_s: float) -> dict:
    """Left-padded batches run to their longest request; useful tokens = requested tokens.
    Stops after the batch that crosses ``budget_s`` (then reported as partial)."""
    import torch

    from sglang_lite.bench.offline import left_pad

    start = time.perf_counter()
    useful = done = 0
    for i in range(0, len(work), batch_size):
        chunk = work[i : i + batch_size]
        ids, mask = left_pad([p for p, _ in chunk])
        longest = max(m for _, m in chunk)
        with torch.no_grad():
            model.generate(ids.to(model.device), attention_mask=mask.to(model.device), max_new_tokens=longest,
                           min_new_tokens=longest, do_sample=False, pad_token_id=0)
        useful += sum(m for _, m in chunk)
        done += len(chunk)
        log(f"  hf static: {done}/{len(work)} requests, {time.perf_counter() - start:.1f}s")
        if time.perf_counter() - start > budget_s:
            break
    seconds = time.perf_counter() - start
    return {"batch_size": batch_size, "requests": len(work), "requests_done": done,
            "partial": done < len(work), "seconds": seconds, "output_tokens": useful,
            "tok_per_s": useful / seconds}


def _hf_continuous(model, work, budget_s: float) -> dict:
    """transformers' continuous batching manager, one add_request per request with its own
    max_new_tokens; stops at ``budget_s`` (then reported as partial)."""
    from transformers import GenerationConfig

    gen = GenerationConfig(max_new_tokens=max(m for _, m in work), do_sample=False, eos_token_id=-1,
                           pad_token_id=0)
    manager = model.init_continuous_batching(generation_config=gen)
    if hasattr(manager, "warmup"):
        t = time.perf_counter()
        manager.warmup()
        log(f"  hf continuous: warm-up {time.perf_counter() - t:.1f}s")
    manager.start()
    tokens = done = 0
    start = time.perf_counter()
    try:
        for i, (p, m) in enumerate(work):
            manager.add_request(input_ids=p, request_id=f"r{i}", max_new_tokens=m)
        while done < len(work) and time.perf_counter() - start < budget_s:
            out = manager.get_result(timeout=1)
            if out is None:
                if not manager.is_running():
                    raise RuntimeError("continuous batching thread died")
                continue
            if out.is_finished():
                if getattr(out, "error", None):
                    raise RuntimeError(f"request {out.request_id}: {out.error}")
                done += 1
                tokens += len(out.generated_tokens)
                if done % 64 == 0:
                    log(f"  hf continuous: {done}/{len(work)} requests, {time.perf_counter() - start:.1f}s")
        seconds = time.perf_counter() - start
    finally:
        partial = done < len(work)
        try:
            manager.stop(block=True, timeout=10, **({"hard_stop": True} if partial else {}))
        except TypeError:
            manager.stop(block=True, timeout=10)
    return {"requests": len(work), "requests_done": done, "partial": partial, "seconds": seconds,
            "output_tokens": tokens, "tok_per_s": tokens / seconds}


def _sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


# ---- phase: decode-attention kernel bandwidth ----------------------------------------------
def phase_kernel(args) -> dict:
    from kernels.bench_decode import copy_bandwidth_gbps, decode_bandwidth

    c = _preset(TARGET_MODEL)
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
    work = workload(4 if args.quick else 12, _preset(name).vocab_size, 5, (16, 600), (16, 48))
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
    report: dict = {"mode": mode, "workload": _shape(args), "budget_s": args.budget, "phases": {}}
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
    report["summary"] = _summary(report)
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


def _get(d: dict, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _summary(report: dict) -> dict:
    p = report["phases"]
    out: dict = {"throughput": {}, "batch1_ms_per_token": {}}
    for name in MODELS:
        ours = _get(p, f"engine:{name}", "throughput", "tok_per_s")
        static = _get(p, f"hf:{name}", "static", "tok_per_s")
        cont = _get(p, f"hf:{name}", "continuous", "tok_per_s")
        if ours or static or cont:
            out["throughput"][name] = {"sglang-lite": ours, "hf-static-b64": static, "hf-continuous": cont,
                                       "sglang-lite-one-step": _get(p, f"engine:{name}", "throughput_one_step",
                                                                    "tok_per_s"),
                                       "x_hf_continuous": ours / cont if ours and cont else None,
                                       "x_hf_static": ours / static if ours and static else None}
        b1 = {"sglang-lite": _get(p, f"engine:{name}", "batch1", "ms_per_token"),
              "sglang-lite-one-step": _get(p, f"engine:{name}", "batch1_one_step", "ms_per_token"),
              "hf": _get(p, f"hf:{name}", "batch1", "ms_per_token")}
        if any(b1.values()):
            out["batch1_ms_per_token"][name] = b1
    copy = _get(p, "kernel", "copy_gbps")
    if copy:
        weights = _preset(TARGET_MODEL).num_params() * 2
        out["batch1_floor_ms"] = {TARGET_MODEL: 1000 * weights / (copy * 1e9)}
    out["decode_attention_fraction_of_copy"] = _get(p, "kernel", "best_fraction_4k_plus")
    out["parity"] = {k: _get(p, "parity", k, "token_agreement")
                     for k in ("triton+graphs", "triton-eager", "triton+graphs one-step", "runs_vs_one_step")}
    t = out["throughput"].get(TARGET_MODEL, {})
    b1 = out["batch1_ms_per_token"].get(TARGET_MODEL, {}).get("sglang-lite")
    frac = out["decode_attention_fraction_of_copy"]
    out["targets"] = {
        "throughput >= 10x hf continuous": None if not t.get("x_hf_continuous") else t["x_hf_continuous"] >= 10,
        "batch-1 decode <= 0.75 ms/token": None if b1 is None else b1 <= 0.75,
        "decode attention >= 70% of copy": None if frac is None else frac >= 0.7,
    }
    return out


def render_table(report: dict) -> str:
    s = report["summary"]
    lines = [f"GPU bench ({report['mode']}): {report['machine'].get('gpu')}, "
             f"{report['workload']['n']} requests, prompts {report['workload']['prompt']}, "
             f"outputs {report['workload']['output']}, {report['total_seconds']:.0f}s total", ""]

    def num(x, fmt="{:,.0f}"):
        return fmt.format(x) if isinstance(x, (int, float)) else "-"

    lines.append(f"{'model':<14}{'sglang-lite':>13}{'1-step':>9}{'hf static':>11}{'hf cont.':>10}{'x cont.':>9}"
                 f"{'b1 ms/tok':>11}{'1-step':>8}{'hf b1':>8}")
    for name in MODELS:
        t = s["throughput"].get(name, {})
        b = s["batch1_ms_per_token"].get(name, {})
        if not t and not b:
            continue
        lines.append(f"{name:<14}{num(t.get('sglang-lite')):>13}{num(t.get('sglang-lite-one-step')):>9}"
                     f"{num(t.get('hf-static-b64')):>11}"
                     f"{num(t.get('hf-continuous')):>10}{num(t.get('x_hf_continuous'), '{:.1f}x'):>9}"
                     f"{num(b.get('sglang-lite'), '{:.3f}'):>11}{num(b.get('sglang-lite-one-step'), '{:.3f}'):>8}"
                     f"{num(b.get('hf'), '{:.1f}'):>8}")
    floor = s.get("batch1_floor_ms", {}).get(TARGET_MODEL)
    lines.append(f"batch-1 floor ({TARGET_MODEL}): {num(floor, '{:.3f}')} ms/token")
    lines.append(f"decode attention, best at 4k+ context: {num(s['decode_attention_fraction_of_copy'], '{:.0%}')}"
                 f" of copy ({num(_get(report['phases'], 'kernel', 'copy_gbps'))} GB/s)")
    lines.append("greedy parity vs torch backend (bf16 token agreement): " + ", ".join(
        f"{k} {num(v, '{:.1%}')}" for k, v in s["parity"].items()))
    for k, v in s["targets"].items():
        lines.append(f"target {k}: {'-' if v is None else ('MET' if v else 'missed')}")
    for key, data in report["phases"].items():
        errs = [f"{key}: {data['error']}"] if "error" in data else []
        errs += [f"{key}/{k}: {v['error']}" for k, v in data.items() if isinstance(v, dict) and "error" in v]
        lines += [f"ERROR {e}" for e in errs]
    return "\n".join(lines)


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
