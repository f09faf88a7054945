"""Few-shot classification with select: each label is scored by its tokens' logprobs.

  python examples/few_shot_select.py [--url http://127.0.0.1:30000]
"""

from _backend import setup

from frontend_dsl import function, select

EXAMPLES = [
    ("The battery lasts two full days, brilliant.", "positive"),
    ("Stopped working after a week.", "negative"),
    ("It arrived on Tuesday in a brown box.", "neutral"),
    ("Best headphones I have owned.", "positive"),
    ("The lid cracked the first time I dropped it.", "negative"),
    ("Comes in three sizes.", "neutral"),
]


@function
def classify(s, review):
    s += "Classify each review as positive, negative or neutral.\n\n"
    for text, label in EXAMPLES:  # constant: run_batch caches it once for all reviews
        s += f"Review: {text}\nSentiment: {label}\n\n"
    s += f"Review: {review}\nSentiment:"
    s += select("label", choices=[" positive", " negative", " neutral"])


if __name__ == "__main__":
    setup(__doc__)
    reviews = ["I love how light it is.", "Broke on the second day.", "It is blue.",
               "Absolutely fantastic sound.", "Refund took two months, never again."]
    states = classify.run_batch([{"review": r} for r in reviews])
    for review, state in zip(reviews, states):
        scores = state.get_meta_info("label")["normalized_prompt_logprobs"]
        print(f"{state['label'].strip():>9}  {review}   scores={[round(x, 2) for x in scores]}")
    print("cache hit rate of the last program:", f"{states[-1].meta['cache_hit_rate']:.0%}")
