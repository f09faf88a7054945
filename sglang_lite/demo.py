"""The README's first command: a batch of chat completions on the embedded model."""

from __future__ import annotations

import time

from sglang_lite import Engine

QUESTIONS = [
    "What is the capital of France?",
    "Give me three tips for writing clean Python code.",
    "Explain what a radix tree is in one sentence.",
    "Write a haiku about autumn.",
    "What is 12 times 12?",
    "Name two planets in the solar system.",
    "Why is the sky blue? Answer briefly.",
    "Suggest a name for a friendly robot.",
]


def run_demo(model: str | None = None, max_new_tokens: int = 64) -> int:
    t0 = time.perf_counter()
    engine = Engine(model)
    print(f"model {engine.source.name} loaded in {time.perf_counter() - t0:.1f}s "
          f"({engine.config.device}, {engine.config.dtype}, KV pool "
          f"{engine.kv_pool.allocator.num_usable_pages} pages x {engine.config.page_size} tokens)")
    prompts = [engine.apply_chat_template([{"role": "user", "content": q}]) for q in QUESTIONS]
    start = time.perf_counter()
    outs = engine.generate(prompts, {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": max_new_tokens,
                                     "seed": 0})
    seconds = time.perf_counter() - start
    for q, o in zip(QUESTIONS, outs):
        print(f"\n>>> {q}\n{o['text'].strip()}")
    tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
    print(f"\n{len(outs)} requests, {tokens} generated tokens in {seconds:.2f}s: "
          f"{tokens / seconds:.1f} tok/s (continuous batching)")
    engine.shutdown()
    return 0
