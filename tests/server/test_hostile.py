"""Hostile input against a live server: every bad value is a 400 naming its field, and no
request can end another's."""

from __future__ import annotations

import json
import os
import random
import socket
import string
import threading
import time

import httpx
import pytest

from sglang_lite.server import create_app
from sglang_lite.server.limits import BodyLimits
from tests.server.conftest import LiveServer, assert_no_leaked_pages

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


# ---- constraint compiles ---------------------------------------------------------------------
def _words(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    return ["".join(rnd.choices(string.ascii_lowercase, k=10)) for _ in range(n)]


def _schema_body(schema: dict) -> dict:
    return {"messages": CHAT, "max_tokens": 8, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


@pytest.mark.parametrize("path,body,limit", [
    ("/v1/chat/completions", _schema_body({"enum": [str(i) for i in range(10_000)]}), "max_enum_values"),
    ("/v1/chat/completions", _schema_body(json.loads('{"type": "array", "items": ' * 70 + "{}" + "}" * 70)),
     "max_schema_depth"),
    ("/v1/chat/completions", _schema_body({"type": "string", "pattern": "[a-z]{5000}"}), "max_repetition"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 8, "regex": "[a-z0-8]{5000}"}, "max_repetition"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 8, "regex": "a" * 10_000}, "max_regex_chars"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 8,
                         "ebnf": "start: " + " | ".join(f'"w{i}"' for i in range(5000))}, "max_grammar_alternatives"),
    ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 8, "json_schema": json.dumps(
        {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(60_000)}})}},
     "max_spec_bytes"),
])
def test_constraint_over_a_size_limit_is_refused_at_once(http, path, body, limit):
    t0 = time.monotonic()
    r = http.post(path, json=body)
    elapsed = time.monotonic() - t0
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] in ("json_schema", "regex", "ebnf") and err["code"] == "constraint_too_large", err
    assert limit in err["message"], err
    assert elapsed < 2.0, elapsed


def _timed_chat(http, content: str) -> float:
    t0 = time.monotonic()
    r = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": content}],
                                                "max_tokens": 8, "min_tokens": 8, "temperature": 0})
    assert r.status_code == 200, r.text
    return time.monotonic() - t0


def test_heavy_compiles_do_not_stall_a_normal_request(server, http):
    """Two schemas that take seconds to compile (enums of 1,024 unrelated words, within the
    limits) run beside a normal request: it takes about what it takes on an idle server
    (in-process compiles held it for as long as the compiles ran)."""
    _timed_chat(http, "warm up")
    idle = min(_timed_chat(http, f"Say hello {i}") for i in range(3))
    results: dict[int, httpx.Response] = {}

    def heavy(i: int) -> None:
        with httpx.Client(base_url=server.base_url, timeout=120) as c:
            results[i] = c.post("/v1/chat/completions", json=_schema_body({"enum": _words(1024, seed=i)}))

    threads = [threading.Thread(target=heavy, args=(i,)) for i in range(2)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(0.3)  # both compiles under way
    loaded = [_timed_chat(http, f"Say hello {i}") for i in range(3)]
    for t in threads:
        t.join(120)
    heavy_s = time.monotonic() - t0
    print(f"normal request: idle {idle:.3f} s, beside two heavy compiles {max(loaded):.3f} s "
          f"(the compiles took {heavy_s:.2f} s)")
    for r in results.values():  # compiled, or stopped at the deadline on a very busy machine
        assert r.status_code == 200 or r.json()["error"]["code"] == "constraint_timeout", r.text
    assert max(loaded) < 3 * idle + 1.0, (idle, loaded, heavy_s)


def test_compile_past_the_deadline_is_stopped(server, http):
    pool = server.app.state.engine.scheduler.grammar_backend.pool
    pool.wait_ready()
    pids = set(pool.pids)
    before = _refusals(http, "timeout")
    saved, pool.timeout_s = pool.timeout_s, 0.5  # the workers' own budget stays 10 s: only the kill stops it
    try:
        ebnf = "start: " + " | ".join(f'"{w}"' for w in _words(2000, seed=7))
        t0 = time.monotonic()
        r = http.post("/v1/completions", json={"prompt": "x", "max_tokens": 8, "ebnf": ebnf})
        elapsed = time.monotonic() - t0
    finally:
        pool.timeout_s = saved
    err = _error(r, 400, "ebnf")
    assert err["code"] == "constraint_timeout", err
    assert elapsed < 3.0, elapsed
    assert pool.stats.timeouts >= 1
    assert any(not _alive(pid) for pid in pids)  # the compiling process was ended
    assert _refusals(http, "timeout") == before + 1
    # the replacement compiles the next request
    r = http.post("/v1/completions", json={"prompt": "x", "max_tokens": 8, "regex": "[ab]{3}"})
    assert r.status_code == 200, r.text
    assert len(r.json()["choices"][0]["text"]) == 3


def _refusals(http, reason: str) -> float:
    """sglang_lite:grammar_compile_refusals_total for one reason label."""
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("sglang_lite:grammar_compile_refusals_total{") and f'reason="{reason}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_client_leaving_stops_its_compile(server, http):
    pool = server.app.state.engine.scheduler.grammar_backend.pool
    pool.wait_ready()
    cancelled = pool.stats.cancelled
    ebnf = "start: " + " | ".join(f'"{w}"' for w in _words(2000, seed=11))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.base_url + "/v1/completions", json={"prompt": "x", "max_tokens": 8, "ebnf": ebnf},
                   timeout=0.7)
    deadline = time.monotonic() + 5
    while pool.stats.cancelled == cancelled and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.stats.cancelled == cancelled + 1


