"""Mask-speed benchmark for constraints/: compile time and per-token mask fill time.

python -m sglang_lite.bench.constraints_mask [--out bench_results/constraints_mask.json]
python -m sglang_lite.bench.constraints_mask --schemas DIR [--peers xgrammar,llguidance]

SmolLM2-135M-Instruct tokenizer (vocab 49,152), one thread.

Without --schemas: ten GlaiveAI function-calling style schemas. For each a valid instance is
serialized compactly, tokenized, and fill_next_token_bitmask is timed at every step: cold (fresh
compile, states built lazily) then warm (second matcher, states cached). Targets: warm mask
p50 <= 50 us, p99 <= 1 ms; compile p50 <= 100 ms.

With --schemas DIR (a JSONSchemaBench sample, one sub-folder per split): every schema through
our compiler and each installed peer, each engine in a fresh process, no warm-up; per split and
overall: declared % (compiles), valid % (of all schemas, outputs that validate), valid of
declared %, compile p50/p90, mask p50/p99 and our ratio to each peer. Outputs come from a
model-free walk with a fixed seeded pseudo-model (rule: sglang_lite/bench/schema_walk.py), peer
settings in sglang_lite/bench/constraint_engines.py, process layout and per-schema wall-clock
guard in sglang_lite/bench/jsonschemabench.py. Writes bench_results/constraints_jsonschemabench.json.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from constraints import GrammarCompiler, TokenizerInfo, allocate_token_bitmask

from .tokenizer import load_tokenizer

_ADDR = {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"},
         "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city"]}

CASES = [
    ("get_weather", {"type": "object", "properties": {
        "location": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["location"]}, {"location": "San Francisco, CA", "unit": "celsius"}),
    ("book_flight", {"type": "object", "properties": {
        "from": {"type": "string", "minLength": 3, "maxLength": 3},
        "to": {"type": "string", "minLength": 3, "maxLength": 3},
        "date": {"type": "string", "format": "date"},
        "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
        "class": {"enum": ["economy", "business", "first"]}},
        "required": ["from", "to", "date", "passengers"]},
        {"from": "SFO", "to": "JFK", "date": "2024-07-14", "passengers": 2, "class": "economy"}),
    ("send_email", {"type": "object", "properties": {
        "to": {"type": "array", "items": {"type": "string", "format": "email"}, "minItems": 1,
               "maxItems": 5},
        "subject": {"type": "string", "maxLength": 120}, "body": {"type": "string"},
        "priority": {"enum": ["low", "normal", "high"]}}, "required": ["to", "subject", "body"]},
        {"to": ["ann@example.com", "bo@corp.io"], "subject": "Quarterly report",
         "body": "Hi team,\nplease find the Q3 numbers attached. Revenue grew 12% over Q2."}),
    ("create_user", {"type": "object", "properties": {
        "id": {"type": "string", "format": "uuid"}, "name": {"type": "string"},
        "age": {"type": ["integer", "null"], "minimum": 0, "maximum": 130},
        "address": {"$ref": "#/$defs/address"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["id", "name"], "$defs": {"address": _ADDR}},
        {"id": "123e4567-e89b-12d3-a456-426614174000", "name": "Zoë Martín", "age": 34,
         "address": {"street": "1 Main St", "city": "Springfield", "zip": "12345"},
         "tags": ["vip", "beta"]}),
    ("search_products", {"type": "object", "properties": {
        "query": {"type": "string"}, "max_price": {"type": "number", "minimum": 0},
        "categories": {"type": "array", "items": {"enum": ["books", "electronics", "toys"]}},
        "in_stock": {"type": "boolean"}, "limit": {"type": "integer", "minimum": 1, "maximum": 100}},
        "required": ["query"]},
        {"query": "noise cancelling headphones", "max_price": 199.99,
         "categories": ["electronics"], "in_stock": True, "limit": 20}),
    ("schedule_meeting", {"type": "object", "properties": {
        "title": {"type": "string"}, "start": {"type": "string", "format": "date-time"},
        "duration_minutes": {"type": "integer", "minimum": 15, "maximum": 480},
        "attendees": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "email": {"type": "string", "format": "email"},
            "optional": {"type": "boolean"}}, "required": ["name", "email"]}, "maxItems": 10}},
        "required": ["title", "start", "attendees"]},
        {"title": "Design review", "start": "2024-05-02T15:30:00Z", "duration_minutes": 45,
         "attendees": [{"name": "Ann", "email": "ann@x.org"},
                       {"name": "Raj", "email": "raj@x.org", "optional": True}]}),
    ("convert_currency", {"type": "object", "properties": {
        "amount": {"type": "number", "exclusiveMinimum": 0},
        "from": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "to": {"type": "string", "pattern": "^[A-Z]{3}$"}}, "required": ["amount", "from", "to"]},
        {"amount": 1250.5, "from": "USD", "to": "EUR"}),
    ("create_ticket", {"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 80},
        "severity": {"enum": ["sev1", "sev2", "sev3"]},
        "component": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "labels": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        "reporter": {"type": "object", "properties": {"id": {"type": "integer"},
                     "ip": {"type": "string", "format": "ipv4"}}, "required": ["id"]}},
        "required": ["title", "severity", "reporter"]},
        {"title": "Login fails with 500", "severity": "sev2", "component": "auth",
         "labels": ["backend", "regression"], "reporter": {"id": 4821, "ip": "10.0.3.7"}}),
    ("get_stock_price", {"type": "object", "properties": {
        "symbol": {"type": "string", "pattern": "^[A-Z]{1,5}$"},
        "exchange": {"enum": ["NYSE", "NASDAQ", "LSE"]},
        "range": {"type": "object", "properties": {"from": {"type": "string", "format": "date"},
                  "to": {"type": "string", "format": "date"}}, "required": ["from", "to"]}},
        "required": ["symbol"]},
        {"symbol": "AAPL", "exchange": "NASDAQ", "range": {"from": "2024-01-01", "to": "2024-03-31"}}),
    ("fetch_url", {"type": "object", "properties": {
        "url": {"type": "string", "format": "uri"}, "method": {"enum": ["GET", "POST"]},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        "timeout_s": {"type": "number", "minimum": 0, "maximum": 60}}, "required": ["url"]},
        {"url": "https://api.example.com/v1/items?page=2", "method": "GET",
         "headers": {"Accept": "application/json"}, "timeout_s": 10}),
]


def _walk_times(grammar, token_ids: list[int]) -> list[float]:
    m = grammar.matcher()
    bm = allocate_token_bitmask(1, grammar.vocab_size)
    times = []
    for tok in token_ids:
        t0 = time.perf_counter()
        m.fill_next_token_bitmask(bm, 0)
        times.append(time.perf_counter() - t0)
        if not m.accept_token(tok):
            raise RuntimeError(f"{grammar.spec[:60]}: valid output rejected at token {tok}")
    return times


def run(tokenizer) -> dict:
    info = TokenizerInfo.from_huggingface(tokenizer)
    compiler = GrammarCompiler(info, cache_size=0)
    rows, cold, warm = [], [], []
    for name, schema, instance in CASES:
        text = json.dumps(instance, separators=(",", ":"), ensure_ascii=False)
        ids = tokenizer.encode(text) + [info.eos_token_ids[0]]
        t0 = time.perf_counter()
        grammar = compiler.compile_json_schema(schema)
        compile_s = time.perf_counter() - t0
        c, w = _walk_times(grammar, ids), _walk_times(grammar, ids)
        cold += c
        warm += w
        rows.append({"schema": name, "compile_ms": compile_s * 1e3, "tokens": len(ids),
                     "cold_p50_us": _pct(c, 50), "warm_p50_us": _pct(w, 50),
                     "warm_p99_us": _pct(w, 99)})
    compiles = [r["compile_ms"] for r in rows]
    return {"tokenizer": "SmolLM2-135M-Instruct", "vocab_size": info.vocab_size, "threads": 1,
            "compile_ms_first": compiles[0],
            "compile_ms_p50": float(np.percentile(compiles, 50)),
            "compile_ms_p90": float(np.percentile(compiles, 90)),
            "mask_us_cold_p50": _pct(cold, 50), "mask_us_cold_p99": _pct(cold, 99),
            "mask_us_warm_p50": _pct(warm, 50), "mask_us_warm_p99": _pct(warm, 99),
            "targets": {"mask_us_warm_p50": 50, "mask_us_warm_p99": 1000, "compile_ms_p50": 100},
            "schemas": rows}


def _pct(times: list[float], q: float) -> float:
    return float(np.percentile(np.array(times) * 1e6, q))


def _print(result: dict) -> None:
    print(f"{'schema':<18}{'compile ms':>11}{'tokens':>8}{'cold p50 us':>13}"
          f"{'warm p50 us':>13}{'warm p99 us':>13}")
    for r in result["schemas"]:
        print(f"{r['schema']:<18}{r['compile_ms']:>11.1f}{r['tokens']:>8}{r['cold_p50_us']:>13.1f}"
              f"{r['warm_p50_us']:>13.1f}{r['warm_p99_us']:>13.1f}")
    print(f"compile p50 {result['compile_ms_p50']:.1f} ms, p90 {result['compile_ms_p90']:.1f} ms "
          f"(first, with shared leaves, {result['compile_ms_first']:.1f} ms)")
    print(f"mask cold p50 {result['mask_us_cold_p50']:.1f} us, p99 {result['mask_us_cold_p99']:.1f} us;"
          f" warm p50 {result['mask_us_warm_p50']:.1f} us, p99 {result['mask_us_warm_p99']:.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="JSON result path (default under bench_results/)")
    parser.add_argument("--schemas", type=Path, default=None,
                        help="JSONSchemaBench folder (one sub-folder per split); default: built-in cases")
    parser.add_argument("--peers", default="", help="comma-separated: xgrammar,llguidance")
    parser.add_argument("--schema-timeout", type=float, default=60.0,
                        help="wall-clock seconds per schema (compile + walk) before it counts as failed")
    args = parser.parse_args()
    if args.schemas is not None:
        from .jsonschemabench import run_bench

        if not args.schemas.is_dir():
            raise SystemExit(f"--schemas: {args.schemas} is not a directory")
        peers = [p.strip() for p in args.peers.split(",") if p.strip()]
        out = Path(args.out or "bench_results/constraints_jsonschemabench.json")
        run_bench(args.schemas, peers, out, args.schema_timeout)
        return
    torch.set_num_threads(1)
    result = run(load_tokenizer())
    _print(result)
    out = Path(args.out or "bench_results/constraints_mask.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
