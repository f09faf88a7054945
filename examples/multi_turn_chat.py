"""Multi-turn chat: each turn re-sends the whole conversation and hits the radix cache.

  python examples/multi_turn_chat.py [--url http://127.0.0.1:30000]
"""

from _backend import setup

from frontend_dsl import assistant, function, gen, system, user


@function
def chat(s, questions):
    s += system("You are a helpful, concise assistant.")
    for i, q in enumerate(questions):
        s += user(q)
        s += assistant(gen(f"answer_{i}", max_tokens=24, temperature=0))


if __name__ == "__main__":
    setup(__doc__)
    state = chat.run(questions=["What is the capital of Italy?",
                                "Name one famous building there.",
                                "When was it built?"])
    for m in state.messages():
        print(f"{m['role']:>9}: {m['content']}")
    print("cache hit rate:", f"{state.meta['cache_hit_rate']:.0%}")
