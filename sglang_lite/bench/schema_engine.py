"""Real-world schemas through the engine with the embedded model: are the outputs valid?

python -m sglang_lite.bench.schema_engine [--schemas ../shared/data/jsonschemabench-dev]

Every schema of the sample is sent as ``json_schema`` with a short instruction, greedy, at
``--max-new-tokens`` (384, the issue's budget), ``--concurrency`` requests in flight so the
engine batches them. Each output is validated with its draft's own format checker. Prints
per split: compiled (accepted by the engine), valid, invalid, cut off (finish_reason length),
and writes JSON under bench_results/.
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .schema_walk import load_schemas, validate_text

_ASK = "Write one JSON value that matches this JSON Schema. Answer with the JSON only."


def _one(engine, schema, max_new_tokens: int) -> dict:
    prompt = engine.apply_chat_template([{"role": "user", "content": _ASK}])
    try:
        out = engine.generate(prompt, {"json_schema": schema.text, "temperature": 0,
                                       "max_new_tokens": max_new_tokens})
    except ValueError as e:
        return {"outcome": "refused", "error": str(e)[:200]}
    reason = out["meta_info"]["finish_reason"]
    kind = reason["type"] if isinstance(reason, dict) else str(reason)
    outcome = validate_text(schema.text, out["text"])
    if outcome != "valid" and kind == "length":
        outcome = "cut off"
    return {"outcome": outcome, "finish": kind, "tokens": out["meta_info"]["completion_tokens"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", default="../shared/data/jsonschemabench-dev")
    parser.add_argument("--max-new-tokens", type=int, default=384)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--per-split", type=int, default=0, help="first N schemas of each split")
    parser.add_argument("--out", default="bench_results/schema_engine.json")
    args = parser.parse_args()
    from sglang_lite import Engine

    schemas = load_schemas(Path(args.schemas))
    if args.per_split:
        seen: collections.Counter = collections.Counter()
        schemas = [s for s in schemas if (seen.update([s.split]) or seen[s.split] <= args.per_split)]
    engine = Engine()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.concurrency) as pool:
        results = list(pool.map(lambda s: _one(engine, s, args.max_new_tokens), schemas))
    wall = time.perf_counter() - t0
    engine.shutdown()
    table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for schema, r in zip(schemas, results):
        table[schema.split][r["outcome"]] += 1
        table["overall"][r["outcome"]] += 1
    print(f"{'split':<16}{'schemas':>8}{'compiled':>9}{'valid':>7}{'invalid':>8}{'cut off':>8}")
    for split, c in table.items():
        total = sum(c.values())
        print(f"{split:<16}{total:>8}{total - c['refused']:>9}{c['valid']:>7}"
              f"{c['invalid'] + c['unparsable']:>8}{c['cut off']:>8}")
    print(f"{len(schemas)} requests in {wall:.0f} s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "max_new_tokens": args.max_new_tokens, "wall_s": wall,
        "schemas": [{"key": s.key, **r} for s, r in zip(schemas, results)],
        "splits": {k: dict(v) for k, v in table.items()}}, indent=1) + "\n")


if __name__ == "__main__":
    main()
