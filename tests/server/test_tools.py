"""Tool calling through the official openai client: named and required calls are constrained
by the tools' JSON Schemas, "auto" replies are parsed, history with calls renders, and every
bad tools / tool_choice field is a 400 naming it."""

from __future__ import annotations

import json

import pytest

from sglang_lite.server.tools import parse_tool_calls, plan_tools
from tests.json_validation import validate_with_formats
from tests.server.conftest import assert_no_leaked_pages

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "timezone": {"type": "string", "maxLength": 30}}, "required": ["timezone"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}


def _check_calls(calls, names=None):
    assert calls
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        assert names is None or call.function.name in names
        validate_with_formats(json.loads(call.function.arguments), SCHEMAS[call.function.name])


@pytest.mark.parametrize("temperature", [0, 0.9])
def test_named_tool_choice_is_a_valid_call(client, model_name, temperature):
    r = client.chat.completions.create(
        model=model_name, messages=ASK, tools=[WEATHER, TIME], temperature=temperature, seed=3,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=60)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert [c.function.name for c in choice.message.tool_calls] == ["get_weather"]
    _check_calls(choice.message.tool_calls)


def test_required_calls_match_one_tool_each(client, model_name):
    for parallel in (False, True):
        r = client.chat.completions.create(
            model=model_name, messages=ASK, tools=[WEATHER, TIME], tool_choice="required",
            parallel_tool_calls=parallel, temperature=0.8, seed=11, max_tokens=120)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls"
        _check_calls(choice.message.tool_calls, {"get_weather", "get_time"})
        if not parallel:
            assert len(choice.message.tool_calls) == 1


def test_streamed_named_call_equals_the_whole_response(client, model_name, http):
    kw = dict(model=model_name, messages=ASK, tools=[WEATHER], temperature=0, max_tokens=60,
              tool_choice={"type": "function", "function": {"name": "get_weather"}})
    whole = client.chat.completions.create(**kw).choices[0].message.tool_calls[0]
    chunks = list(client.chat.completions.create(stream=True, **kw))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    # the arguments stream as they are generated; the first delta names the call
    assert len(deltas) > 3 and all(d.index == 0 for d in deltas)
    assert deltas[0].function.name == "get_weather" and deltas[0].id.startswith("call_")
    assert all(d.function.name is None and d.id is None for d in deltas[1:])
    assert "".join(d.function.arguments for d in deltas) == whole.function.arguments
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert not any(c.choices[0].delta.content for c in chunks if c.choices)
    assert_no_leaked_pages(http)


def test_auto_shows_the_tools_and_returns_content_or_valid_calls(client, model_name):
    # 16 tokens: enough to compare replies (greedy: a longer reply only extends the same text)
    plain = client.chat.completions.create(model=model_name, messages=ASK, temperature=0, max_tokens=16)
    kw = dict(model=model_name, messages=ASK, tools=[WEATHER], temperature=0, max_tokens=16)
    r = client.chat.completions.create(**kw)
    assert r.usage.prompt_tokens > plain.usage.prompt_tokens + 30  # the tool list is in the prompt
    msg = r.choices[0].message
    if msg.tool_calls:
        assert r.choices[0].finish_reason == "tool_calls"
        _check_calls(msg.tool_calls, {"get_weather"})
    else:
        assert msg.content
    chunks = list(client.chat.completions.create(stream=True, **kw))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert (streamed or None) == msg.content and bool(calls) == bool(msg.tool_calls)
    none = client.chat.completions.create(tool_choice="none", **kw)
    assert none.usage.prompt_tokens == plain.usage.prompt_tokens
    assert none.choices[0].message.content == plain.choices[0].message.content


def test_history_with_calls_and_results_renders(client, model_name):
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21, "sky": "clear"}'},
    ]
    r = client.chat.completions.create(model=model_name, messages=history, tools=[WEATHER], temperature=0,
                                       max_tokens=30)
    short = client.chat.completions.create(model=model_name, messages=ASK, tools=[WEATHER], temperature=0,
                                           max_tokens=30)
    assert r.usage.prompt_tokens > short.usage.prompt_tokens + 20  # the call and its result are in the prompt
    assert r.choices[0].message.content or r.choices[0].message.tool_calls


@pytest.mark.parametrize("extra, param", [
    ({"tools": [{"type": "retrieval"}]}, "tools.0.type"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools.0.function.name"),
    ({"tools": [WEATHER, WEATHER]}, "tools.1.function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]},
     "tools.0.function.parameters"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"s": {"type": "string", "not": {"format": "date"}}}}}}],
      "tool_choice": "required"}, "tools"),
])
def test_bad_tools_are_400_naming_the_field(http, extra, param):
    r = http.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 4, **extra})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and param.split(".")[0] in err["message"]


def test_parse_tool_calls():
    names = {"get_weather", "get_time"}
    hermes = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>\n' \
             '<tool_call>{"name": "get_time", "arguments": {"timezone": "CET"}}</tool_call>'
    calls = parse_tool_calls(hermes, names)
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Oslo"}
    bare = parse_tool_calls(' [{"name": "get_time", "parameters": {"timezone": "UTC"}}]', names)
    assert json.loads(bare[0]["function"]["arguments"]) == {"timezone": "UTC"}
    assert parse_tool_calls('{"name": "get_time", "arguments": "{\\"timezone\\": \\"UTC\\"}"}', names)
    for text in ("The weather is fine.", '{"name": "rm_rf", "arguments": {}}', "<tool_call>{broken",
                 '{"name": "get_time", "arguments": 3}', '{"answer": 42}'):
        assert parse_tool_calls(text, names) is None, text


def test_plan_may_be_calls_holds_only_possible_call_starts():
    plan = plan_tools([WEATHER], None, None)
    assert plan.mode == "auto"
    for text in ("", "  ", "<tool", "<tool_call>{\"na", "{", " ["):
        assert plan.may_be_calls(text), text
    for text in ("Hello", "<b>", "The"):
        assert not plan.may_be_calls(text), text
    assert plan_tools(None, None, None).mode == "none"
    assert plan_tools([WEATHER], "required", False).schema()["maxItems"] == 1


def test_streamed_required_calls_arrive_whole(client, model_name):
    kw = dict(model=model_name, messages=ASK, tools=[WEATHER, TIME], tool_choice="required", temperature=0,
              max_tokens=120)
    whole = client.chat.completions.create(**kw).choices[0].message.tool_calls
    chunks = list(client.chat.completions.create(stream=True, **kw))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(d.function.name, d.function.arguments) for d in deltas] == \
        [(c.function.name, c.function.arguments) for c in whole]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
