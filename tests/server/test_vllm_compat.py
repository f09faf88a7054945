"""vLLM's structured-output spellings, choices and stop_regex, and per-chunk usage, through
the official openai client (extra_body) and SGLang's /generate."""

from __future__ import annotations

import json
import re

import openai
import pytest

from tests.server.conftest import assert_no_leaked_pages

CHAT = [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
GRAMMAR = 'start: "color: " COLOR\nCOLOR: "red" | "green" | "blue"'


def _chat(client, model_name, max_tokens=24, **extra):
    return client.chat.completions.create(model=model_name, messages=CHAT, max_tokens=max_tokens,
                                          temperature=0, extra_body=extra).choices[0].message.content


def _check_json(text):
    value = json.loads(text)
    return set(value) == {"name", "age"} and isinstance(value["age"], int) and len(value["name"]) <= 8


@pytest.mark.parametrize("extra,check", [
    ({"guided_choice": ["maybe so", "never"]}, lambda t: t in ("maybe so", "never")),
    ({"structured_outputs": {"choice": ["maybe so", "never"]}}, lambda t: t in ("maybe so", "never")),
    ({"choices": ["maybe so", "never"]}, lambda t: t in ("maybe so", "never")),
    ({"guided_regex": r"[0-9]{3}-[a-z]{2}"}, lambda t: re.fullmatch(r"[0-9]{3}-[a-z]{2}", t)),
    ({"structured_outputs": {"regex": r"[0-9]{3}-[a-z]{2}"}}, lambda t: re.fullmatch(r"[0-9]{3}-[a-z]{2}", t)),
    ({"guided_json": SCHEMA}, _check_json),
    ({"guided_json": json.dumps(SCHEMA)}, _check_json),
    ({"structured_outputs": {"json": SCHEMA}}, _check_json),
    ({"guided_grammar": GRAMMAR}, lambda t: re.fullmatch("color: (red|green|blue)", t)),
    ({"structured_outputs": {"grammar": GRAMMAR}}, lambda t: re.fullmatch("color: (red|green|blue)", t)),
    ({"structured_outputs": {"json_object": True}}, lambda t: isinstance(json.loads(t), dict)),
])
def test_vllm_spellings_constrain_the_output(client, model_name, extra, check):
    text = _chat(client, model_name, max_tokens=48, **extra)
    assert check(text), (extra, text)


def test_guided_choice_on_completions_and_generate(client, http, model_name):
    choices = ["Paris", "Lyon", "a city of lights"]
    r = client.completions.create(model=model_name, prompt="The capital of France is", max_tokens=8,
                                  temperature=0, extra_body={"guided_choice": choices})
    assert r.choices[0].text in choices
    g = http.post("/generate", json={"text": "The capital of France is",
                                     "sampling_params": {"choices": choices, "max_new_tokens": 8,
                                                         "temperature": 0}}).json()
    assert g["text"] in choices


@pytest.mark.parametrize("extra,param", [
    ({"guided_regex": "[a-z]+", "guided_choice": ["a"]}, "guided_choice"),
    ({"regex": "[a-z]+", "structured_outputs": {"json": SCHEMA}}, "structured_outputs.json"),
    ({"structured_outputs": {"structural_tag": "{}"}}, "structured_outputs.structural_tag"),
    ({"guided_grammar": 'root ::= "a"'}, "guided_grammar"),
    ({"guided_choice": []}, "choices"),
    ({"guided_choice": ["ok"], "response_format": {"type": "json_object"}}, "response_format"),
    ({"stop_regex": "(unclosed"}, "stop_regex"),
    ({"stop_regex": "a*"}, "stop_regex"),
])
def test_conflicts_and_bad_specs_are_400s_naming_the_field(client, model_name, extra, param):
    with pytest.raises(openai.BadRequestError) as e:
        _chat(client, model_name, **extra)
    assert e.value.body["param"] == param, e.value.body


def _stop_regex_case(client, model_name):
    """A pattern that matches the middle of this prompt's greedy output, and where."""
    plain = client.completions.create(model=model_name, prompt="List some fruits:", max_tokens=40,
                                      temperature=0, extra_body={"ignore_eos": True}).choices[0].text
    words = [w for w in re.findall(r"[A-Za-z]{4,}", plain)]
    assert len(words) >= 3, plain
    target = words[2]
    pattern = re.escape(target[:3]) + "[a-z]*"
    m = re.search(pattern, plain)
    return plain, pattern, m


def test_stop_regex_stops_at_the_first_match_and_trims_it(client, http, model_name):
    plain, pattern, m = _stop_regex_case(client, model_name)
    r = client.completions.create(model=model_name, prompt="List some fruits:", max_tokens=40,
                                  temperature=0, extra_body={"ignore_eos": True, "stop_regex": pattern})
    assert r.choices[0].text == plain[: m.start()]
    assert r.choices[0].finish_reason == "stop"
    assert re.fullmatch(pattern, r.choices[0].model_extra["matched_stop"])
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=model_name, prompt="List some fruits:", max_tokens=40, temperature=0, stream=True,
        extra_body={"ignore_eos": True, "stop_regex": [pattern]}) if c.choices)
    assert streamed == plain[: m.start()]  # nothing of the match was streamed
    g = http.post("/generate", json={"text": "List some fruits:", "sampling_params": {
        "max_new_tokens": 40, "temperature": 0, "ignore_eos": True, "stop_regex": pattern,
        "no_stop_trim": True}}).json()
    assert g["text"].startswith(plain[: m.start()]) and re.match(pattern, g["text"][m.start():])


def test_continuous_usage_stats_puts_usage_in_every_chunk(client, model_name):
    chunks = list(client.chat.completions.create(
        model=model_name, messages=CHAT, max_tokens=8, temperature=0, stream=True,
        extra_body={"ignore_eos": True},
        stream_options={"include_usage": True, "continuous_usage_stats": True}))
    assert len(chunks) >= 3 and all(c.usage is not None for c in chunks)
    completion = [c.usage.completion_tokens for c in chunks]
    assert completion == sorted(completion) and completion[-1] == 8 and len(set(completion)) > 2
    assert len({c.usage.prompt_tokens for c in chunks}) == 1
    assert all(c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens for c in chunks)
    plain = list(client.completions.create(model=model_name, prompt="Hi", max_tokens=4, stream=True,
                                           stream_options={"include_usage": True}))
    assert [c.usage is not None for c in plain] == [False] * (len(plain) - 1) + [True]
    cont = list(client.completions.create(
        model=model_name, prompt="Hi", max_tokens=4, stream=True, extra_body={"ignore_eos": True},
        stream_options={"include_usage": True, "continuous_usage_stats": True}))
    assert all(c.usage is not None for c in cont) and cont[-1].usage.completion_tokens == 4


def test_no_leaks_after_compat_requests(http):
    assert_no_leaked_pages(http)
