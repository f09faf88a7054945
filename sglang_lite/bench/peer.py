"""llama.cpp's llama-server and our server on the same GGUF file, one after the other, under the
same streaming load (``bench.serving``'s mixed workload) at several concurrencies:

  python -m sglang_lite.bench.peer --llama-server ~/llama.cpp/build/bin/llama-server
  python -m sglang_lite.bench.peer                    # no peer binary: our server only, said so

Each concurrency level gets its own seed, so no level re-sends an earlier level's prompts (no
cache hits carried over); both servers get the same prompts at a level. Prints both servers'
output throughput, TPOT and TTFT with our ratio to the peer, and writes JSON. Building
llama-server from the llama-cpp-python sdist is described in README.md (Benchmarks).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from sglang_lite.bench import serving
from sglang_lite.bench.report import write_report
from sglang_lite.loopback import free_port, wait_until_healthy


def _commands(args, gguf: Path, port: int) -> dict[str, list[str]]:
    slots = max(args.concurrency)
    peer = [args.llama_server, "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
            "-np", str(slots), "-c", str(slots * args.slot_context), "-t", str(args.threads)]
    ours = [sys.executable, "-m", "sglang_lite.cli", "serve", "--port", str(port)]
    if args.model:
        ours += ["--model", str(gguf)]
    if args.quantization:
        ours += ["--quantization", args.quantization]
    ours += shlex.split(args.server_args)
    return {"llama-server": peer, "sglang-lite": ours}


def _run_server(name: str, cmd: list[str], port: int, args) -> dict[int, dict]:
    base_url = f"http://127.0.0.1:{port}"
    log = open(Path(args.log_dir) / f"peer_{name}.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until_healthy([(proc, base_url)], args.start_timeout)
        results = {}
        for level, c in enumerate(args.concurrency):
            report = serving.main(["--base-url", base_url, "--concurrency", str(c),
                                   "--num-prompts", str(max(args.min_prompts, args.prompts_per_slot * c)),
                                   "--seed", str(args.seed + 1000 * (level + 1)),
                                   "--output", str(Path(args.log_dir) / f"peer_{name}_c{c}.json")])
            results[c] = report["result"]
        return results
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER"), help="path to llama-server")
    ap.add_argument("--model", default=None, help="a GGUF file (default: the embedded SmolLM2 Q4_1)")
    ap.add_argument("--quantization", default=None, help="ours (default: the engine's auto)")
    ap.add_argument("--server-args", default="", help="more options for ours, e.g. --server-args=--enable-torch-compile")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--prompts-per-slot", type=int, default=2)
    ap.add_argument("--min-prompts", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="llama-server -t")
    ap.add_argument("--slot-context", type=int, default=512, help="llama-server context per slot")
    ap.add_argument("--start-timeout", type=float, default=600)
    ap.add_argument("--log-dir", default="bench_results")
    ap.add_argument("--output", default="bench_results/peer.json")
    args = ap.parse_args(argv)
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    from sglang_lite.model.loader import embedded_gguf_path

    gguf = Path(args.model) if args.model else embedded_gguf_path()
    peer = args.llama_server and (shutil.which(args.llama_server) or None)
    if not peer:
        print(f"llama-server: not found ({args.llama_server or 'no --llama-server given'}); running "
              "sglang-lite only (README.md, Benchmarks: building llama-server)", flush=True)
    names = (["llama-server"] if peer else []) + ["sglang-lite"]
    results = {}
    for name in names:
        port = free_port()
        results[name] = _run_server(name, _commands(args, gguf, port)[name], port, args)
    _print(results, args.concurrency)
    out = {"gguf": str(gguf), "results": {n: {str(c): r for c, r in rs.items()} for n, rs in results.items()}}
    write_report(out, args.output)
    return out


def _print(results: dict[str, dict[int, dict]], levels: list[int]) -> None:
    print(f"\n{'concurrency':>11} {'server':>13} {'tok/s':>8} {'TPOT p50 ms':>12} {'TTFT p50 ms':>12} {'vs peer':>8}")
    for c in levels:
        peer = results.get("llama-server", {}).get(c)
        for name, rs in results.items():
            r = rs[c]
            ratio = f"{r['output_throughput'] / peer['output_throughput']:.2f}x" if peer and name != "llama-server" else ""
            print(f"{c:>11} {name:>13} {r['output_throughput']:8.1f} {r['tpot_ms_p50']:12.1f} "
                  f"{r['ttft_ms_p50']:12.1f} {ratio:>8}")


if __name__ == "__main__":
    main()
