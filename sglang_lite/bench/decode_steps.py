"""Continuous decoding against one host round trip per decode step, in the same engine:

  python -m sglang_lite.bench.decode_steps [--model M] [--steps 8] [--repeats 3]

Batch-1 decode ms/token (time for 1 + N tokens minus time for 1 token, over N) and the
decode throughput of a batch, with ``num_continuous_decode_steps`` switched between 1 and
``--steps`` on one engine, alternating, medians of ``--repeats``. On a CPU the host work per
step is small next to the model, so expect a few percent; on a GPU it is what decides
batch-1 latency (``bench.gpu`` measures the same pair there).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

from sglang_lite import Engine


def batch1_ms_per_token(eng: Engine, prompt: list[int], new_tokens: int, repeats: int = 2) -> float:
    """(time for 1 + new_tokens tokens - time for 1 token) / new_tokens, each time the least of
    ``repeats`` runs taken in turns: one stall in the short run would otherwise shrink the
    difference, or turn it negative on a small model."""
    times: dict[int, float] = {}
    for _ in range(repeats):
        for n in (1, 1 + new_tokens):
            eng.flush_cache()
            t = time.perf_counter()
            out = eng.generate(input_ids=prompt, sampling_params={"temperature": 0, "max_new_tokens": n,
                                                                  "ignore_eos": True})
            times[n] = min(times.get(n, math.inf), time.perf_counter() - t)
            assert len(out["output_ids"]) == n
    return 1000 * (times[1 + new_tokens] - times[1]) / new_tokens


def batch_tok_per_s(eng: Engine, prompts: list[list[int]], new_tokens: int) -> float:
    eng.flush_cache()
    t = time.perf_counter()
    outs = eng.generate(input_ids=prompts, sampling_params={"temperature": 0, "max_new_tokens": new_tokens,
                                                            "ignore_eos": True})
    seconds = time.perf_counter() - t
    return sum(len(o["output_ids"]) for o in outs) / seconds


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="default: the embedded SmolLM2-135M")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args(argv)
    eng = Engine(args.model, num_continuous_decode_steps=args.steps)
    vocab = eng.model_config.vocab_size
    rng = random.Random(0)
    prompt = [rng.randrange(100, vocab - 100) for _ in range(128)]
    prompts = [[rng.randrange(100, vocab - 100) for _ in range(64)] for _ in range(args.batch)]
    results: dict[int, dict[str, list[float]]] = {k: {"b1": [], "batch": []} for k in (1, args.steps)}
    try:
        batch1_ms_per_token(eng, prompt, 8)  # warm-up
        for r in range(args.repeats):
            for k in (1, args.steps) if r % 2 == 0 else (args.steps, 1):
                eng.scheduler.num_continuous_decode_steps = k
                results[k]["b1"].append(batch1_ms_per_token(eng, prompt, args.new_tokens))
                results[k]["batch"].append(batch_tok_per_s(eng, prompts, args.new_tokens))
    finally:
        eng.shutdown()
    one, runs = results[1], results[args.steps]
    b1 = {k: statistics.median(v["b1"]) for k, v in results.items()}
    tput = {k: statistics.median(v["batch"]) for k, v in results.items()}
    print(f"model {eng.config.model or 'embedded'}, {eng.config.device}, {eng.config.dtype}, "
          f"{args.repeats} alternating repeats, medians")
    print(f"batch-1 decode: runs of {args.steps} {b1[args.steps]:.2f} ms/token, one step {b1[1]:.2f} "
          f"ms/token ({b1[1] / b1[args.steps]:.3f}x)   raw {runs['b1']} vs {one['b1']}")
    print(f"batch-{args.batch} x {args.new_tokens} tokens: runs of {args.steps} {tput[args.steps]:.1f} tok/s, "
          f"one step {tput[1]:.1f} tok/s ({tput[args.steps] / tput[1]:.3f}x)   raw {runs['batch']} vs {one['batch']}")


if __name__ == "__main__":
    main()
