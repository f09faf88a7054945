"""The official openai client against the live server: completions, chat, streaming, n,
stop, logprobs, usage, structured outputs; plus the SGLang-native routes."""

from __future__ import annotations

import gc
import json
import re
import weakref

import pytest

from tests.json_validation import validate_with_formats
from tests.server.conftest import assert_no_leaked_pages, scrape, wait_idle

PROMPT = "The capital of France is"
CHAT = [{"role": "user", "content": "Name three colors."}]


def test_models(client, model_name):
    models = client.models.list()
    assert [m.id for m in models.data] == [model_name]
    assert client.models.retrieve(model_name).id == model_name


def _flush(http) -> None:
    wait_idle(http)
    assert http.post("/flush_cache").status_code == 200


def test_completion_usage_and_text(client, engine, http, model_name):
    _flush(http)
    r = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=5, temperature=0)
    direct = engine.generate(PROMPT, {"max_new_tokens": 5, "temperature": 0})
    assert r.object == "text_completion" and len(r.choices) == 1
    assert r.choices[0].text == direct["text"] != ""
    assert r.choices[0].finish_reason == direct["meta_info"]["finish_reason"]["type"]
    assert r.usage.prompt_tokens == len(engine.tokenize(PROMPT))
    assert r.usage.completion_tokens == len(direct["output_ids"])
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details.cached_tokens == 0  # the cache was empty


def test_completion_stream_matches_non_stream(client, model_name):
    kw = dict(model=model_name, prompt=PROMPT, max_tokens=8, temperature=0)
    full = client.completions.create(**kw).choices[0].text
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == full
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_chat_and_stream_match(client, engine, model_name):
    kw = dict(model=model_name, messages=CHAT, max_tokens=8, temperature=0)
    r = client.chat.completions.create(**kw)
    msg = r.choices[0].message
    assert r.object == "chat.completion" and msg.role == "assistant" and msg.content
    prompt = engine.apply_chat_template(CHAT)
    assert r.usage.prompt_tokens == len(engine.tokenize(prompt))
    assert r.usage.completion_tokens <= 8
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == msg.content
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == r.choices[0].finish_reason


def test_chat_max_completion_tokens_and_sampling_fields(client, model_name):
    r = client.chat.completions.create(
        model=model_name, messages=CHAT, max_completion_tokens=3, temperature=0.7, top_p=0.9,
        seed=7, frequency_penalty=0.5, presence_penalty=0.5,
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "ignore_eos": True})
    assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length"


REPETITIVE = "Repeat after me: go go go go go go go go go go"


@pytest.mark.parametrize("field,value,greedy", [
    ("top_k", 1, True), ("top_p", 1e-6, True), ("min_p", 0.9999, True),
    ("frequency_penalty", 2.0, False), ("presence_penalty", 2.0, False), ("repetition_penalty", 1.9, False)])
def test_each_sampling_field_reaches_the_engine(client, engine, model_name, field, value, greedy):
    # top_k 1, a tiny top_p and a min_p near 1 keep only the likeliest token: a seeded
    # temperature-1 draw turns greedy. A penalty changes a repetitive greedy output. Either
    # way the server's text is what the engine makes of the same setting.
    temperature = 1.0 if greedy else 0.0
    params = {"max_new_tokens": 12, "ignore_eos": True, "temperature": temperature, "seed": 3}
    base = engine.generate(REPETITIVE, params)["text"]
    plain_greedy = engine.generate(REPETITIVE, {**params, "temperature": 0})["text"]
    assert (base != plain_greedy) if greedy else (base == plain_greedy)  # the setting has work to do
    extra = {"ignore_eos": True}
    kw = {field: value} if field in ("top_p", "frequency_penalty", "presence_penalty") else {}
    extra.update({} if kw else {field: value})
    r = client.completions.create(model=model_name, prompt=REPETITIVE, max_tokens=12, temperature=temperature,
                                  seed=3, extra_body=extra, **kw)
    want = engine.generate(REPETITIVE, {**params, field: value})["text"]
    assert r.choices[0].text == want
    assert (want == plain_greedy) if greedy else (want != plain_greedy)


