"""Online serving benchmark against any OpenAI-compatible server: streaming /v1/completions at
a Poisson request rate (open loop) or a fixed concurrency (closed loop); prints a table and
writes JSON.

  python -m sglang_lite.bench.serving --base-url http://127.0.0.1:30000 --concurrency 8
  python -m sglang_lite.bench.serving --base-url ... --request-rate 4 --workload shared-prefix
  python -m sglang_lite.bench.serving --base-url ... --workload json --num-prompts 16

Workloads (seeded): ``mixed`` (random token-id prompts and output lengths, as the offline
benchmark), ``shared-prefix`` (groups sharing a long prefix), ``json`` (text prompts with a
JSON-schema response_format; outputs end when the object is complete).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from sglang_lite.bench.report import write_report

PERSON_SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "city": {"type": "string", "maxLength": 24}}, "required": ["name", "age", "city"],
    "additionalProperties": False}
_NAMES = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Ken", "Frances", "John", "Radia"]


@dataclass(slots=True)
class Work:
    prompt: str | list[int]
    max_tokens: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Sample:
    ok: bool
    start: float = 0.0
    ttft: float = 0.0
    e2e: float = 0.0
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    itl: list[float] = field(default_factory=list)
    error: str | None = None


# ---- workloads --------------------------------------------------------------------------------
def _ids(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(100, vocab - 100) for _ in range(n)]


def make_workload(args) -> list[Work]:
    rng = random.Random(args.seed)
    n = args.num_prompts
    if args.workload == "mixed":
        return [Work(_ids(rng, rng.randint(*args.prompt_len), args.vocab_size), rng.randint(*args.output_len),
                     {"ignore_eos": True}) for _ in range(n)]
    if args.workload == "shared-prefix":
        groups = max(1, min(args.groups, n))
        prefixes = [_ids(rng, args.prefix_len, args.vocab_size) for _ in range(groups)]
        work = [Work(prefixes[i % groups] + _ids(rng, args.suffix_len, args.vocab_size),
                     rng.randint(*args.output_len), {"ignore_eos": True}) for i in range(n)]
        rng.shuffle(work)
        return work
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA}}
    return [Work(f"Describe {rng.choice(_NAMES)}, a person, as JSON with name, age and city.",
                 max(args.output_len[1], 64), {"response_format": fmt}) for _ in range(n)]


# ---- one request --------------------------------------------------------------------------------
async def _send(client: httpx.AsyncClient, model: str, work: Work) -> Sample:
    body = {"model": model, "prompt": work.prompt, "max_tokens": work.max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}, **work.extra}
    s = Sample(ok=False, start=time.perf_counter())
    last, chunks = None, 0
    try:
        async with client.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code != 200:
                s.error = f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"
                return s
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    s.error = str(event["error"])
                    return s
                now = time.perf_counter()
                if event.get("choices") and (event["choices"][0].get("text") or chunks == 0):
                    if last is None:
                        s.ttft = now - s.start
                    else:
                        s.itl.append(now - last)
                    last, chunks = now, chunks + 1
                usage = event.get("usage")
                if usage:
                    s.output_tokens = usage["completion_tokens"]
                    s.prompt_tokens = usage["prompt_tokens"]
                    s.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        s.e2e = time.perf_counter() - s.start
        s.output_tokens = s.output_tokens or chunks
        s.ok = True
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        s.error = f"{type(e).__name__}: {e}"
    return s


# ---- load generation ----------------------------------------------------------------------------
async def run_load(args, model: str, work: list[Work]) -> tuple[list[Sample], float]:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    async with httpx.AsyncClient(base_url=args.base_url, timeout=args.timeout, limits=limits,
                                 headers=headers) as client:
        await _send(client, model, Work(work[0].prompt, 2, work[0].extra))  # warm-up, not counted
        start = time.perf_counter()
        if args.concurrency:
            queue = list(reversed(work))
            samples: list[Sample] = []

            async def worker():
                while queue:
                    samples.append(await _send(client, model, queue.pop()))

            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        else:
            rng = random.Random(args.seed + 1)
            tasks = []
            for w in work:
                tasks.append(asyncio.ensure_future(_send(client, model, w)))
                if args.request_rate != float("inf"):
                    await asyncio.sleep(rng.expovariate(args.request_rate))
            samples = list(await asyncio.gather(*tasks))
        return samples, time.perf_counter() - start


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summarize(samples: list[Sample], duration: float) -> dict[str, Any]:
    ok = [s for s in samples if s.ok]
    out_tokens = sum(s.output_tokens for s in ok)
    ttft = [s.ttft * 1e3 for s in ok]
    tpot = [(s.e2e - s.ttft) / (s.output_tokens - 1) * 1e3 for s in ok if s.output_tokens > 1]
    itl = [x * 1e3 for s in ok for x in s.itl]
    e2e = [s.e2e * 1e3 for s in ok]
    prompt_tokens = sum(s.prompt_tokens for s in ok)
    return {
        "completed": len(ok), "failed": len(samples) - len(ok), "duration_s": duration,
        "request_throughput": len(ok) / duration, "output_throughput": out_tokens / duration,
        "total_output_tokens": out_tokens, "total_prompt_tokens": prompt_tokens,
        "cached_prompt_tokens": sum(s.cached_tokens for s in ok),
        **{f"{name}_{stat}": value for name, xs in (("ttft_ms", ttft), ("tpot_ms", tpot), ("itl_ms", itl),
                                                     ("e2e_ms", e2e))
           for stat, value in (("mean", statistics.fmean(xs) if xs else float("nan")),
                               ("p50", _pct(xs, 50)), ("p99", _pct(xs, 99)))},
        "errors": sorted({s.error for s in samples if s.error})[:5],
    }


def _print(report: dict[str, Any]) -> None:
    r = report["result"]
    print(f"\n== serving: {report['workload']}, {report['load']} ({report['model']}) ==")
    rows = [("completed / failed", f"{r['completed']} / {r['failed']}"),
            ("duration (s)", f"{r['duration_s']:.2f}"),
            ("request throughput (req/s)", f"{r['request_throughput']:.2f}"),
            ("output throughput (tok/s)", f"{r['output_throughput']:.1f}"),
            ("cached / prompt tokens", f"{r['cached_prompt_tokens']} / {r['total_prompt_tokens']}")]
    for name in ("ttft", "tpot", "itl", "e2e"):
        rows.append((f"{name.upper()} p50 / p99 (ms)", f"{r[name + '_ms_p50']:.1f} / {r[name + '_ms_p99']:.1f}"))
    for k, v in rows:
        print(f"{k:<30}{v:>20}")
    for e in r["errors"]:
        print(f"error: {e}")


async def _model_name(args) -> str:
    if args.model:
        return args.model
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    async with httpx.AsyncClient(base_url=args.base_url, timeout=30, headers=headers) as client:
        r = await client.get("/v1/models")
        r.raise_for_status()
        return r.json()["data"][0]["id"]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:30000")
    ap.add_argument("--model", default=None, help="default: the first id in /v1/models")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--workload", choices=["mixed", "shared-prefix", "json"], default="mixed")
    ap.add_argument("--num-prompts", type=int, default=32)
    load = ap.add_mutually_exclusive_group()
    load.add_argument("--request-rate", type=float, default=float("inf"),
                      help="Poisson arrivals per second (inf: all at once)")
    load.add_argument("--concurrency", type=int, default=None, help="fixed number of requests in flight")
    ap.add_argument("--prompt-len", type=int, nargs=2, default=[32, 256], metavar=("MIN", "MAX"))
    ap.add_argument("--output-len", type=int, nargs=2, default=[16, 128], metavar=("MIN", "MAX"))
    ap.add_argument("--groups", type=int, default=4, help="shared-prefix: number of prefixes")
    ap.add_argument("--prefix-len", type=int, default=512)
    ap.add_argument("--suffix-len", type=int, default=32)
    ap.add_argument("--vocab-size", type=int, default=49152, help="token-id prompts are drawn below it")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--output", default=None, help="JSON path (default: bench_results/serving_*.json)")
    args = ap.parse_args(argv)
    if args.concurrency is not None and args.concurrency < 1:
        ap.error("--concurrency must be >= 1")

    model = asyncio.run(_model_name(args))
    work = make_workload(args)
    samples, duration = asyncio.run(run_load(args, model, work))
    load_desc = f"concurrency {args.concurrency}" if args.concurrency else f"rate {args.request_rate}/s"
    report = {"workload": args.workload, "load": load_desc, "model": model, "base_url": args.base_url,
              "num_prompts": args.num_prompts, "args": {k: v for k, v in vars(args).items() if k != "api_key"},
              "result": summarize(samples, duration), "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    _print(report)
    tag = f"c{args.concurrency}" if args.concurrency else f"r{args.request_rate}"
    write_report(report, args.output or f"bench_results/serving_{args.workload}_{tag}.json")
    return report


if __name__ == "__main__":
    main()
