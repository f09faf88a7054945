"""Continuous decoding (``num_continuous_decode_steps``) on the real model: runs of decode
steps without a host sync between them give exactly the outputs of one step at a time:
greedy and seeded sampling, EOS, stop tokens, stop strings, streaming; requests with a
grammar need the host every step and fall back to one step; penalties, min_new_tokens,
logprobs and logit_bias are computed on the device inside the runs."""

from __future__ import annotations

import pytest

from sglang_lite import Engine
from tests.conftest import assert_no_leak

STEPS = 6
PROMPTS = ["Here is a short list of fruits:", "The capital of France is", "def fibonacci(n):",
           "Once upon a time", "Write a haiku about the sea.", "1, 2, 3, 4,"]


@pytest.fixture(scope="module")
def runs_engine(model_dir):
    eng = Engine(num_continuous_decode_steps=STEPS)
    runs: list[int] = []
    eng.scheduler.on_batch = lambda batch: runs.append(batch.num_steps)
    eng.runs = runs
    yield eng
    eng.shutdown()


def _params(stop_token: int, stop_string: str) -> list[dict]:
    return [
        {"temperature": 0, "max_new_tokens": 30, "ignore_eos": True},
        {"temperature": 0, "max_new_tokens": 40},  # may stop at EOS
        {"temperature": 0.8, "top_p": 0.9, "seed": 11, "max_new_tokens": 25, "ignore_eos": True},
        {"temperature": 1.0, "top_k": 20, "seed": 12, "max_new_tokens": 33},
        {"temperature": 0, "max_new_tokens": 30, "ignore_eos": True, "stop_token_ids": [stop_token]},
        {"temperature": 0, "max_new_tokens": 30, "ignore_eos": True, "stop": [stop_string]},
    ]


def _strip(out: dict) -> tuple:
    return out["text"], out["output_ids"], out["meta_info"]["finish_reason"]


