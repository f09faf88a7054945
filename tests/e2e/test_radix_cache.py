"""RadixAttention on the real model: outputs with the cache equal outputs without it, and
cached tokens are reported."""

from __future__ import annotations

import pytest

from sglang_lite import Engine
from tests.conftest import assert_no_leak

SYSTEM = ("You are a careful assistant. Answer briefly and precisely. " * 6).strip()


@pytest.fixture(scope="module")
def no_cache_engine(model_dir):
    eng = Engine(disable_radix_cache=True)
    yield eng
    eng.shutdown()


def _prompts(tokenizer):
    base = tokenizer.encode(SYSTEM)
    assert len(base) > 40
    return [
        base + tokenizer.encode(" Question: what is 2+2?"),
        base + tokenizer.encode(" Question: name a color."),
        base[:37] + tokenizer.encode(" unrelated tail that diverges mid-page"),  # prefix ends mid-page
        base,  # entirely cached after the first ones
        base[:16],  # exactly one page
        tokenizer.encode("Nothing shared here at all."),
    ]


def _servable(ids: list[int], finished: list[list[int]], page: int = 16) -> int:
    """Cached tokens a new prompt ``ids`` gets from finished requests (prompt + output each):
    each left its whole computed pages (all tokens but the last sampled one) in the tree; the
    prompt's last token is always computed."""
    def common(a, b):
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    best = max((min(common(ids, f), len(f) - 1) // page * page for f in finished), default=0)
    return min(best, len(ids) - 1) // page * page


def test_cache_on_equals_cache_off(engine, no_cache_engine):
    assert engine.flush_cache()
    prompts = _prompts(engine.tokenizer)
    params = {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}
    # one batch: the batched outputs equal these one-by-one ones (asserted below with the cache warm)
    ref = [o["output_ids"] for o in no_cache_engine.generate(input_ids=prompts, sampling_params=params)]
    first = engine.generate(input_ids=prompts[0], sampling_params=params)
    assert first["meta_info"]["cached_tokens"] == 0
    outs = [engine.generate(input_ids=p, sampling_params=params) for p in prompts]
    assert [o["output_ids"] for o in outs] == ref
    cached = [o["meta_info"]["cached_tokens"] for o in outs]
    assert cached[0] == (len(prompts[0]) - 1) // 16 * 16  # all full pages but the last token's
    assert cached[1] == _servable(prompts[1], [p + o for p, o in zip(prompts[:1], ref)]) >= 48
    assert cached[2] == 32  # 37 shared tokens -> two whole pages
    assert cached[3] == (len(prompts[3]) - 1) // 16 * 16
    assert cached[5] == 0
    batch = engine.generate(input_ids=prompts, sampling_params=params)  # all at once, cache warm
    assert [o["output_ids"] for o in batch] == ref
    stats = engine.get_stats()
    assert 0 < stats["cache_hit_rate"] < 1
    assert_no_leak(engine)


def test_multi_turn_hits_the_previous_turn(engine):
    assert engine.flush_cache()
    messages = [{"role": "user", "content": "Give me a one-line fact about the moon."}]
    turn1_prompt = engine.apply_chat_template(messages)
    turn1 = engine.generate(turn1_prompt, {"temperature": 0, "max_new_tokens": 40})
    messages += [{"role": "assistant", "content": turn1["text"]},
                 {"role": "user", "content": "And one about the sun?"}]
    turn2 = engine.generate(engine.apply_chat_template(messages), {"temperature": 0, "max_new_tokens": 8})
    turn1_tokens = engine.tokenize(turn1_prompt) + turn1["output_ids"]
    turn2_ids = engine.tokenize(engine.apply_chat_template(messages))
    # Turn 1's prompt and answer are cached up to where turn 2's rendering of them differs.
    want = _servable(turn2_ids, [turn1_tokens])
    assert want > turn1["meta_info"]["prompt_tokens"]  # the answer too, not only the prompt
    assert turn2["meta_info"]["cached_tokens"] == want


def test_eviction_under_a_small_pool_keeps_outputs(no_cache_engine):
    tok = no_cache_engine.tokenizer
    groups = [tok.encode(f"Document {g}: " + "lorem ipsum dolor sit amet " * 12) for g in range(4)]
    prompts = [g + tok.encode(f" Q{i}?") for g in groups for i in range(2)]
    params = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}
    ref = [o["output_ids"] for o in no_cache_engine.generate(input_ids=prompts, sampling_params=params)]
    small = Engine(max_total_tokens=24 * 16)  # the working set (4 x ~5 pages) does not all stay cached
    try:
        outs = [small.generate(input_ids=p, sampling_params=params) for p in prompts]
        outs += small.generate(input_ids=prompts, sampling_params=params)
        assert [o["output_ids"] for o in outs] == ref + ref
        stats = small.get_stats()
        assert stats["evicted_tokens"] > 0
        assert any(o["meta_info"]["cached_tokens"] > 0 for o in outs)
        assert_no_leak(small)
    finally:
        small.shutdown()
