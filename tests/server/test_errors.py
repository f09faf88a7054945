"""Every error path: status code and OpenAI-shaped body; client disconnects abort."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.server.conftest import assert_no_leaked_pages, scrape, wait_idle

CHAT = [{"role": "user", "content": "hi"}]


def _error(r: httpx.Response, status: int, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    # OpenAI's four fields; a refused schema keyword adds its keyword and JSON pointer.
    assert {"message", "type", "param", "code"} <= set(err) <= {"message", "type", "param", "code", "keyword", "pointer"}
    if param is not None:
        assert err["param"] == param and param.split(".")[0] in err["message"], err
    return err


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": "x", "temperature": -1}, "temperature"),
    ("/v1/completions", {"prompt": "x", "top_p": 0}, "top_p"),
    ("/v1/completions", {"prompt": "x", "max_tokens": -2}, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": "many"}, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "n": 0}, "n"),
    ("/v1/completions", {"prompt": "x", "logprobs": 50}, "logprobs"),
    ("/v1/completions", {"prompt": "x", "stop": [""]}, "stop"),
    ("/v1/completions", {"prompt": []}, "prompt"),
    ("/v1/completions", {}, "prompt"),
    ("/v1/completions", {"prompt": "x", "extra_body_is_ignored": 1, "top_k": 0}, "top_k"),
    ("/v1/completions", {"prompt": "x", "regex": "(unclosed"}, "regex"),
    ("/v1/completions", {"prompt": "x", "echo": True, "logprobs": 1, "stream": True}, "echo"),
    ("/v1/completions", {"prompt": "x", "n": 3, "best_of": 2}, "best_of"),
    ("/v1/completions", {"prompt": "x", "best_of": 3, "stream": True}, "best_of"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"12": 300}}, "logit_bias"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"999999999": 1}}, "logit_bias"),
    ("/v1/chat/completions", {"messages": []}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
    ("/v1/chat/completions", {"messages": CHAT, "top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "presence_penalty": 9}, "presence_penalty"),
    ("/v1/chat/completions", {"messages": CHAT, "response_format": {"type": "json_schema"}},
     "response_format.json_schema.schema"),
    ("/v1/chat/completions", {"messages": CHAT, "response_format": {"type": "xml"}},
     "response_format.type"),
    ("/v1/chat/completions", {"messages": CHAT, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "string", "not": {"format": "date"}}}}}, "json_schema"),
    ("/generate", {"sampling_params": {"max_new_tokens": 1}}, "text"),
    ("/generate", {"text": "x", "sampling_params": {"bogus": 1}}, "sampling_params"),
])
def test_400_names_the_field(http, path, body, param):
    err = _error(http.post(path, json=body), 400, param)
    assert err["type"] == "invalid_request_error"


def test_unsupported_schema_keyword_is_named(http):
    schema = {"type": "string", "not": {"format": "date"}}
    r = http.post("/v1/chat/completions", json={"messages": CHAT, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert "not" in _error(r, 400)["message"]


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": CHAT, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "string", "not": {"format": "date"}}}}}}}),
    ("/generate", {"text": "x", "sampling_params": {"json_schema": {
        "type": "object", "properties": {"a": {"type": "string", "not": {"format": "date"}}}}}}),
])
def test_a_refused_schema_keyword_reaches_the_client_as_fields(http, path, body):
    """Compiled in the server's worker processes: keyword and pointer survive the pool too."""
    err = _error(http.post(path, json=body), 400, "json_schema")
    assert (err["keyword"], err["pointer"]) == ("not", "/properties/a/not"), err


def test_a_budget_below_the_constraint_minimum_is_a_400_with_the_minimum(http):
    """{"s":""} takes 4 SmolLM2 tokens: 3 is refused on both APIs, naming the field."""
    schema = {"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]}
    r = http.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 3, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert "at least 4" in _error(r, 400, "max_tokens")["message"]
    r = http.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 3, "json_schema": schema}})
    assert "at least 4" in _error(r, 400, "max_new_tokens")["message"]
    r = http.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 4, "json_schema": schema}})
    assert r.status_code == 200 and r.json()["text"].startswith('{"s":"'), r.text


def test_invalid_json_body(http):
    r = http.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    _error(r, 400)


def test_404_unknown_model_and_route(http):
    err = _error(http.post("/v1/completions", json={"model": "gpt-9", "prompt": "x"}), 404, "model")
    assert err["code"] == "model_not_found"
    _error(http.post("/v1/chat/completions", json={"model": "gpt-9", "messages": CHAT}), 404, "model")
    _error(http.get("/v1/models/gpt-9"), 404, "model")
    _error(http.get("/no/such/route"), 404)


def test_413_prompt_longer_than_context(http, engine):
    long_prompt = "hello " * (engine.context_length + 10)
    err = _error(http.post("/v1/completions", json={"prompt": long_prompt, "max_tokens": 1}), 413, "prompt")
    assert err["code"] == "context_length_exceeded"
    _error(http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": long_prompt}]}), 413)
    _error(http.post("/generate", json={"text": long_prompt}), 413)


def test_401_with_api_key(server, http):
    state = server.app.state
    state.api_keys = ("sekret",)
    try:
        err = _error(http.post("/v1/completions", json={"prompt": "x", "max_tokens": 1}), 401)
        assert err["code"] == "invalid_api_key"
        _error(http.get("/v1/models", headers={"Authorization": "Bearer wrong"}), 401)
        _error(http.post("/generate", json={"text": "x"}), 401)
        assert http.get("/health").status_code == 200  # probes stay open
        ok = http.get("/v1/models", headers={"Authorization": "Bearer sekret"})
        assert ok.status_code == 200
    finally:
        state.api_keys = ()


def test_503_while_draining(server, http):
    state = server.app.state
    state.draining = True
    try:
        r = http.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})
        _error(r, 503)
        assert r.headers["retry-after"]
        assert http.get("/health").status_code == 503
        assert http.get("/v1/models").status_code == 200  # non-admitting routes still answer
    finally:
        state.draining = False


def test_stream_disconnect_aborts_and_frees_pages(http, server):
    before = scrape(http)
    body = {"prompt": "Tell me a long story.", "max_tokens": 1000, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=server.base_url, timeout=60) as c, c.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        for _ in range(6):
            next(lines)
    start = time.monotonic()
    wait_idle(http, timeout=15)
    assert time.monotonic() - start < 15
    after = scrape(http)
    assert after["sglang_lite:num_aborted_requests_total"] == before["sglang_lite:num_aborted_requests_total"] + 1
    assert_no_leaked_pages(http)


def test_non_stream_disconnect_aborts(http, server):
    before = scrape(http)["sglang_lite:num_aborted_requests_total"]
    body = {"prompt": "Tell me a long story.", "max_tokens": 1000, "ignore_eos": True}
    with httpx.Client(base_url=server.base_url, timeout=1.5) as c, pytest.raises(httpx.ReadTimeout):
        c.post("/v1/completions", json=body)
    wait_idle(http, timeout=15)
    assert scrape(http)["sglang_lite:num_aborted_requests_total"] == before + 1
    assert_no_leaked_pages(http)
