"""Each sampling option on the real model."""

from __future__ import annotations

import pytest
import torch

PROMPT = "Here is a short list of fruits:"


def gen(engine, prompt=PROMPT, **params):
    return engine.generate(prompt, params)


def test_top_k_one_equals_greedy(engine):
    greedy = gen(engine, temperature=0, max_new_tokens=16, ignore_eos=True)
    topk1 = gen(engine, temperature=1.3, top_k=1, max_new_tokens=16, ignore_eos=True, seed=7)
    assert topk1["output_ids"] == greedy["output_ids"]


def test_seed_is_reproducible_and_seeds_differ(engine):
    a = gen(engine, temperature=1.0, max_new_tokens=24, seed=1234, ignore_eos=True)
    b = gen(engine, temperature=1.0, max_new_tokens=24, seed=1234, ignore_eos=True)
    assert a["output_ids"] == b["output_ids"]
    # the other seeds in one batch (24 decode steps, not 72): a seed's draws do not depend on its batch
    others = engine.generate([PROMPT] * 3, [{"temperature": 1.0, "max_new_tokens": 24, "seed": s, "ignore_eos": True}
                                            for s in (1, 2, 3)])
    assert any(o["output_ids"] != a["output_ids"] for o in others)


def test_seeded_output_does_not_depend_on_the_batch(engine):
    alone = gen(engine, temperature=0.9, top_p=0.9, max_new_tokens=16, seed=99, ignore_eos=True)
    batch = engine.generate([PROMPT, "Another prompt entirely", PROMPT],
                            [{"temperature": 0.7, "max_new_tokens": 5, "seed": 1},
                             {"temperature": 0.5, "max_new_tokens": 30, "seed": 2},
                             {"temperature": 0.9, "top_p": 0.9, "max_new_tokens": 16, "seed": 99,
                              "ignore_eos": True}])
    assert batch[2]["output_ids"] == alone["output_ids"]


def test_stop_string_is_cut_and_reported(engine):
    full = gen(engine, temperature=0, max_new_tokens=40, ignore_eos=True)
    words = full["text"].split()
    stop = next(w for w in words[2:] if len(w) >= 3)
    out = gen(engine, temperature=0, max_new_tokens=40, ignore_eos=True, stop=[stop, "zzzzzz"])
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert stop not in out["text"]
    assert full["text"].startswith(out["text"])
    assert len(out["output_ids"]) < len(full["output_ids"])


def test_stop_token_ids_and_ignore_eos(engine):
    full = gen(engine, temperature=0, max_new_tokens=20, ignore_eos=True)
    tok = full["output_ids"][5]
    out = gen(engine, temperature=0, max_new_tokens=20, stop_token_ids=[tok])
    first = full["output_ids"].index(tok)
    assert out["output_ids"] == full["output_ids"][: first + 1]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": tok}


def test_eos_stops_unless_ignored(engine):
    chat = engine.apply_chat_template([{"role": "user", "content": "Say hi."}])
    out = engine.generate(chat, {"temperature": 0, "max_new_tokens": 64})
    assert out["meta_info"]["finish_reason"]["type"] == "stop"
    assert out["output_ids"][-1] in engine.eos_token_ids
    assert "<|im_end|>" not in out["text"]
    longer = engine.generate(chat, {"temperature": 0, "max_new_tokens": len(out["output_ids"]) + 5,
                                    "ignore_eos": True})
    assert longer["meta_info"]["finish_reason"]["type"] == "length"
    assert len(longer["output_ids"]) == len(out["output_ids"]) + 5


def test_min_new_tokens_blocks_early_eos(engine):
    chat = engine.apply_chat_template([{"role": "user", "content": "Say hi."}])
    short = engine.generate(chat, {"temperature": 0, "max_new_tokens": 64})
    n = len(short["output_ids"])
    out = engine.generate(chat, {"temperature": 0, "max_new_tokens": 64, "min_new_tokens": n + 3})
    assert len(out["output_ids"]) >= n + 3
    assert not set(out["output_ids"][: n + 2]) & set(engine.eos_token_ids)