def test_logit_bias_bans_and_forces(client, engine, model_name):
    kw = dict(model=model_name, messages=CHAT, max_tokens=6, temperature=0)
    plain = client.chat.completions.create(**kw).choices[0].message.content
    first = engine.tokenize(plain)[0]
    banned = client.chat.completions.create(logit_bias={str(first): -100}, **kw).choices[0].message.content
    assert engine.tokenize(banned)[0] != first
    forced = engine.tokenize(" yes")[-1]
    r = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=4, temperature=0.9, seed=1,
                                  logit_bias={str(forced): 100})
    assert r.choices[0].text == " yes" * 4


def test_echo_with_logprobs_scores_the_prompt(client, engine, http, model_name):
    """lm-eval's loglikelihood request: echo, logprobs, max_tokens 0."""
    prompt = "The capital of France is Paris"
    ids = engine.tokenize(prompt)
    r = client.completions.create(model=model_name, prompt=prompt, max_tokens=0, echo=True, logprobs=2)
    lp = r.choices[0].logprobs
    assert r.choices[0].text == prompt
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(ids)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None and lp.text_offset[0] == 0
    native = http.post("/generate", json={"input_ids": ids, "return_logprob": True, "logprob_start_len": 0,
                                          "sampling_params": {"max_new_tokens": 0}}).json()
    want = [row[0] for row in native["meta_info"]["input_token_logprobs"]]
    assert lp.token_logprobs[1:] == pytest.approx(want[1:], abs=1e-4)
    for got, top in zip(lp.token_logprobs[1:], lp.top_logprobs[1:]):
        assert len(top) <= 2 and max(top.values()) >= got - 1e-5
    assert "".join(lp.tokens) == prompt
    more = client.completions.create(model=model_name, prompt=prompt, max_tokens=3, temperature=0, echo=True,
                                     logprobs=1)
    assert len(more.choices[0].logprobs.tokens) == len(ids) + 3
    assert more.choices[0].text.startswith(prompt) and more.choices[0].logprobs.token_logprobs[-1] <= 0


def test_best_of_returns_the_most_likely_candidates(client, model_name):
    kw = dict(model=model_name, prompt=PROMPT, max_tokens=6, temperature=1.2, seed=5, logprobs=0)
    r = client.completions.create(n=2, best_of=6, **kw)
    assert [c.index for c in r.choices] == [0, 1]
    means = [sum(c.logprobs.token_logprobs) / len(c.logprobs.token_logprobs) for c in r.choices]
    assert means[0] >= means[1]
    assert r.usage.completion_tokens > sum(len(c.logprobs.tokens) for c in r.choices)  # all 6 are counted
    # the best of 6 is at least as likely as the best of the first 2 of the same seeds
    two = client.completions.create(n=2, **kw)
    best_two = max(sum(c.logprobs.token_logprobs) / len(c.logprobs.token_logprobs) for c in two.choices)
    assert means[0] >= best_two - 1e-4  # the same sequence scores a little differently in another batch


def test_seed_is_reproducible(client, model_name):
    kw = dict(model=model_name, prompt=PROMPT, max_tokens=6, temperature=1.0, seed=1234)
    assert client.completions.create(**kw).choices[0].text == client.completions.create(**kw).choices[0].text


def test_n2(client, model_name):
    r = client.chat.completions.create(model=model_name, messages=CHAT, max_tokens=4, n=2,
                                       temperature=1.0, seed=3)
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert 2 <= r.usage.completion_tokens <= 8  # both choices count, each at most max_tokens
    chunks = list(client.completions.create(model=model_name, prompt=PROMPT, max_tokens=4, n=2,
                                            temperature=0, stream=True))
    texts = {0: "", 1: ""}
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] += ch.text
    assert texts[0] == texts[1] != ""  # greedy: both choices agree


