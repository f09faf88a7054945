"""When KV memory runs out mid-decode, the youngest requests are retracted and recomputed
later; with a deliberately tiny pool every request still finishes with the greedy output
it has with a large pool, and every page comes back."""

from __future__ import annotations

import pytest

from sglang_lite import Engine
from tests.conftest import assert_no_leak

PROMPTS = [f"Story {i}: the {w} walked into the" for i, w in
           enumerate(["cat", "robot", "sailor", "child", "wizard", "doctor", "farmer", "pilot"])]
# 12 pages of 16 tokens: 8 requests of ~12 + 24 tokens need 8 x 3 = 24 pages at the end.
PARAMS = {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True}


@pytest.fixture(scope="module")
def tiny(model_dir):
    """One tiny-pool engine for the tests below (each checks it is idle and leak-free after)."""
    eng = Engine(max_total_tokens=12 * 16, disable_radix_cache=True)
    yield eng
    eng.shutdown()


def test_tiny_pool_retracts_and_outputs_are_unchanged(engine, tiny):
    reference = [o["output_ids"] for o in engine.generate(PROMPTS, PARAMS)]
    before = tiny.get_stats()["num_retractions"]
    outs = tiny.generate(PROMPTS, PARAMS)
    retractions = tiny.get_stats()["num_retractions"] - before
    assert retractions > 0, "the pool was meant to run out"
    assert [o["output_ids"] for o in outs] == reference
    assert all(o["meta_info"]["finish_reason"]["type"] == "length" for o in outs)
    assert sum(o["meta_info"]["num_retractions"] for o in outs) == retractions
    assert_no_leak(tiny)


def test_tiny_pool_with_radix_cache_keeps_outputs(engine):
    params = {"temperature": 0, "max_new_tokens": 30, "ignore_eos": True}
    prompts = [p + " house" for p in PROMPTS[:6]]
    reference = [o["output_ids"] for o in engine.generate(prompts, params)]
    tiny_cached = Engine(max_total_tokens=10 * 16)
    try:
        assert [o["output_ids"] for o in tiny_cached.generate(prompts, params)] == reference
        assert_no_leak(tiny_cached)
    finally:
        tiny_cached.shutdown()


def test_retracted_requests_report_each_input_logprob_once(engine, tiny):
    kw = dict(return_logprob=True, logprob_start_len=0, top_logprobs_num=2)
    reference = engine.generate(PROMPTS, PARAMS, **kw)
    before = tiny.get_stats()["num_retractions"]
    outs = tiny.generate(PROMPTS, PARAMS, **kw)
    assert tiny.get_stats()["num_retractions"] > before
    for out, ref in zip(outs, reference):
        got, want = out["meta_info"]["input_token_logprobs"], ref["meta_info"]["input_token_logprobs"]
        assert len(got) == len(want) == len(engine.tokenize(PROMPTS[outs.index(out)]))
        assert [t for _, t, _ in got] == [t for _, t, _ in want]
        tops = out["meta_info"]["input_top_logprobs"]
        assert tops[0] is None and len(tops) == len(got)
        assert all(len(row) == 2 and row[0][0] >= lp - 1e-5 for (lp, _, _), row in zip(got[1:], tops[1:]))
    assert_no_leak(tiny)
