"""Hostile input against a live server: every bad value is a 400 naming its field, and no
request can end another's."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from tests.server.conftest import assert_no_leaked_pages

CHAT = [{"role": "user", "content": "x"}]


def _error(r: httpx.Response, status: int, param: str) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    assert err["code"], err
    return err


@pytest.mark.parametrize("path,body,param", [
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, "seed": 2**64}, "seed"),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, "seed": 2**63}, "seed"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 4, "top_k": 2**63}, "top_k"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 4, "top_k": 10**6}, "top_k"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 10**9}, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 4, "min_tokens": 10**9}, "min_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 4, "n": True}, "n"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 4, "stop_token_ids": [10**6]}, "stop_token_ids"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 4, "stop_token_ids": [2**64]}, "stop_token_ids"),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, "temperature": True}, "temperature"),
    ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 4, "seed": 2**64}}, "seed"),
    ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 10**9}}, "max_new_tokens"),
    ("/generate", {"text": 5}, "text"),
    ("/generate", {"text": "x", "rid": {}}, "rid"),
])
def test_out_of_range_value_is_400(http, path, body, param):
    _error(http.post(path, json=body), 400, param)


@pytest.mark.parametrize("raw,param", [
    ('{"prompt": "x", "max_tokens": 4, "temperature": Infinity}', "temperature"),
    ('{"prompt": "x", "max_tokens": 4, "top_p": NaN}', "top_p"),
    ('{"prompt": "x", "max_tokens": 4, "frequency_penalty": -Infinity}', "frequency_penalty"),
])
def test_non_finite_number_is_400(http, raw, param):
    r = http.post("/v1/completions", content=raw, headers={"Content-Type": "application/json"})
    _error(r, 400, param)


@pytest.mark.parametrize("raw", ['[null, null]', '{"text": "x",', '"x"'])
def test_generate_bad_body_is_400(http, raw):
    r = http.post("/generate", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "body" and err["code"], err


def test_malformed_json_names_the_body_not_an_offset(http):
    r = http.post("/v1/completions", content='{"prompt": "x",,}', headers={"Content-Type": "application/json"})
    err = _error(r, 400, "body")
    assert err["code"] == "invalid_json"


def _stream_chat(base_url: str, results: list, started: threading.Event, i: int) -> None:
    body = {"messages": [{"role": "user", "content": f"Count from {i} upward."}], "max_tokens": 24,
            "min_tokens": 24, "stream": True, "temperature": 0}
    reasons, text = [], ""
    with httpx.Client(base_url=base_url, timeout=120) as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            for ch in ev.get("choices", []):
                text += ch["delta"].get("content") or ""
                if ch.get("finish_reason"):
                    reasons.append(ch["finish_reason"])
            started.set()
    results[i] = (reasons, text)


def test_overflowing_seed_does_not_end_streams_in_flight(server, http):
    n = 4
    results: list = [None] * n
    started = [threading.Event() for _ in range(n)]
    threads = [threading.Thread(target=_stream_chat, args=(server.base_url, results, started[i], i))
               for i in range(n)]
    for t in threads:
        t.start()
    for e in started:
        assert e.wait(60)
    for bad in ({"seed": 2**64}, {"top_k": 2**63}):
        r = http.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 4, **bad})
        assert r.status_code == 400, r.text
    for t in threads:
        t.join(120)
    for reasons, _text in results:
        assert reasons == ["length"], results
    assert_no_leaked_pages(http)
