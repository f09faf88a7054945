"""Quantized weights against full precision, in one run on one machine:

  python -m sglang_lite.bench.quantization [--quantizations none gguf int8 int4] [--repeats 3]

For each ``--quantization`` one engine on the same model; they take turns (so machine noise hits
all alike) at batch-1 decode (ms/token: 1 + N tokens minus 1 token, over N), batch-B decode
throughput, and the offline mixed workload of ``bench.offline`` (output tok/s). Prints medians
with the ratio to the first, the resident weight bytes, and writes JSON with ``--output``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics

from sglang_lite import Engine
from sglang_lite.bench.decode_steps import batch1_ms_per_token, batch_tok_per_s
from sglang_lite.bench.offline import mixed_workload, run_engine
from sglang_lite.quant.apply import resident_weight_bytes


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="default: the embedded SmolLM2-135M (a Q4_1 GGUF)")
    ap.add_argument("--quantizations", nargs="+", default=["none", "gguf"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--num-requests", type=int, default=32, help="offline mixed workload size")
    ap.add_argument("--kv-cache-memory", default="256MiB", help="per engine (they are all loaded at once)")
    ap.add_argument("--output", default=None)
    args = ap.parse_args(argv)
    engines = {q: Engine(args.model, quantization=q, kv_cache_memory=args.kv_cache_memory)
               for q in args.quantizations}
    vocab = next(iter(engines.values())).model_config.vocab_size
    rng = random.Random(0)
    prompt = [rng.randrange(100, vocab - 100) for _ in range(64)]
    prompts = [[rng.randrange(100, vocab - 100) for _ in range(64)] for _ in range(args.batch)]
    work = mixed_workload(args.num_requests, vocab, seed=0)
    runs = {q: {"b1_ms": [], "batch_tok_s": [], "offline_tok_s": []} for q in engines}
    try:
        for eng in engines.values():
            batch1_ms_per_token(eng, prompt, 4)  # warm-up
        for r in range(args.repeats):
            for q in args.quantizations if r % 2 == 0 else args.quantizations[::-1]:
                eng = engines[q]
                runs[q]["b1_ms"].append(batch1_ms_per_token(eng, prompt, args.new_tokens))
                runs[q]["batch_tok_s"].append(batch_tok_per_s(eng, prompts, args.new_tokens))
                eng.flush_cache()
                runs[q]["offline_tok_s"].append(run_engine(eng, work).tok_per_s)
                print(f"repeat {r}: {q} " + " ".join(f"{k} {v[-1]:.2f}" for k, v in runs[q].items()), flush=True)
        rows = [_row(q, engines[q], runs[q]) for q in args.quantizations]
    finally:
        for eng in engines.values():
            eng.shutdown()
    _print(rows, args)
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"rows": rows, "runs": runs}, f, indent=1)


def _row(q: str, eng: Engine, runs: dict) -> dict:
    return {"quantization": q, "dtype": eng.config.dtype, "weight_mb": resident_weight_bytes(eng.model) / 1e6,
            **{k: statistics.median(v) for k, v in runs.items()}}


def _print(rows: list[dict], args) -> None:
    base = rows[0]
    print(f"{args.repeats} alternating repeats, medians; batch {args.batch} x {args.new_tokens} tokens; "
          f"offline mixed workload of {args.num_requests} requests")
    print(f"{'quantization':>12} {'dtype':>9} {'weights MB':>10} {'b1 ms/tok':>10} {'batch tok/s':>11} "
          f"{'offline tok/s':>13}")
    for r in rows:
        print(f"{r['quantization']:>12} {r['dtype']:>9} {r['weight_mb']:10.1f} "
              f"{r['b1_ms']:6.2f} ({base['b1_ms'] / r['b1_ms']:.2f}x) "
              f"{r['batch_tok_s']:6.1f} ({r['batch_tok_s'] / base['batch_tok_s']:.2f}x) "
              f"{r['offline_tok_s']:6.1f} ({r['offline_tok_s'] / base['offline_tok_s']:.2f}x)")


if __name__ == "__main__":
    main()
