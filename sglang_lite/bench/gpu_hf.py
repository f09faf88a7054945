"""The GPU benchmark's HF transformers baselines on the same workload: static batching
(left-padded batches run to their longest request), transformers' continuous batching, and
batch-1 decode ms/token; random weights in the benchmark model's shape."""

from __future__ import annotations

import os
import time
import traceback

from sglang_lite.bench.gpu_common import log, preset, save, shape, sync, workload


def hf_model(name: str, device: str = "cuda"):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    c = preset(name)
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

    cfg = preset(args.model)
    # No network on the device: transformers must not try the Hub for attention kernels.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    model = hf_model(args.model, "cpu" if args.dry_run else "cuda")
    res: dict = {"startup_s": time.perf_counter() - t0}
    log(f"hf {args.model}: model built in {res['startup_s']:.1f}s")
    dims = shape(args)
    work = workload(dims["n"], cfg.vocab_size, 0, dims["prompt"], dims["output"])
    budget = args.hf_budget
    for key, fn in (("batch1", lambda: _hf_batch1(model, cfg.vocab_size, 4 if args.dry_run else 16 if args.quick else 48)),
                    ("static", lambda: _hf_static(model, work, 64, budget)),
                    ("continuous", lambda: _hf_continuous(model, work, budget, small_cache=args.dry_run))):
        try:
            res[key] = fn()
            log(f"hf {args.model} {key}: {_brief(res[key])}")
        except Exception as e:  # noqa: BLE001 - one baseline failing must not lose the others
            res[key] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
            log(f"hf {args.model} {key}: FAILED {type(e).__name__}: {e}")
        torch.cuda.empty_cache()
        save(args, res)
    return res


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
        sync(model.device)
        t = time.perf_counter()
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                                 min_new_tokens=n, do_sample=False, pad_token_id=0)
        sync(model.device)
        times[n] = min(times.get(n, float("inf")), time.perf_counter() - t)  # the least of the two runs
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


def _hf_continuous(model, work, budget_s: float, small_cache: bool = False) -> dict:
    """transformers' continuous batching manager, one add_request per request with its own
    max_new_tokens; stops at ``budget_s`` (then reported as partial). ``small_cache`` (the CPU
    dry run): a 256-token batch budget, since the manager's warm-up runs a batch of that size
    (the default, 8192 tokens, takes about a minute on a CPU)."""
    from transformers import GenerationConfig

    gen = GenerationConfig(max_new_tokens=max(m for _, m in work), do_sample=False, eos_token_id=-1,
                           pad_token_id=0)
    manager = model.init_continuous_batching(generation_config=gen, **_cb_options(small_cache))
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


def _cb_options(small_cache: bool) -> dict:
    if not small_cache:
        return {}
    try:
        from transformers import ContinuousBatchingConfig
    except ImportError:  # an older transformers: its defaults
        return {}
    return {"continuous_batching_config": ContinuousBatchingConfig(num_blocks=32, max_batch_tokens=256)}
