"""8-bit KV caches on the real model: greedy agreement with the model-dtype cache; the radix
cache leaves outputs equal to the same engine (same KV dtype) without it, and retraction keeps
them (see the retraction test for what "keeps" means at 8 bits)."""

from __future__ import annotations

import pytest
import torch

from sglang_lite import Engine
from sglang_lite.mem import KVPool
from tests.conftest import assert_no_leak
from tests.e2e.test_radix_cache import _prompts
from tests.e2e.test_retraction import PROMPTS

AGREEMENT_PROMPTS = ["The capital of France is", "Write a short poem about the sea.", "def fibonacci(n):",
                     "Explain why the sky is blue in one paragraph.", "List three fruits:", "Once upon a time,",
                     "The quick brown fox", "What is 12 times 7?"]
# Teacher-forced top-1 agreement with the model-dtype (fp32) cache over 8 prompts x 32 tokens,
# measured: int8 254/256 (0.992), fp8_e4m3 250/256 (0.977); bf16 256/256.
MIN_AGREEMENT = {"int8": 0.97, "fp8_e4m3": 0.93}


@pytest.fixture(scope="module")
def int8_engine(model_dir):
    eng = Engine(kv_cache_dtype="int8", kv_cache_memory="64MiB")
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def int8_no_radix(model_dir):
    eng = Engine(kv_cache_dtype="int8", kv_cache_memory="64MiB", disable_radix_cache=True)
    yield eng
    eng.shutdown()


def _teacher_forced_agreement(eng: Engine, seqs: list[list[int]], starts: list[int]) -> float:
    """Share of the reference's generated tokens that ``eng`` also ranks first, each scored
    on the reference's own prefix (one divergence does not decide the rest)."""
    outs = eng.generate(input_ids=seqs, sampling_params={"temperature": 0, "max_new_tokens": 1},
                        return_logprob=True, logprob_start_len=0, top_logprobs_num=1)
    same = total = 0
    for out, seq, start in zip(outs, seqs, starts):
        tops = out["meta_info"]["input_top_logprobs"]
        total += len(seq) - start
        same += sum(tops[i][0][1] == seq[i] for i in range(start, len(seq)))
    return same / total


@pytest.fixture(scope="module")
def fp32_reference(engine):
    """(greedy outputs, prompt+output ids, prompt lengths) of the model-dtype cache, computed once
    for both 8-bit formats; the agreement measure is checked exact on them."""
    params = {"temperature": 0, "max_new_tokens": 32, "ignore_eos": True}
    ref = engine.generate(AGREEMENT_PROMPTS, params)
    starts = [len(engine.tokenize(p)) for p in AGREEMENT_PROMPTS]
    seqs = [engine.tokenize(p) + o["output_ids"] for p, o in zip(AGREEMENT_PROMPTS, ref)]
    assert _teacher_forced_agreement(engine, seqs, starts) == 1.0  # the measure itself is exact
    return ref, seqs, starts


@pytest.mark.parametrize("kv", ["int8", "fp8_e4m3"])
def test_eight_bit_kv_agrees_with_the_model_dtype_cache(engine, fp32_reference, int8_engine, kv):
    params = {"temperature": 0, "max_new_tokens": 32, "ignore_eos": True}
    ref, seqs, starts = fp32_reference
    eng = int8_engine if kv == "int8" else Engine(kv_cache_dtype=kv, kv_cache_memory="64MiB")
    try:
        assert eng.config.kv_cache_dtype == kv and eng.kv_pool.k_scales is not None
        assert _teacher_forced_agreement(eng, seqs, starts) >= MIN_AGREEMENT[kv]
        # Free-running decode through the 8-bit pages (written a token at a time, read back at
        # every step): each token it picks must be the one the reference ranks first on that
        # output's own prefix. Not "whole outputs equal to the reference's" (>= 6 of 8 before):
        # one near-tie flipped early changes every later token, and which ties flip moves with
        # the weights' kernel: 6 of 8 equal with the dequantized checkpoint, 5 of 8 with the
        # GGUF blocks (the default since), the same weights with the model-dtype KV as reference.
        # Measured with the GGUF blocks: int8 0.992 (6 of 8 equal), fp8_e4m3 0.965 (5 of 8).
        greedy = eng.generate(AGREEMENT_PROMPTS, params)
        free = [engine.tokenize(p) + o["output_ids"] for p, o in zip(AGREEMENT_PROMPTS, greedy)]
        equal = sum(o["output_ids"] == r["output_ids"] for o, r in zip(greedy, ref))
        agreement = _teacher_forced_agreement(engine, free, starts)
        print(f"{kv}: {equal} of 8 outputs equal, free-running tokens ranked first by the reference {agreement:.3f}")
        assert agreement >= MIN_AGREEMENT[kv]
    finally:
        if eng is not int8_engine:
            eng.shutdown()


def test_eight_bit_pool_holds_more_tokens_in_the_same_budget(int8_engine):
    budget = 64 * 2**20
    bf16 = KVPool.bytes_per_token(30, 3, 64, torch.bfloat16)
    assert int8_engine.kv_pool.num_slots == (budget // (2 * 30 * 3 * 66)) // 16 * 16 + 16  # + the padding page
    assert 1.9 < (int8_engine.kv_pool.num_slots - 16) / (budget // bf16 // 16 * 16) < 2.0
    assert int8_engine.kv_pool.num_bytes <= budget + 16 * 2 * 30 * 3 * 66


def test_int8_radix_cache_on_equals_off(int8_engine, int8_no_radix):
    assert int8_engine.flush_cache()
    prompts = _prompts(int8_engine.tokenizer)
    params = {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}
    ref = [int8_no_radix.generate(input_ids=p, sampling_params=params)["output_ids"] for p in prompts]
    int8_engine.generate(input_ids=prompts[0], sampling_params=params)
    outs = [int8_engine.generate(input_ids=p, sampling_params=params) for p in prompts]
    assert [o["output_ids"] for o in outs] == ref
    assert outs[1]["meta_info"]["cached_tokens"] >= 48  # the shared prefix was read from the 8-bit pages
    assert_no_leak(int8_engine)


def test_int8_tiny_pool_retracts_and_outputs_are_unchanged(int8_no_radix):
    """A retracted request recomputes its KV in a prefill instead of the decode steps that first
    wrote it; fp32 rounding differences between the two (~1e-7) move a few int8 codes by one
    step, which a near-tie can turn into another greedy token. Measured here (24 tokens, 3
    retractions): 7 of 8 outputs equal, the eighth diverges at token 5, teacher-forced agreement
    1.0 (at 40 tokens: 7 equal, agreement 0.991). So outputs are held to that: most equal,
    and at least 97% of their tokens ranked first by the no-retraction engine on their prefix
    (stale scales or pages after a retraction would break that)."""
    params = {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True}  # 8 x 3 pages > 12
    reference = [o["output_ids"] for o in int8_no_radix.generate(PROMPTS, params)]
    tiny = Engine(kv_cache_dtype="int8", max_total_tokens=12 * 16, disable_radix_cache=True)
    try:
        outs = [o["output_ids"] for o in tiny.generate(PROMPTS, params)]
        assert tiny.get_stats()["num_retractions"] > 0, "the pool was meant to run out"
        assert sum(o == r for o, r in zip(outs, reference)) >= 6
        starts = [len(tiny.tokenize(p)) for p in PROMPTS]
        seqs = [tiny.tokenize(p) + o for p, o in zip(PROMPTS, outs)]
        assert _teacher_forced_agreement(int8_no_radix, seqs, starts) >= 0.97
        assert_no_leak(tiny)
    finally:
        tiny.shutdown()