def test_runs_of_steps_equal_one_step_at_a_time(engine, runs_engine):
    ref0 = engine.generate(PROMPTS[4], {"temperature": 0, "max_new_tokens": 30, "ignore_eos": True})
    ref5 = engine.generate(PROMPTS[5], {"temperature": 0, "max_new_tokens": 30, "ignore_eos": True})
    stop_token = ref0["output_ids"][9]  # finishes request 4 in the middle of a run
    stop_string = ref5["text"][12:16]
    params = _params(stop_token, stop_string)
    expected = engine.generate(PROMPTS, params)
    runs_engine.runs.clear()
    got = runs_engine.generate(PROMPTS, params)
    assert [_strip(o) for o in got] == [_strip(o) for o in expected]
    assert got[4]["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_token}
    assert got[5]["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_string}
    assert STEPS in runs_engine.runs  # the decode did run in multi-step runs
    assert sum(runs_engine.runs) < 40  # ... far fewer host round trips than tokens
    assert_no_leak(runs_engine)


def test_streamed_runs_add_up_and_hold_back_stop_strings(engine, runs_engine):
    base = engine.generate("Count: one, two, three,", {"max_new_tokens": 20, "temperature": 0, "ignore_eos": True})
    stop = base["text"][8:12]
    params = {"max_new_tokens": 20, "temperature": 0, "ignore_eos": True, "stop": stop}
    chunks = list(runs_engine.generate("Count: one, two, three,", params, stream=True))
    streamed = "".join(c["text"] for c in chunks)
    assert stop not in streamed
    assert chunks[-1]["meta_info"]["finish_reason"]["matched"] == stop
    assert streamed == engine.generate("Count: one, two, three,", params)["text"]
    full = list(runs_engine.generate("Emoji story:", {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True},
                                     stream=True))
    # a run's tokens arrive together: one chunk carries them (not one chunk per token)
    assert max(len(c["output_ids"]) for c in full) == STEPS and len(full) < 24
    assert all("\ufffd" not in c["text"] for c in full)
    assert sum((c["output_ids"] for c in full), []) == engine.generate(
        "Emoji story:", {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True})["output_ids"]


def test_grammar_requests_run_one_step_at_a_time(engine, runs_engine):
    params = {"temperature": 0, "max_new_tokens": 24,
              "json_schema": '{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}'}
    runs_engine.runs.clear()
    got = runs_engine.generate(PROMPTS[0], params)
    assert _strip(got) == _strip(engine.generate(PROMPTS[0], params))
    assert set(runs_engine.runs) == {1}


def test_min_new_tokens_applies_on_the_device_in_runs(engine, runs_engine):
    # The stop token comes within 4 tokens; min_new_tokens bans it (and EOS) for 10 steps,
    # which end in the middle of the second run.
    base = engine.generate(PROMPTS[1], {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True})
    stop = base["output_ids"][3]
    newline = engine.tokenize("\n")[-1]  # the haiku prompt starts with one: " Here's a sample:\n"
    params = [{"temperature": 0, "max_new_tokens": 24, "stop_token_ids": [stop], "min_new_tokens": 10},
              {"temperature": 0.8, "seed": 5, "max_new_tokens": 24, "min_new_tokens": 16},
              {"temperature": 0, "max_new_tokens": 24, "stop_token_ids": [stop]},
              {"temperature": 0, "max_new_tokens": 24, "stop_token_ids": [newline], "min_new_tokens": 3}]
    kw = dict(return_logprob=True)
    prompts = [PROMPTS[1]] * 3 + [PROMPTS[4]]
    runs_engine.runs.clear()
    got = runs_engine.generate(prompts, params, **kw)
    expected = engine.generate(prompts, params, **kw)
    assert [_strip(o) for o in got] == [_strip(o) for o in expected]
    assert STEPS in runs_engine.runs
    assert got[2]["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    first = base["output_ids"].index(stop)
    assert len(got[2]["output_ids"]) == first + 1 and len(got[0]["output_ids"]) > 10  # the ban held
    assert stop not in got[0]["output_ids"][:10]
    # The newline ban lifts after 3 tokens, inside the first run: the next newline stops it there.
    assert got[3]["meta_info"]["finish_reason"]["matched"] == newline and 3 < len(got[3]["output_ids"]) <= 7
    for g, e in zip(got, expected):  # logprobs: of the logits before the ban, in both paths
        lps = [[lp for lp, _, _ in o["meta_info"]["output_token_logprobs"]] for o in (g, e)]
        assert lps[0] == pytest.approx(lps[1], abs=1e-4)  # batch shapes differ: fp32 rounding


def test_penalties_apply_on_the_device_in_runs(engine, runs_engine):
    params = [{"temperature": 0, "max_new_tokens": 30, "ignore_eos": True, "frequency_penalty": 1.5},
              {"temperature": 0, "max_new_tokens": 30, "ignore_eos": True, "presence_penalty": 1.2},
              {"temperature": 0.8, "seed": 2, "max_new_tokens": 30, "ignore_eos": True, "repetition_penalty": 1.3},
              {"temperature": 0, "max_new_tokens": 30, "ignore_eos": True}]
    runs_engine.runs.clear()
    got = runs_engine.generate(PROMPTS[5:6] * 4, params, return_logprob=True)
    expected = engine.generate(PROMPTS[5:6] * 4, params, return_logprob=True)
    assert STEPS in runs_engine.runs
    assert [_strip(o) for o in got] == [_strip(o) for o in expected]
    assert sum(o["output_ids"] != got[3]["output_ids"] for o in got[:3]) >= 2  # penalties took effect
    for g, e in zip(got, expected):  # logprobs: of the logits before penalties, in both paths
        lps = [[lp for lp, _, _ in o["meta_info"]["output_token_logprobs"]] for o in (g, e)]
        assert lps[0] == pytest.approx(lps[1], abs=1e-5)


@pytest.mark.parametrize("stop", [None, "zzzz"], ids=["batched", "stop-string path"])
def test_logprobs_are_computed_on_the_device_in_runs(engine, runs_engine, stop):
    params = [{"temperature": 0, "max_new_tokens": 24, "ignore_eos": True, "stop": stop},
              {"temperature": 0.9, "seed": 8, "max_new_tokens": 17, "logit_bias": {"13": 3.0}, "stop": stop},
              {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True}]  # no stop: mixed batch
    kw = dict(return_logprob=True, top_logprobs_num=3)
    runs_engine.runs.clear()
    got = runs_engine.generate(PROMPTS[:3], params, **kw)
    expected = engine.generate(PROMPTS[:3], params, **kw)
    assert STEPS in runs_engine.runs
    for g, e in zip(got, expected):
        assert _strip(g) == _strip(e)
        lps = [[lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]] for out in (g, e)]
        assert len(lps[0]) == len(g["output_ids"]) and lps[0] == pytest.approx(lps[1], abs=1e-5)
        tops = [out["meta_info"]["output_top_logprobs"] for out in (g, e)]
        assert [[t for _, t, _ in row] for row in tops[0]] == [[t for _, t, _ in row] for row in tops[1]]
        assert all(len(row) == 3 for row in tops[0])


def test_logit_bias_applies_on_the_device_in_runs(engine, runs_engine):
    base = engine.generate(PROMPTS[1], {"temperature": 0, "max_new_tokens": 20, "ignore_eos": True})
    bias = {str(t): -100 for t in set(base["output_ids"][2:6])} | {str(base["output_ids"][0]): 5.0}
    params = [{"temperature": 0, "max_new_tokens": 20, "ignore_eos": True, "logit_bias": bias},
              {"temperature": 0.8, "seed": 4, "max_new_tokens": 20, "ignore_eos": True, "logit_bias": bias},
              {"temperature": 0, "max_new_tokens": 20, "ignore_eos": True}]
    runs_engine.runs.clear()
    got = runs_engine.generate([PROMPTS[1]] * 3, params)
    assert STEPS in runs_engine.runs
    assert [_strip(o) for o in got] == [_strip(o) for o in engine.generate([PROMPTS[1]] * 3, params)]
    assert got[2]["output_ids"] == base["output_ids"]
    assert not {int(t) for t, b in bias.items() if b < 0} & set(got[0]["output_ids"] + got[1]["output_ids"])
