"""A step that fails because of one request's data fails that request alone: the other
requests in the batch finish normally, with the tokens they would have had without it."""

from __future__ import annotations

import threading

from sglang_lite.request import Req
from sglang_lite.sampling_params import SamplingParams
from tests.conftest import assert_no_leak


def _collect(stream) -> dict:
    text, reason = "", None
    for chunk in stream:
        text += chunk["text"]
        if chunk["finished"]:
            reason = chunk["meta_info"]["finish_reason"]
    return {"text": text, "finish_reason": reason}


def test_request_that_overflows_the_step_fails_alone(engine):
    params = {"max_new_tokens": 16, "min_new_tokens": 16, "temperature": 0}
    prompts = [f"List the numbers after {i}:" for i in range(3)]
    alone = [engine.generate(p, params)["text"] for p in prompts]
    isolated_before = engine.scheduler.guard.num_isolated

    results: list = [None] * len(prompts)
    streams = [engine.generate(p, params, stream=True) for p in prompts]
    # Past validation, as a bug elsewhere could let it through: a seed no int64 tensor holds.
    ids = engine.tokenize("x")
    bad = Req("hostile-seed", ids, SamplingParams.from_dict({"max_new_tokens": 4}), seed=2**64,
              on_output=None)
    bad_stream = engine._stream(bad)
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, _collect(streams[i])))
               for i in range(len(prompts))]
    for t in threads:
        t.start()
    bad_result = _collect(bad_stream)
    for t in threads:
        t.join(120)

    assert bad_result["finish_reason"]["type"] == "abort"
    assert "Overflow" in bad_result["finish_reason"]["message"], bad_result
    assert engine.scheduler.guard.num_isolated == isolated_before + 1
    for r, expected in zip(results, alone):
        assert r["finish_reason"]["type"] == "length", r
        assert r["text"] == expected
    assert_no_leak(engine)