# ---- request size and shape -------------------------------------------------------------------
def _raw_request(port: int, head: bytes, body_part: bytes) -> bytes:
    """Send headers and only part of the body; return what the server answers meanwhile."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head + body_part)
        data = b""
        while b"\r\n\r\n" not in data or len(data) < 200:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            if b"}}" in data:
                break
        return data


def test_body_over_the_limit_is_413_before_it_is_read(server, engine):
    limit = 64 * 1024
    live = LiveServer(create_app(engine, limits=BodyLimits(max_request_bytes=limit))).start()
    try:
        declared = 50 * 1024 * 1024
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {declared}\r\n\r\n").encode()
        t0 = time.monotonic()
        reply = _raw_request(live.port, head, b'{"prompt": "' + b"x" * 1000)
        assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
        assert time.monotonic() - t0 < 2
        assert b'"param":"body"' in reply and b"request_too_large" in reply
        # chunked (no Content-Length): refused once the limit is passed
        with httpx.Client(base_url=live.base_url, timeout=30) as c:
            def chunks():
                yield b'{"prompt": "'
                for _ in range(40):
                    yield b"x" * 4096
                yield b'"}'
            r = c.post("/v1/completions", content=chunks(), headers={"Content-Type": "application/json"})
            assert r.status_code == 413, r.text
            small = c.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2})
            assert small.status_code == 200, small.text
    finally:
        live.stop()


def test_prompt_longer_than_the_context_can_hold_is_refused_before_tokenizing(http, engine):
    text = "ab " * (engine.max_prompt_chars // 3 + 10)
    t0 = time.monotonic()
    r = http.post("/v1/completions", json={"prompt": text, "max_tokens": 1})
    elapsed = time.monotonic() - t0
    _error(r, 413, "prompt")
    chat = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": text}]})
    _error(chat, 413, "messages")
    print(f"{len(text)} characters refused in {elapsed:.3f} s")
    assert elapsed < 2.0


@pytest.mark.parametrize("raw,param", [
    ('{"prompt": "x\\ud800y", "max_tokens": 2}', "prompt"),
    ('{"messages": [{"role": "user", "content": "\\udfff"}], "max_tokens": 2}', "messages.0.content"),
    ('{"text": ["ok", "a\\ud83d"], "sampling_params": {"max_new_tokens": 2}}', "text.1"),
    ('{"prompt": "x", "user": ' + "[" * 5000 + "]" * 5000 + "}", "body"),
    ('{"prompt": "x", "stop": ' + "[" * 150 + "]" * 150 + "}", "stop"),
])
def test_lone_surrogates_and_deep_nesting_are_400(http, raw, param):
    path = "/generate" if '"text"' in raw else "/v1/chat/completions" if "messages" in raw else "/v1/completions"
    r = http.post(path, content=raw.encode(), headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"].startswith(param) and err["code"], err
    assert http.get("/health").status_code == 200