def test_max_new_tokens_and_length_reason(engine):
    out = gen(engine, temperature=0, max_new_tokens=3, ignore_eos=True)
    assert len(out["output_ids"]) == 3
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert out["meta_info"]["completion_tokens"] == 3


def test_n_returns_independent_samples(engine):
    outs = gen(engine, temperature=1.0, max_new_tokens=12, n=3, seed=5, ignore_eos=True)
    assert isinstance(outs, list) and len(outs) == 3
    assert len({tuple(o["output_ids"]) for o in outs}) > 1


@pytest.mark.parametrize("penalty", [{"frequency_penalty": 2.0}, {"presence_penalty": 2.0},
                                     {"repetition_penalty": 1.9}])
def test_penalties_reduce_repetition(engine, penalty):
    prompt = "Repeat after me: go go go go go go go go go go"
    base = engine.generate(prompt, {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True})
    pen = engine.generate(prompt, {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True, **penalty})
    def distinct(ids):
        return len(set(ids))
    assert pen["output_ids"] != base["output_ids"]
    assert distinct(pen["output_ids"]) > distinct(base["output_ids"])


def test_top_p_and_min_p_restrict_to_likely_tokens(engine):
    # With a tiny top_p (or a min_p close to 1) only the most likely token survives: greedy.
    greedy = gen(engine, temperature=0, max_new_tokens=12, ignore_eos=True)["output_ids"]
    assert gen(engine, temperature=1.0, top_p=1e-6, max_new_tokens=12, ignore_eos=True, seed=3)["output_ids"] == greedy
    assert gen(engine, temperature=1.0, min_p=0.9999, max_new_tokens=12, ignore_eos=True, seed=3)["output_ids"] == greedy


def test_output_logprobs_and_top_alternatives(engine, hf_model):
    out = engine.generate(PROMPT, {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True},
                          return_logprob=True, top_logprobs_num=3)
    lps = out["meta_info"]["output_token_logprobs"]
    tops = out["meta_info"]["output_top_logprobs"]
    assert [t for _, t, _ in lps] == out["output_ids"]
    # transformers scores the same tokens: each step's top 3 and the chosen token's logprob.
    ids = engine.tokenize(PROMPT)
    with torch.no_grad():
        ref = torch.log_softmax(hf_model(torch.tensor([ids + out["output_ids"]])).logits[0].float(), -1)
    for k, ((lp, tok, _), top) in enumerate(zip(lps, tops)):
        want = ref[len(ids) - 1 + k].topk(3)
        assert [t for _, t, _ in top] == want.indices.tolist()
        assert [v for v, _, _ in top] == pytest.approx(want.values.tolist(), abs=1e-4)
        assert top[0][1] == tok and lp == pytest.approx(want.values[0].item(), abs=1e-4)  # greedy = argmax


def test_logit_bias_bans_and_forces_tokens(engine):
    greedy = gen(engine, temperature=0, max_new_tokens=12, ignore_eos=True)
    banned = sorted(set(greedy["output_ids"][:3]))
    out = gen(engine, temperature=0, max_new_tokens=12, ignore_eos=True, logit_bias={str(t): -100 for t in banned})
    assert not set(out["output_ids"]) & set(banned)
    forced = engine.tokenize(" banana")[-1]
    out = gen(engine, temperature=0.7, seed=3, max_new_tokens=5, ignore_eos=True, logit_bias={forced: 100})
    assert out["output_ids"] == [forced] * 5
    # a small bias only shifts: the unbiased rows of a batch are unaffected
    both = engine.generate([PROMPT, PROMPT], [{"temperature": 0, "max_new_tokens": 12, "ignore_eos": True},
                                              {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True,
                                               "logit_bias": {banned[0]: -100}}])
    assert both[0]["output_ids"] == greedy["output_ids"] and banned[0] not in both[1]["output_ids"]


def test_logit_bias_token_out_of_vocabulary_is_refused(engine):
    with pytest.raises(ValueError, match="logit_bias"):
        gen(engine, max_new_tokens=2, logit_bias={engine.model_config.vocab_size: 1.0})
