"""Tool-call parsers per family and the reasoning parser: as accept/reject sets on text, and
end to end through a live server (the embedded model writes a family's format because a
regex makes it; the parsing under test is the server's)."""

from __future__ import annotations

import json

import pytest

from sglang_lite.server import create_app
from sglang_lite.server.parsers import REASONING_PARSERS, select_tool_call_parser
from tests.server.conftest import LiveServer

NAMES = {"get_weather", "add"}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def _parsed(parser: str, text: str):
    found = select_tool_call_parser(parser, None).parse(text, NAMES)
    if found is None:
        return None
    content, calls = found
    return content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("parser, text, expected", [
    ("hermes", '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>', (None, [("add", {"a": 1})])),
    ("qwen", 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
             '<tool_call>{"name": "add", "arguments": {}}</tool_call>',
     ("Let me check.", [("get_weather", {"city": "Oslo"}), ("add", {})])),
    ("llama3", '<|python_tag|>{"name": "add", "parameters": {"a": 2}}', (None, [("add", {"a": 2})])),
    ("llama3", '{"name": "add", "parameters": {"a": 2}}; {"name": "get_weather", "parameters": {"city": "Rome"}}',
     (None, [("add", {"a": 2}), ("get_weather", {"city": "Rome"})])),
    ("mistral", '[TOOL_CALLS][{"name": "add", "arguments": {"a": 3}}]', (None, [("add", {"a": 3})])),
    ("mistral", '[{"name": "add", "arguments": {"a": 3}}]', (None, [("add", {"a": 3})])),  # marker skipped
    ("mistral", '[TOOL_CALLS]add[ARGS]{"a": 4}[TOOL_CALLS]get_weather[ARGS]{"city": "Bern"}',
     (None, [("add", {"a": 4}), ("get_weather", {"city": "Bern"})])),
])
def test_family_formats_parse_into_calls(parser, text, expected):
    assert _parsed(parser, text) == expected


@pytest.mark.parametrize("parser, text", [
    ("hermes", "The weather is fine."),
    ("hermes", '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'),  # unknown tool
    ("hermes", '<tool_call>{"name": "add", "arguments": [1]}</tool_call>'),  # arguments not an object
    ("llama3", '{"name": "add", "parameters": {"a": 2}} and then some prose'),
    ("llama3", "Sure, here you go."),
    ("mistral", "[1, 2, 3]"),
    ("mistral", "[TOOL_CALLS]add[ARGS]not json"),
])
def test_text_that_is_not_calls_stays_content(parser, text):
    assert _parsed(parser, text) is None


def test_parser_chosen_from_the_chat_template():
    assert select_tool_call_parser(None, "{% for t in tools %}<tool_call>{% endfor %}").name == "hermes"
    assert select_tool_call_parser(None, "<|python_tag|>{{ x }}").name == "llama3"
    assert select_tool_call_parser(None, "[AVAILABLE_TOOLS]{{ tools }}").name == "mistral"
    assert select_tool_call_parser(None, "{{ messages }}") is None
    with pytest.raises(ValueError, match="tool_call_parser"):
        select_tool_call_parser("nope", None)


@pytest.mark.parametrize("name, text, expected", [
    ("qwen3", "<think>\nStep 1.\n</think>\n\nParis.", ("Step 1.", "Paris.")),
    ("qwen3", "Paris.", (None, "Paris.")),  # thinking off: no block
    ("qwen3", "<think>cut short", ("cut short", "")),
    ("deepseek-r1", "Step 1.</think>Paris.", ("Step 1.", "Paris.")),  # the template opened the block
    ("deepseek-r1", "<think>Step 1.</think>Paris.", ("Step 1.", "Paris.")),
])
def test_reasoning_split(name, text, expected):
    assert REASONING_PARSERS[name].split(text) == expected


@pytest.mark.parametrize("name, text", [("qwen3", "<think>\nab</think>\n\nthe answer </ok>"),
                                        ("deepseek-r1", "a < b </thi</think>yes"), ("qwen3", "plain <think> text")])
def test_reasoning_stream_equals_the_whole_split_for_any_chunking(name, text):
    parser = REASONING_PARSERS[name]
    whole_r, whole_c = parser.split(text)
    for size in (1, 2, 3, 7):
        stream = parser.stream()
        pieces = [text[i : i + size] for i in range(0, len(text), size)]
        r = c = ""
        for k, piece in enumerate(pieces):
            dr, dc = stream.feed(piece, final=k == len(pieces) - 1)
            r, c = r + dr, c + dc
        assert r.strip() == (whole_r or "") and c == whole_c, size


