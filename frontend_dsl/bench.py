"""Frontend-DSL programs through ``run_batch``, radix cache on vs off, in one process.

  python -m frontend_dsl.bench                 # few-shot select + RAG, 32 inputs each
  python -m frontend_dsl.bench --programs rag --num-inputs 8

Each program runs on two embedded engines (``Engine()`` and
``Engine(disable_radix_cache=True)``); prints wall time, cache hit rate and the speedup, and
writes JSON to bench_results/dsl.json.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from frontend_dsl import EngineBackend, assistant, function, gen, select, system, user
from sglang_lite import Engine

LABELS = ["positive", "negative", "neutral"]
_SHOTS = [
    ("The battery lasts two full days, brilliant.", "positive"),
    ("Stopped working after a week and support never answered.", "negative"),
    ("It arrived on Tuesday in a brown box.", "neutral"),
    ("Honestly the best headphones I have owned.", "positive"),
    ("The lid cracked the first time I dropped it.", "negative"),
    ("Comes in three sizes and two colors.", "neutral"),
    ("Setup took a minute and it just works, love it.", "positive"),
    ("Way too loud and the app keeps crashing.", "negative"),
    ("The manual is twelve pages long.", "neutral"),
    ("Great value, my whole family uses it every day.", "positive"),
    ("Smells like burnt plastic whenever it runs.", "negative"),
    ("Weighs about as much as a bag of sugar.", "neutral"),
]
_REVIEWS = ["Fantastic screen, crisp and bright.", "The strap broke on day two.",
            "It is made of aluminium.", "Charges quickly and never overheats.",
            "Customer service hung up on me twice.", "Ships with a USB-C cable.",
            "My kids adore it.", "Rattles loudly at high speed."]
_PASSAGES = [
    "The Nile is about 6,650 km long and flows north through eleven countries into the Mediterranean.",
    "Mount Kilimanjaro in Tanzania is Africa's highest peak at 5,895 metres, a dormant volcano.",
    "Lake Victoria, shared by Uganda, Kenya and Tanzania, is Africa's largest lake by area.",
    "The Sahara covers about 9 million square kilometres across North Africa.",
    "Victoria Falls on the Zambezi river is one of the largest waterfalls in the world.",
    "The Congo river is the deepest river in the world, over 220 metres in places.",
    "Madagascar, off Africa's south-east coast, is the fourth-largest island on Earth.",
    "The Great Rift Valley runs from Lebanon to Mozambique and is visible from space.",
    "Lake Tanganyika is the second-deepest lake in the world, at 1,470 metres.",
    "The Namib desert in Namibia is thought to be the oldest desert, some 55 million years old.",
    "The Niger river makes a great bend through Mali, Niger and Nigeria to the Atlantic.",
    "Table Mountain overlooks Cape Town; its flat summit is about three kilometres wide.",
    "The Okavango Delta in Botswana floods each winter with water from the Angolan highlands.",
    "Mount Kenya, the second-highest mountain in Africa, stands at 5,199 metres.",
]
_QUESTIONS = ["How long is the Nile?", "What is the highest peak in Africa?",
              "Which countries share Lake Victoria?", "How big is the Sahara?",
              "On which river are Victoria Falls?", "How deep is the Congo river?",
              "Where does the Nile end?", "Is Kilimanjaro a volcano?"]


@function
def few_shot(s, review):
    s += "Classify the sentiment of each product review as positive, negative or neutral.\n\n"
    for text, label in _SHOTS:
        s += f"Review: {text}\nSentiment: {label}\n\n"
    s += f"Review: {review}\nSentiment:"
    s += select("label", choices=[" " + x for x in LABELS])


@function
def rag(s, question, max_tokens=16):
    s += system("Answer the question in one short sentence using only the passages below.\n\n"
                + "\n".join(f"[{i + 1}] {p}" for i, p in enumerate(_PASSAGES)))
    s += user(question)
    s += assistant(gen("answer", max_tokens=max_tokens, temperature=0, stop="\n"))


PROGRAMS = {
    "few_shot": (few_shot, lambda rng: {"review": rng.choice(_REVIEWS)}),
    "rag": (rag, lambda rng: {"question": rng.choice(_QUESTIONS)}),
}


def run_program(backend: EngineBackend, name: str, num_inputs: int, seed: int = 0) -> dict:
    prog, make_args = PROGRAMS[name]
    rng = random.Random(seed)
    inputs = [make_args(rng) for _ in range(num_inputs)]
    backend.flush_cache()
    before = backend.get_stats()
    start = time.perf_counter()
    states = prog.run_batch(inputs, backend=backend, num_threads=num_inputs, temperature=0)
    seconds = time.perf_counter() - start
    after = backend.get_stats()
    prompt = after["num_prompt_tokens"] - before["num_prompt_tokens"]
    cached = after["num_cached_prompt_tokens"] - before["num_cached_prompt_tokens"]
    errors = [repr(s.error()) for s in states if s.error() is not None]
    return {
        "seconds": seconds, "prompt_tokens": prompt, "cached_tokens": cached,
        "cache_hit_rate": cached / prompt if prompt else 0.0,
        "mean_program_hit_rate": sum(s.meta["cache_hit_rate"] for s in states if s.error() is None)
        / max(1, num_inputs - len(errors)),
        "errors": errors,
        "outputs": [s.variables() for s in states[:3] if s.error() is None],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", default="few_shot,rag")
    parser.add_argument("--num-inputs", type=int, default=32)
    parser.add_argument("--model", default=None)
    parser.add_argument("--out", default="bench_results/dsl.json")
    args = parser.parse_args(argv)
    names = [n for n in args.programs.split(",") if n]
    results: dict[str, dict] = {name: {} for name in names}
    for label, options in (("radix", {}), ("no_cache", {"disable_radix_cache": True})):
        backend = EngineBackend(Engine(args.model, **options))
        backend.engine.generate("warm up", {"max_new_tokens": 2})  # first-call costs out of the timing
        for name in names:
            results[name][label] = run_program(backend, name, args.num_inputs)
        backend.shutdown()
    print(f"{'program':<10} {'inputs':>6} {'radix s':>8} {'hit':>6} {'no-cache s':>10} {'hit':>6} {'speedup':>8}")
    for name, r in results.items():
        on, off = r["radix"], r["no_cache"]
        r["speedup"] = off["seconds"] / on["seconds"]
        print(f"{name:<10} {args.num_inputs:>6} {on['seconds']:>8.2f} {on['cache_hit_rate']:>6.1%} "
              f"{off['seconds']:>10.2f} {off['cache_hit_rate']:>6.1%} {r['speedup']:>7.2f}x")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"num_inputs": args.num_inputs, "programs": results}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
