"""Router benchmark: a shared-prefix workload through ``sglang-lite router`` over the same
replicas, once per policy (cache_aware, then round_robin, in one run), every replica's cache
flushed before each; prints a table and writes JSON.

  python -m sglang_lite.bench.router                      # starts 2 replicas of the embedded model
  python -m sglang_lite.bench.router --worker-urls http://127.0.0.1:30001 http://127.0.0.1:30002

Requests are streamed through the benchmark client of ``bench.serving`` (same workload
generator: ``--groups`` prefixes of ``--prefix-len`` random token ids, each request adds
``--suffix-len`` of its own). The replicas' KV pool (``--kv-cache-memory``) is sized so that
one replica holds its share of the prefixes under cache-aware routing but not all of them,
which is what round robin asks of it. Hit rate = cached prompt tokens / prompt tokens, from the
replicas' ``usage.prompt_tokens_details.cached_tokens``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from typing import Any

import httpx

from sglang_lite.bench.report import write_report
from sglang_lite.bench.serving import make_workload, run_load, summarize
from sglang_lite.loopback import AppThread, ServerStartError, free_port, wait_until_healthy
from sglang_lite.router.app import create_router_app
from sglang_lite.router.args import RouterConfig
from sglang_lite.router.launcher import stop_replicas

POLICIES = ("cache_aware", "round_robin")


def start_replicas(n: int, replica_args: list[str]) -> tuple[list[subprocess.Popen], list[str]]:
    procs, urls = [], []
    for _ in range(n):
        port = free_port()
        cmd = [sys.executable, "-m", "sglang_lite.server", "--port", str(port), "--log-level", "warning",
               "--num-threads", str(max(1, (os.cpu_count() or 1) // n)), *replica_args]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}))
        urls.append(f"http://127.0.0.1:{port}")
    try:
        wait_until_healthy(list(zip(procs, urls)), 600)
    except ServerStartError:
        stop_replicas(procs, 10)
        raise
    return procs, urls


def _router_counts(base_url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in httpx.get(base_url + "/metrics").text.splitlines():
        if line.startswith("sglang_lite_router:") and "_created" not in line:
            name_labels, value = line.rsplit(" ", 1)
            out[name_labels] = float(value)
    return out


def run_policy(args, urls: list[str], policy: str, model: str) -> dict[str, Any]:
    for url in urls:
        httpx.post(url + "/flush_cache", timeout=60).raise_for_status()
    config = RouterConfig(worker_urls=tuple(urls), port=free_port(), policy=policy)
    with AppThread(create_router_app(config), config.port) as router:
        load = argparse.Namespace(base_url=router.base_url, timeout=args.timeout, api_key=None,
                                  concurrency=args.concurrency, request_rate=float("inf"), seed=args.seed)
        samples, duration = asyncio.run(run_load(load, model, make_workload(args)))
        counts = _router_counts(router.base_url)
    result = summarize(samples, duration)
    prompt = result["total_prompt_tokens"]
    result["cache_hit_rate"] = result["cached_prompt_tokens"] / prompt if prompt else 0.0
    result["router_metrics"] = counts
    return result


def _print(report: dict[str, Any]) -> None:
    r = report["results"]
    print(f"\n== router: shared-prefix, {report['replicas']} replicas, concurrency {report['concurrency']} ==")
    print(f"{'':<28}" + "".join(f"{p:>16}" for p in POLICIES))
    rows = [("completed / failed", lambda x: f"{x['completed']} / {x['failed']}"),
            ("duration (s)", lambda x: f"{x['duration_s']:.1f}"),
            ("request throughput (req/s)", lambda x: f"{x['request_throughput']:.2f}"),
            ("output throughput (tok/s)", lambda x: f"{x['output_throughput']:.1f}"),
            ("cache hit rate", lambda x: f"{x['cache_hit_rate']:.3f}"),
            ("TTFT p50 / p99 (ms)", lambda x: f"{x['ttft_ms_p50']:.0f} / {x['ttft_ms_p99']:.0f}")]
    for name, fmt in rows:
        print(f"{name:<28}" + "".join(f"{fmt(r[p]):>16}" for p in POLICIES))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker-urls", nargs="+", default=None, help="existing replicas (else started here)")
    ap.add_argument("--replicas", type=int, default=2, help="replicas to start (without --worker-urls)")
    ap.add_argument("--kv-cache-memory", default="160MiB", help="each started replica's KV pool")
    ap.add_argument("--replica-args", default="", help="more flags for started replicas, one string")
    ap.add_argument("--num-prompts", type=int, default=48)
    ap.add_argument("--groups", type=int, default=6)
    ap.add_argument("--prefix-len", type=int, default=512)
    ap.add_argument("--suffix-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, nargs=2, default=[16, 16])
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--vocab-size", type=int, default=49152)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--output", default=None, help="JSON path (default: bench_results/router_<time>.json)")
    args = ap.parse_args(argv)
    args.workload = "shared-prefix"
    procs: list[subprocess.Popen] = []
    urls = args.worker_urls
    if urls is None:
        procs, urls = start_replicas(args.replicas, ["--kv-cache-memory", args.kv_cache_memory,
                                                     *args.replica_args.split()])
    try:
        model = httpx.get(urls[0] + "/v1/models", timeout=30).json()["data"][0]["id"]
        results = {p: run_policy(args, urls, p, model) for p in POLICIES}
    finally:
        stop_replicas(procs, 30)
    report = {"bench": "router", "replicas": len(urls), "concurrency": args.concurrency,
              "workload": {k: getattr(args, k) for k in ("num_prompts", "groups", "prefix_len",
                                                         "suffix_len", "output_len", "seed")},
              "kv_cache_memory": None if args.worker_urls else args.kv_cache_memory,
              "results": results}
    _print(report)
    write_report(report, args.output or f"bench_results/router_{time.strftime('%Y%m%d_%H%M%S')}.json")
    return report


if __name__ == "__main__":
    main()