def test_stop(client, model_name):
    base = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=8, temperature=0)
    text = base.choices[0].text
    stop = text.strip().split()[0][:3] if text.strip() else "."
    r = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=8, temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert stop not in r.choices[0].text
    assert text.startswith(r.choices[0].text)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=model_name, prompt=PROMPT, max_tokens=8, temperature=0, stop=stop, stream=True) if c.choices)
    assert streamed == r.choices[0].text


def test_completion_logprobs(client, model_name):
    r = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert "".join(lp.tokens) == r.choices[0].text
    for val, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert val <= 0 and len(top) == 2
        assert max(top.values()) == pytest.approx(val, abs=1e-4)  # greedy picks the argmax


def test_chat_logprobs_stream_and_not(client, model_name):
    kw = dict(model=model_name, messages=CHAT, max_tokens=4, temperature=0, logprobs=True, top_logprobs=3)
    r = client.chat.completions.create(**kw)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert all(len(c.top_logprobs) == 3 and c.logprob <= 0 for c in content)
    streamed = [e for ch in client.chat.completions.create(stream=True, **kw) if ch.choices
                and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [c.token for c in content]


def test_cached_tokens_on_repeat(client, engine, http, model_name):
    prompt = "You are a helpful assistant. " * 8 + "Answer briefly: what is two plus two?"
    _flush(http)
    first = client.completions.create(model=model_name, prompt=prompt, max_tokens=2, temperature=0)
    r = client.completions.create(model=model_name, prompt=prompt, max_tokens=2, temperature=0)
    n = len(engine.tokenize(prompt))
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    # Every whole page of the prompt but the one holding its last token (which is computed).
    page = engine.config.page_size
    assert r.usage.prompt_tokens_details.cached_tokens == (n - 1) // page * page > 0


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def test_response_format_json_schema(client, model_name):
    r = client.chat.completions.create(
        model=model_name, temperature=0, max_tokens=48,
        messages=[{"role": "user", "content": "Give a person as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}})
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    validate_with_formats(json.loads(r.choices[0].message.content), SCHEMA)


def test_response_format_json_object_and_regex(client, model_name):
    ask = 'Reply with exactly this JSON object: {"ok": true}'
    r = client.chat.completions.create(model=model_name, temperature=0, max_tokens=32,
                                       messages=[{"role": "user", "content": ask}],
                                       response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    r = client.completions.create(model=model_name, prompt="Phone: ", max_tokens=16, temperature=0,
                                  extra_body={"regex": r"[0-9]{3}-[0-9]{4}"})
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", r.choices[0].text) and r.choices[0].finish_reason == "stop"


def test_parse_into_a_pydantic_model(client, model_name):
    # The openai client's parse(): a Pydantic model turned into a strict JSON schema (a set of
    # Literals is uniqueItems over an enum, timedelta a duration, a float step a multipleOf).
    from datetime import timedelta
    from typing import Literal

    from pydantic import BaseModel, Field

    class Ticket(BaseModel):
        priority: Literal["low", "medium", "high"]
        tags: set[Literal["billing", "bug", "login"]]
        eta: timedelta
        estimate_hours: float = Field(ge=0.5, le=40, multiple_of=0.5)

    r = client.chat.completions.parse(
        model=model_name, temperature=0, max_tokens=120, response_format=Ticket,
        messages=[{"role": "user", "content": "File a ticket: login page is down."}])
    ticket = r.choices[0].message.parsed
    assert isinstance(ticket, Ticket), r.choices[0].message.content
    assert (ticket.estimate_hours * 2).is_integer() and 0.5 <= ticket.estimate_hours <= 40


# ---- native routes --------------------------------------------------------------------------
def test_native_generate(http, engine):
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 4, "temperature": 0},
            "return_logprob": True, "top_logprobs_num": 2}
    r = http.post("/generate", json=body).json()
    assert len(r["output_ids"]) == 4 and r["meta_info"]["completion_tokens"] == 4
    assert r["meta_info"]["finish_reason"]["type"] == "length"
    assert len(r["meta_info"]["output_token_logprobs"]) == 4
    assert len(r["meta_info"]["output_top_logprobs"][0]) == 2
    assert r["meta_info"]["input_token_logprobs"] == []
    with_input = http.post("/generate", json={**body, "logprob_start_len": 0}).json()
    input_lps = with_input["meta_info"]["input_token_logprobs"]
    assert [t for _, t, _ in input_lps] == engine.tokenize(PROMPT)
    assert input_lps[0][0] is None and all(lp <= 0 for lp, _, _ in input_lps[1:])
    ids = http.post("/generate", json={"input_ids": engine.tokenize(PROMPT),
                                       "sampling_params": {"max_new_tokens": 4, "temperature": 0}}).json()
    assert ids["text"] == r["text"]
    batch = http.post("/generate", json={"text": [PROMPT, "Hello"],
                                         "sampling_params": {"max_new_tokens": 2, "temperature": 0}}).json()
    assert isinstance(batch, list) and len(batch) == 2 and batch[0]["text"] == engine.tokenizer.decode(
        r["output_ids"][:2])


def test_native_generate_stream_is_cumulative(http):
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 5, "temperature": 0}}
    full = http.post("/generate", json=body).json()
    events = []
    with http.stream("POST", "/generate", json={**body, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    assert events[-1] == "[DONE]"
    payloads = [json.loads(e) for e in events[:-1]]
    assert payloads[-1]["text"] == full["text"]
    assert all(full["text"].startswith(p["text"]) for p in payloads)
    assert payloads[-1]["meta_info"]["finish_reason"]["type"] == "length"


def test_freeze_gc_moves_the_live_heap_out_of_the_collectors_reach(http):
    """SGLang's /freeze_gc: what is alive is frozen (an in-process server: the test's own heap
    too, so it is unfrozen after), later objects are collected as before, and a second call
    within the interval freezes nothing (a client calling it over and over stalls nothing)."""
    gc.unfreeze()
    before = http.get("/get_server_info").json()["gc_frozen_objects"]
    try:
        r = http.post("/freeze_gc")
        assert r.status_code == 200 and r.text == "Garbage collection frozen.\n"
        frozen = http.get("/get_server_info").json()["gc_frozen_objects"]
        assert frozen - before > 100_000 and gc.get_freeze_count() > 100_000  # frozen objects can still die
        cycle: list = []
        cycle.append(cycle)
        ref = weakref.ref(_Cyclic(cycle))
        gc.collect()
        assert ref() is None  # garbage made after the freeze is still collected
        made_after = [[]]
        assert http.get("/freeze_gc").status_code == 200  # within the interval: nothing done
        assert http.get("/get_server_info").json()["gc_frozen_objects"] == frozen
        assert any(o is made_after for o in gc.get_objects())  # still the collector's, not frozen
    finally:
        gc.unfreeze()


class _Cyclic:
    def __init__(self, other):
        self.me, self.other = self, other


def test_health_info_flush_metrics(http, model_name):
    assert http.get("/health").status_code == 200
    assert http.get("/health_generate").status_code == 200
    info = http.get("/get_model_info").json()
    assert info["served_model_name"] == model_name and info["is_generation"]
    text = http.get("/metrics").text
    for name in ("num_running_reqs", "num_queue_reqs", "token_usage", "cache_hit_rate", "gen_throughput",
                 "time_to_first_token_seconds_bucket", "inter_token_latency_seconds_bucket",
                 "e2e_request_latency_seconds_bucket", "prompt_tokens_total", "generation_tokens_total",
                 "cached_tokens_total", "num_requests_total", "grammar_compile_seconds_bucket"):
        assert f"sglang_lite:{name}" in text, name
    assert scrape(http)["sglang_lite:num_requests_total"] > 0
    assert_no_leaked_pages(http)