@pytest.fixture(scope="module")
def parsing_server(engine):
    live = LiveServer(create_app(engine, tool_call_parser="hermes", reasoning_parser="qwen3")).start()
    yield live
    live.stop()


@pytest.fixture()
def parsing_client(parsing_server):
    from openai import OpenAI

    return OpenAI(base_url=parsing_server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


THINK_THEN_CALL = (r'<think>[a-z]{2,12}</think>\n<tool_call>\{"name": "get_weather", "arguments": '
                   r'\{"city": "(Paris|Oslo)"\}\}</tool_call>')


def test_reasoning_and_a_hermes_call_in_one_response(parsing_client, model_name):
    r = parsing_client.chat.completions.create(
        model=model_name, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER],
        max_tokens=60, temperature=0, extra_body={"regex": THINK_THEN_CALL})
    msg = r.choices[0].message
    text_reasoning = msg.model_extra["reasoning_content"]
    assert text_reasoning and "<think>" not in text_reasoning and "</think>" not in text_reasoning
    assert r.choices[0].finish_reason == "tool_calls"
    (call,) = msg.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] in ("Paris", "Oslo")


def test_streamed_reasoning_deltas_then_content(parsing_client, model_name):
    kw = dict(model=model_name, messages=[{"role": "user", "content": "Capital of France?"}], max_tokens=40,
              temperature=0, extra_body={"regex": r"<think>[a-z ]{3,20}</think>\n[A-Z][a-z]{2,10}\."})
    whole = parsing_client.chat.completions.create(**kw).choices[0].message
    reasoning = content = ""
    for chunk in parsing_client.chat.completions.create(**kw, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        assert not ((delta.model_extra or {}).get("reasoning_content") and content)  # reasoning comes first
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        content += delta.content or ""
    assert whole.model_extra["reasoning_content"] == reasoning.strip() and reasoning.strip()
    assert whole.content == content and "</think>" not in content and content.endswith(".")


def test_separate_reasoning_false_keeps_the_block_in_content(parsing_client, model_name):
    r = parsing_client.chat.completions.create(
        model=model_name, messages=[{"role": "user", "content": "Hi"}], max_tokens=30, temperature=0,
        extra_body={"regex": r"<think>[a-z]{2,6}</think>Hello\.", "separate_reasoning": False})
    assert r.choices[0].message.content.startswith("<think>")


@pytest.fixture(scope="module")
def r1_client(engine):
    from openai import OpenAI

    live = LiveServer(create_app(engine, reasoning_parser="deepseek-r1")).start()
    yield OpenAI(base_url=live.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)
    live.stop()


PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.mark.parametrize("max_tokens", [40, 80])
def test_response_format_applies_after_the_reasoning_block(r1_client, model_name, max_tokens):
    """DeepSeek-R1's template opens <think> in the prompt: the reply reasons freely, must close
    the block, and only then is held to the schema, within max_tokens."""
    import jsonschema

    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    kw = dict(model=model_name, messages=[{"role": "user", "content": "Invent a person."}], max_tokens=max_tokens,
              temperature=0, response_format=fmt)
    r = r1_client.chat.completions.create(**kw)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(msg.model_extra["reasoning_content"], str)
    jsonschema.validate(json.loads(msg.content), PERSON)
    raw = r1_client.chat.completions.create(**kw, extra_body={"separate_reasoning": False}).choices[0].message.content
    thought, _, answer = raw.partition("</think>")
    assert answer.strip() == msg.content and thought.strip() == msg.model_extra["reasoning_content"]


def test_cli_flags_reach_the_server_args():
    from sglang_lite.server.args import parse_args

    args = parse_args(["--model", "Qwen/Qwen3-0.6B", "--revision", "main", "--tool-call-parser", "mistral",
                       "--reasoning-parser", "qwen3"])
    assert (args.model, args.tool_call_parser, args.reasoning_parser) == ("Qwen/Qwen3-0.6B", "mistral", "qwen3")
    assert args.engine_options == {"revision": "main"}
    with pytest.raises(SystemExit):
        parse_args(["--reasoning-parser", "nope"])
