"""Offline throughput: a seeded workload through this engine and, in the same run, its
baseline; prints a table with ratios and writes JSON.

  python -m sglang_lite.bench.offline                       # mixed workload vs HF static batching
  python -m sglang_lite.bench.offline --workload cache      # shared-prefix / multi-turn / no-sharing,
                                                            # radix cache on vs off
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import asdict, dataclass

import torch

from sglang_lite import Engine
from sglang_lite.bench.report import write_report


@dataclass
class Result:
    name: str
    seconds: float
    output_tokens: int
    cache_hit_rate: float | None = None

    @property
    def tok_per_s(self) -> float:
        return self.output_tokens / self.seconds


def _random_ids(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(100, vocab - 100) for _ in range(n)]


def mixed_workload(n: int, vocab: int, seed: int = 0, prompt=(32, 256), output=(16, 128)):
    rng = random.Random(seed)
    return [(_random_ids(rng, rng.randint(*prompt), vocab), rng.randint(*output)) for _ in range(n)]


def run_engine(engine: Engine, work) -> Result:
    ids = [p for p, _ in work]
    params = [{"temperature": 0, "max_new_tokens": m, "ignore_eos": True} for _, m in work]
    start = time.perf_counter()
    outs = engine.generate(input_ids=ids, sampling_params=params)
    seconds = time.perf_counter() - start
    return Result("sglang-lite", seconds, sum(len(o["output_ids"]) for o in outs))


def left_pad(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded input ids and attention mask [len(prompts), longest], as HF batches them."""
    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.tensor(p)
        mask[row, width - len(p):] = 1
    return ids, mask


