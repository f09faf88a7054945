"""Client rids (SGLang's ``rid``) and /abort_request: a named request, waiting or running,
ends when aborted, through /generate and through the openai client."""

from __future__ import annotations

import threading
import time
import uuid

import httpx
import openai
import pytest

from tests.server.conftest import assert_no_leaked_pages, server_info

LONG = {"max_new_tokens": 400, "temperature": 0, "ignore_eos": True}


def _wait_running(http, at_least: int = 1, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while server_info(http)["num_running_reqs"] < at_least:
        assert time.monotonic() < deadline, "request never started"
        time.sleep(0.02)


def _in_thread(fn) -> tuple[threading.Thread, dict]:
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(result=fn()))
    t.start()
    return t, box


def test_rid_is_the_request_id(http):
    rid = f"mine-{uuid.uuid4().hex}"
    r = http.post("/generate", json={"text": "Hello", "rid": rid,
                                     "sampling_params": {"max_new_tokens": 2}}).json()
    assert r["meta_info"]["id"] == rid
    batch = http.post("/generate", json={"text": ["Hello", "Hi"], "rid": [rid + "a", rid + "b"],
                                         "sampling_params": {"max_new_tokens": 2}}).json()
    assert [b["meta_info"]["id"] for b in batch] == [rid + "a", rid + "b"]


def test_abort_request_ends_a_running_generate(server, http):
    rid = f"abort-{uuid.uuid4().hex}"
    t, box = _in_thread(lambda: httpx.post(server.base_url + "/generate", timeout=120, json={
        "text": "Tell me a long story.", "rid": rid, "sampling_params": LONG}).json())
    _wait_running(http)
    dup = http.post("/generate", json={"text": "x", "rid": rid, "sampling_params": {"max_new_tokens": 1}})
    assert dup.status_code == 400 and dup.json()["error"]["param"] == "rid"
    assert http.post("/abort_request", json={"rid": rid}).json()["success"] is True
    t.join(60)
    out = box["result"]
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert out["meta_info"]["id"] == rid and out["meta_info"]["completion_tokens"] < 400
    # the rid is free again once its request ended
    again = http.post("/generate", json={"text": "x", "rid": rid, "sampling_params": {"max_new_tokens": 1}})
    assert again.status_code == 200
    assert_no_leaked_pages(http)


def test_abort_request_ends_an_openai_stream(client, http, model_name):
    rid = f"chat-{uuid.uuid4().hex}"
    stream = client.chat.completions.create(
        model=model_name, messages=[{"role": "user", "content": "Write an essay."}], max_tokens=400,
        temperature=0, stream=True, extra_body={"rid": rid, "ignore_eos": True})
    reasons, n = [], 0
    for chunk in stream:
        n += 1
        if n == 3:
            assert http.post("/abort_request", json={"rid": rid}).json()["success"] is True
        reasons += [c.finish_reason for c in chunk.choices if c.finish_reason]
    assert reasons == ["abort"] and n < 100
    assert_no_leaked_pages(http)


def test_abort_of_a_waiting_request_and_abort_all(server, http, engine):
    cap = engine.config.max_running_requests
    rids = [f"w{i}-{uuid.uuid4().hex}" for i in range(cap + 2)]
    threads = [_in_thread(lambda r=r: httpx.post(server.base_url + "/generate", timeout=120, json={
        "text": "Count slowly:", "rid": r, "sampling_params": LONG}).json()) for r in rids]
    threads.insert(0, _in_thread(lambda: httpx.post(server.base_url + "/generate", timeout=120, json={
        "text": "No rid here:", "sampling_params": LONG}).json()))  # abort_all ends it too
    _wait_running(http)
    deadline = time.monotonic() + 60
    while server_info(http)["num_queue_reqs"] < 1:  # more than fit: some wait
        assert time.monotonic() < deadline
        time.sleep(0.02)
    waiting = rids[-1]  # the last submitted; abort_all ends the rest
    assert http.post("/abort_request", json={"rid": waiting}).json()["success"] is True
    threads[-1][0].join(60)
    assert threads[-1][1]["result"]["meta_info"]["completion_tokens"] < 400
    r = http.post("/abort_request", json={"abort_all": True}).json()
    assert r["success"] is True and r["aborted"] >= 1
    for t, _ in threads:
        t.join(60)
    results = [box["result"] for _, box in threads]
    assert all(x["meta_info"]["finish_reason"]["type"] == "abort" for x in results)
    assert_no_leaked_pages(http)


@pytest.mark.parametrize("body,param", [
    ({}, "rid"),
    ({"rid": 5}, "rid"),
])
def test_abort_request_bad_input(http, body, param):
    r = http.post("/abort_request", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_unknown_rid_and_bad_rids(http, client, model_name):
    assert http.post("/abort_request", json={"rid": "no-such"}).json()["success"] is False
    r = http.post("/generate", json={"text": ["a", "b"], "rid": "one", "sampling_params": {"max_new_tokens": 1}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "rid"
    r = http.post("/generate", json={"text": ["a", "b"], "rid": ["same", "same"],
                                     "sampling_params": {"max_new_tokens": 1}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "rid"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model_name, prompt=["a", "b"], max_tokens=1, extra_body={"rid": "x"})
