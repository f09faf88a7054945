"""A RAG pipeline: a shared system prompt and retrieved passages, many questions in run_batch.
The constant prefix is traced and prefilled once; every question then reuses its KV.

  python examples/rag_run_batch.py [--url http://127.0.0.1:30000]
"""

from _backend import setup

from frontend_dsl import assistant, function, gen, system, user

PASSAGES = [
    "The Nile is about 6,650 km long and flows north into the Mediterranean.",
    "Mount Kilimanjaro in Tanzania is Africa's highest peak at 5,895 metres.",
    "Lake Victoria, shared by Uganda, Kenya and Tanzania, is Africa's largest lake.",
    "The Sahara covers about 9 million square kilometres across North Africa.",
    "Victoria Falls lies on the Zambezi river between Zambia and Zimbabwe.",
]


def retrieve(question: str, k: int = 5) -> list[str]:
    return PASSAGES[:k]  # stand-in for a retriever: the same context for every question


@function
def answer(s, question):
    context = "\n".join(f"[{i + 1}] {p}" for i, p in enumerate(retrieve(question)))
    s += system(f"Answer in one short sentence using only these passages.\n\n{context}")
    s += user(question)
    s += assistant(gen("answer", max_tokens=24, temperature=0, stop="\n"))


if __name__ == "__main__":
    setup(__doc__)
    questions = ["How long is the Nile?", "What is the highest peak in Africa?",
                 "Which countries share Lake Victoria?", "How big is the Sahara?",
                 "On which river are Victoria Falls?"]
    states = answer.run_batch([{"question": q} for q in questions], num_threads=8)
    for q, state in zip(questions, states):
        print(f"Q: {q}\nA: {state['answer']}   (cache hit {state.meta['cache_hit_rate']:.0%})\n")
