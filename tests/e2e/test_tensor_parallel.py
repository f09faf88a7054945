"""Tensor parallelism on the embedded model, 2 ranks over gloo on the CPU (one torch thread
each): greedy outputs equal tp=1's (mixed batch, chunked prefill, radix cache, a constraint),
and a rank that dies ends the engine with a clear error, promptly.

fp32 is pinned: the row-parallel all-reduce adds the ranks' partial sums in another order than
one matmul does, so logits differ in the last bits; greedy tokens agree unless two logits tie
that closely (logprobs are compared to 1e-4). So is quantization "none": tp > 1 runs the
dequantized checkpoint, and tp=1 must run the same weights (its default keeps the GGUF blocks)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from sglang_lite import Engine
from sglang_lite.errors import RankFailed
from tests.conftest import assert_no_leak

OPTIONS = {"dtype": "float32", "num_threads": 1, "kv_cache_memory": "48MiB", "chunked_prefill_size": 16,
           "max_prefill_tokens": 64, "num_continuous_decode_steps": 4, "quantization": "none"}
SYSTEM = "You are a helpful assistant who answers in one short sentence. " * 3
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                           "population": {"type": "integer"}},
          "required": ["city", "population"], "additionalProperties": False}


@pytest.fixture(scope="module")
def tp1(model_dir):
    eng = Engine(**OPTIONS)
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def tp2(model_dir):
    eng = Engine(tp=2, **OPTIONS)
    yield eng
    eng.shutdown()


def _batch():
    prompts = ["The capital of France is", SYSTEM + "Question: why is the sky blue?", "1, 2, 3,",
               "Write a very long story about a dragon who learns to cook. " * 4,  # 4 chunks of 16
               "Give the city and population of Paris as JSON:"]
    params = [{"temperature": 0, "max_new_tokens": n, "ignore_eos": True} for n in (12, 10, 8, 6)]
    params.append({"temperature": 0, "max_new_tokens": 40, "json_schema": SCHEMA})
    return prompts, params


def test_tp2_shards_heads_and_kv_pool(tp2):
    assert tp2.model.layers[0].self_attn.num_heads == 6  # 9 heads over 2 ranks, by KV group
    assert tp2.kv_pool.num_kv_heads == 2  # rank 0's pool holds its KV heads only
    assert tp2.model.embed_tokens.weight.shape[0] == 49152 // 2
    assert len(tp2.tp.procs) == 1 and tp2.tp.procs[0].poll() is None


def test_tp2_greedy_equals_tp1_mixed_batch(tp1, tp2):
    prompts, params = _batch()
    ref = tp1.generate(prompts, params)
    out = tp2.generate(prompts, params)
    assert [o["output_ids"] for o in out] == [r["output_ids"] for r in ref]
    assert [o["meta_info"]["completion_tokens"] for o in out] == [12, 10, 8, 6, out[-1]["meta_info"]["completion_tokens"]]
    doc = json.loads(out[-1]["text"])  # the constrained request
    assert set(doc) == {"city", "population"} and isinstance(doc["population"], int)
    assert_no_leak(tp2)


def test_tp2_radix_cache_hits_and_matches(tp1, tp2):
    params = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}
    for eng in (tp1, tp2):
        assert eng.flush_cache()
    first = [e.generate(SYSTEM + "Name a fruit.", params) for e in (tp1, tp2)]
    second = [e.generate(SYSTEM + "Name a planet.", params) for e in (tp1, tp2)]
    assert first[0]["output_ids"] == first[1]["output_ids"]
    assert second[0]["output_ids"] == second[1]["output_ids"]
    cached = [s["meta_info"]["cached_tokens"] for s in second]
    assert cached[1] == cached[0] >= 32  # the shared system prompt's pages, read from every rank's pool


def test_tp2_input_logprobs_match_tp1(tp1, tp2):
    prompt = "The quick brown fox jumps over the lazy dog because"
    outs = [e.generate(prompt, {"temperature": 0, "max_new_tokens": 4}, return_logprob=True,
                       logprob_start_len=0, top_logprobs_num=2) for e in (tp1, tp2)]
    a, b = (o["meta_info"]["input_token_logprobs"][1:] for o in outs)
    assert [t for _, t, *_ in a] == [t for _, t, *_ in b]
    assert max(abs(x[0] - y[0]) for x, y in zip(a, b)) < 1e-4


def test_tp_that_does_not_split_the_model_is_refused_before_starting(model_dir):
    for tp, words in ((10, "at most 9"), (4, "multiple of 3")):
        with pytest.raises(ValueError, match=rf"^tp: .*{words}"):
            Engine(tp=tp, **OPTIONS)


def test_a_killed_worker_rank_ends_the_engine_with_a_clear_error(model_dir):
    eng = Engine(tp=2, **OPTIONS)
    try:
        worker = eng.tp.procs[0]
        stream = eng.generate("Tell me a long story.", {"max_new_tokens": 400, "ignore_eos": True}, stream=True)
        chunks = []
        reader = threading.Thread(target=lambda: chunks.extend(stream), daemon=True)
        reader.start()
        deadline = time.monotonic() + 60
        while not chunks and time.monotonic() < deadline:  # the request is decoding
            time.sleep(0.02)
        assert chunks, "no output before the kill"
        killed = time.monotonic()
        worker.kill()
        reader.join(timeout=15)
        assert not reader.is_alive(), "the running request hangs after a rank died"
        elapsed = time.monotonic() - killed
        last = chunks[-1]
        assert last["finished"] and last["meta_info"]["finish_reason"]["type"] == "abort"
        assert "rank 1" in last["meta_info"]["finish_reason"]["message"]
        assert len(last["output_ids"]) < 400
        with pytest.raises(RankFailed, match=r"rank 1 \(pid \d+\) died \(killed by signal 9\)"):
            eng.generate("Hello", {"max_new_tokens": 2})
        assert isinstance(eng.failure, RankFailed)
        with pytest.raises(RankFailed):
            eng.get_stats()
        assert elapsed < 10, elapsed
    finally:
        started = time.monotonic()
        eng.shutdown()
        assert time.monotonic() - started < 15
