"""Engine throughput with every request JSON-constrained vs unconstrained, on the same
workload, in one run; and with jump-forward on and off.

  python -m sglang_lite.bench.structured [--num-requests 16] [--serial-masks]

The unconstrained run generates exactly as many tokens per request as the constrained run
produced (ignore_eos), so the comparison is tokens per second for the same token counts.
"""

from __future__ import annotations

import argparse
import time

from sglang_lite import Engine
from sglang_lite.bench.report import write_report

# Long fixed keys: most of each output is forced text that jump-forward skips.
SCHEMA = {
    "type": "object",
    "properties": {
        "customer_full_legal_name": {"type": "string", "maxLength": 24},
        "customer_primary_email_address": {"type": "string", "format": "email"},
        "shipping_address_postal_code": {"type": "string", "pattern": "^[0-9]{5}$"},
        "preferred_delivery_time_window": {"enum": ["morning_before_noon", "afternoon_after_noon"]},
        "number_of_items_in_the_order": {"type": "integer", "minimum": 1, "maximum": 99},
        "order_requires_signature_on_delivery": {"type": "boolean"},
    },
    "required": ["customer_full_legal_name", "customer_primary_email_address", "shipping_address_postal_code",
                 "preferred_delivery_time_window", "number_of_items_in_the_order",
                 "order_requires_signature_on_delivery"],
    "additionalProperties": False,
}


def _run(engine: Engine, prompts, params) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    outs = engine.generate(prompts, params)
    return time.perf_counter() - start, outs


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--num-requests", type=int, default=16)
    ap.add_argument("--output", default="bench_results/structured.json")
    ap.add_argument("--serial-masks", action="store_true",
                    help="fill grammar masks after the forward pass, not while it runs")
    args = ap.parse_args(argv)
    rows = {}
    for jump in (False, True):
        engine = Engine(args.model, enable_jump_forward=jump, disable_radix_cache=True,
                        overlap_grammar_masks=not args.serial_masks)
        prompts = [engine.apply_chat_template([{"role": "user", "content": f"Order #{i} as JSON."}])
                   for i in range(args.num_requests)]
        constrained = [{"json_schema": SCHEMA, "temperature": 0.8, "seed": i, "max_new_tokens": 256}
                       for i in range(args.num_requests)]
        _run(engine, prompts[:2], constrained[:2])  # warm-up: compile + masks
        secs, outs = _run(engine, prompts, constrained)
        valid = sum(o["meta_info"]["finish_reason"]["type"] == "stop" for o in outs)
        tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
        label = "constrained+jump-forward" if jump else "constrained"
        rows[label] = {"seconds": secs, "tokens": tokens, "tok_per_s": tokens / secs, "finished": valid,
                       "jump_forward_tokens": engine.get_stats()["num_jump_forward_tokens"]}
        if not jump:
            free = [{"temperature": 0.8, "seed": i, "max_new_tokens": o["meta_info"]["completion_tokens"],
                     "ignore_eos": True} for i, o in enumerate(outs)]
            secs, outs = _run(engine, prompts, free)
            tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
            rows["unconstrained"] = {"seconds": secs, "tokens": tokens, "tok_per_s": tokens / secs}
        engine.shutdown()
    base = rows["unconstrained"]["tok_per_s"]
    print(f"{'mode':<26}{'seconds':>9}{'tokens':>8}{'tok/s':>9}{'vs free':>9}")
    for name in ("unconstrained", "constrained", "constrained+jump-forward"):
        r = rows[name]
        print(f"{name:<26}{r['seconds']:>9.2f}{r['tokens']:>8}{r['tok_per_s']:>9.1f}{r['tok_per_s'] / base:>8.2f}x")
    write_report(rows, args.output)


if __name__ == "__main__":
    main()