def run_hf_static(model_dir: str, work, batch_size: int, dtype: torch.dtype, device: str) -> Result:
    """HF transformers, left-padded batches of ``batch_size``, each run to its longest request."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    start = time.perf_counter()
    useful = 0
    for i in range(0, len(work), batch_size):
        chunk = work[i : i + batch_size]
        ids, mask = left_pad([p for p, _ in chunk])
        longest = max(m for _, m in chunk)
        with torch.no_grad():
            model.generate(ids.to(device), attention_mask=mask.to(device), max_new_tokens=longest,
                           min_new_tokens=longest, do_sample=False, pad_token_id=0)
        useful += sum(m for _, m in chunk)
    return Result(f"hf-static-b{batch_size}", time.perf_counter() - start, useful)


def bench_mixed(args) -> dict:
    engine = Engine(args.model, **({"dtype": args.dtype} if args.dtype else {}),
                    **({"quantization": args.quantization} if args.quantization else {}))
    work = mixed_workload(args.num_requests, engine.model_config.vocab_size, args.seed)
    run_engine(engine, mixed_workload(4, engine.model_config.vocab_size, seed=99, output=(4, 8)))  # warm-up
    ours = run_engine(engine, work)
    results = [ours]
    model_dir = str(engine.source.path)
    dtype, device = engine.config.torch_dtype, engine.config.device
    engine.shutdown()
    if not args.skip_hf:
        for b in args.hf_batch_sizes:
            results.append(run_hf_static(model_dir, work, b, dtype, device))
    _print_table("mixed", results, baseline=results[-1] if len(results) > 1 else None)
    return {"workload": "mixed", "num_requests": len(work), "results": [_row(r) for r in results]}


# ---- prefix-cache workloads -------------------------------------------------------------------
def shared_prefix_workload(vocab, groups, per_group, prefix_len, suffix_len, out_len, seed=0):
    rng = random.Random(seed)
    work = []
    for _ in range(groups):
        prefix = _random_ids(rng, prefix_len, vocab)
        work += [(prefix + _random_ids(rng, suffix_len, vocab), out_len) for _ in range(per_group)]
    rng.shuffle(work)
    return work


def run_multi_turn(engine: Engine, convs: int, turns: int, user_len: int, out_len: int, seed=0) -> Result:
    """Conversations whose every turn is sent after the previous answer (turns are sequential
    within a conversation; conversations run concurrently, one batch per turn)."""
    rng = random.Random(seed)
    vocab = engine.model_config.vocab_size
    history = [[] for _ in range(convs)]
    params = {"temperature": 0, "max_new_tokens": out_len, "ignore_eos": True}
    total, start = 0, time.perf_counter()
    for _ in range(turns):
        for h in history:
            h += _random_ids(rng, user_len, vocab)
        outs = engine.generate(input_ids=[list(h) for h in history], sampling_params=params)
        for h, o in zip(history, outs):
            h += o["output_ids"]
            total += len(o["output_ids"])
    return Result("", time.perf_counter() - start, total)


def bench_cache(args) -> dict:
    """Each workload on two engines, cache on and off, alternating runs (``--repeats``) so
    machine noise hits both alike; medians are reported."""
    import statistics

    engines = {"cache-on": Engine(args.model), "cache-off": Engine(args.model, disable_radix_cache=True)}
    vocab = engines["cache-on"].model_config.vocab_size
    for engine in engines.values():
        run_engine(engine, mixed_workload(4, vocab, seed=99, output=(4, 8)))  # warm-up
    out = {}
    for name, fn in _cache_workloads(args, vocab).items():
        runs: dict[str, list[Result]] = {label: [] for label in engines}
        for _ in range(args.repeats):
            for label, engine in engines.items():
                engine.flush_cache()
                before = engine.get_stats()
                res = fn(engine)
                after = engine.get_stats()
                prompt = after["num_prompt_tokens"] - before["num_prompt_tokens"]
                cached = after["num_cached_prompt_tokens"] - before["num_cached_prompt_tokens"]
                res.name, res.cache_hit_rate = label, cached / prompt if prompt else 0.0
                runs[label].append(res)
        on, off = (Result(label, statistics.median(r.seconds for r in rs), rs[0].output_tokens,
                          rs[0].cache_hit_rate) for label, rs in runs.items())
        _print_table(f"{name} (median of {args.repeats})", [on, off], baseline=off)
        theory = _theoretical_hit_rate(name, args)
        if theory is not None:
            print(f"theoretical maximum hit rate (token granularity): {theory:.1%}")
        out[name] = {"results": [_row(on), _row(off)], "speedup": on.tok_per_s / off.tok_per_s,
                     "theoretical_hit_rate": _theoretical_hit_rate(name, args),
                     "runs": {label: [_row(r) for r in rs] for label, rs in runs.items()}}
    for engine in engines.values():
        engine.shutdown()
    return out


def _cache_workloads(args, vocab):
    g, per, pre, suf, out = args.groups, args.per_group, args.prefix_len, args.suffix_len, args.output_len
    shared = shared_prefix_workload(vocab, g, per, pre, suf, out)
    rng = random.Random(1)
    unique = [(_random_ids(rng, pre // 2 + suf, vocab), out) for _ in range(g * per)]
    return {
        "shared-prefix": lambda e: run_engine(e, shared),
        "multi-turn": lambda e: run_multi_turn(e, args.convs, args.turns, args.user_len, out),
        "no-sharing": lambda e: run_engine(e, unique),
    }


def _theoretical_hit_rate(name: str, args) -> float | None:
    if name == "shared-prefix":
        total = args.groups * args.per_group * (args.prefix_len + args.suffix_len)
        first = args.groups * (args.prefix_len + args.suffix_len) + args.groups * (args.per_group - 1) * args.suffix_len
        return 1 - first / total
    if name == "multi-turn":
        # Turn t's prompt is everything before it plus a new user message; all but the new
        # message was seen before (token granularity; pages round each turn's end down).
        prev = [t * (args.user_len + args.output_len) for t in range(args.turns)]
        prompts = [p + args.user_len for p in prev]
        return sum(prev) / sum(prompts)
    if name == "no-sharing":
        return 0.0
    return None


def _row(r: Result) -> dict:
    return {**asdict(r), "tok_per_s": r.tok_per_s}


def _print_table(title: str, results: list[Result], baseline: Result | None) -> None:
    print(f"\n== {title} ==")
    print(f"{'system':<18}{'seconds':>10}{'out tok':>10}{'tok/s':>10}{'ratio':>8}{'hit rate':>10}")
    for r in results:
        ratio = f"{r.tok_per_s / baseline.tok_per_s:.2f}x" if baseline else "-"
        hit = f"{r.cache_hit_rate:.1%}" if r.cache_hit_rate is not None else "-"
        print(f"{r.name:<18}{r.seconds:>10.2f}{r.output_tokens:>10}{r.tok_per_s:>10.1f}{ratio:>8}{hit:>10}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=["mixed", "cache"], default="mixed")
    ap.add_argument("--model", default=None)
    ap.add_argument("--dtype", default=None, help="the engine's and the baseline's (default: the engine's)")
    ap.add_argument("--quantization", default=None, help="the engine's (default: auto)")
    ap.add_argument("--num-requests", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hf-batch-sizes", type=int, nargs="*", default=[32])
    ap.add_argument("--skip-hf", action="store_true")
    # cache workloads (CPU-sized defaults; the GPU shape is 4 x 16, 1024 / 64 / 64)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--per-group", type=int, default=8)
    ap.add_argument("--prefix-len", type=int, default=512)
    ap.add_argument("--suffix-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--convs", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--user-len", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--output", default=None)
    args = ap.parse_args(argv)
    report = bench_mixed(args) if args.workload == "mixed" else bench_cache(args)
    report["machine"] = {"cpu_cores": torch.get_num_threads(), "cuda": torch.cuda.is_available()}
    write_report(report, args.output or f"bench_results/offline_{args.workload}.json")


if __name__ == "__main__":
    main()
