"""`sglang-lite serve --dp 2` and routers over its 2 real replicas of the embedded model on
loopback: one command starts both behind a router; prefix affinity shows in the replicas'
cached_tokens; sessions stay on one replica; the router's metrics add up; a replica killed
under load loses no request (not started: retried elsewhere; streaming: an error event, then
[DONE]); SIGTERM stops the router and every replica. In file order: the last two tests take
the module's replicas down."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
from openai import OpenAI

from sglang_lite.router.proxy import REPLICA_HEADER
from tests.router.conftest import metric_sum, router, router_metrics


def test_serve_dp_spreads_requests_over_its_replicas(dp):
    workers = httpx.get(dp.base_url + "/workers").json()
    assert workers["policy"] == "round_robin" and len(dp.urls) == 2
    assert all(w["healthy"] for w in workers["workers"])
    assert all(httpx.get(u + "/health").status_code == 200 for u in dp.urls)  # replicas answer directly
    landed = set()
    for i in range(2):
        r = _complete(dp.base_url, f"Hi {i}")
        assert r.json()["usage"]["completion_tokens"] == 2
        landed.add(r.headers[REPLICA_HEADER])
    assert landed == {u.removeprefix("http://") for u in dp.urls}


def _shared_prefix(topic: str, n: int = 30) -> str:
    return f"You answer questions about {topic}. " + " ".join(
        f"Note {i}: {topic} item {i} weighs {i * 7 % 13} units." for i in range(n))


def _complete(base: str, prompt: str, **extra) -> httpx.Response:
    body = {"prompt": prompt, "max_tokens": 2, "temperature": 0, **extra}
    r = httpx.post(base + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r


def test_prefix_affinity_lands_on_one_replica_and_hits_its_cache(dp):
    urls = dp.urls
    for url in urls:
        assert httpx.post(url + "/flush_cache").status_code == 200
    groups = {"apples": _shared_prefix("apples"), "ships": _shared_prefix("ships")}
    with router(urls, "cache_aware") as r:
        landed: dict[str, list[str]] = {g: [] for g in groups}
        cached: dict[str, list[int]] = {g: [] for g in groups}
        prompt_tokens = {}
        for i in range(3):
            for g, prefix in groups.items():  # interleaved: A B A B A B
                resp = _complete(r.base_url, f"{prefix} Question {i}: which item is heaviest?")
                landed[g].append(resp.headers[REPLICA_HEADER])
                usage = resp.json()["usage"]
                cached[g].append(usage["prompt_tokens_details"]["cached_tokens"])
                prompt_tokens[g] = usage["prompt_tokens"]
        samples = router_metrics(r.base_url)
    for g in groups:
        assert len(set(landed[g])) == 1, landed  # one replica per shared prefix
        assert cached[g][0] == 0
        # the shared prefix (all but the last two pages) is served from that replica's cache
        assert all(c >= prompt_tokens[g] - 32 for c in cached[g][1:]), (cached, prompt_tokens)
    assert landed["apples"][0] != landed["ships"][0]  # the second prefix went to the idle replica
    assert metric_sum(samples, "sglang_lite_router:routing_decisions_total", reason="cache_hit") == 4
    assert metric_sum(samples, "sglang_lite_router:routing_decisions_total", reason="cache_miss") == 2
    assert 0.6 < samples[("sglang_lite_router:cache_affinity_hit_rate", frozenset())] < 1.0


def test_session_pinned_and_metrics_add_up(dp):
    urls = dp.urls
    with router(urls, "round_robin") as r:
        client = OpenAI(base_url=r.base_url + "/v1", api_key="none", max_retries=0, timeout=120)
        model = client.models.list().data[0].id
        pinned = set()
        for i in range(3):  # round robin would alternate; the session keeps them together
            resp = client.chat.completions.with_raw_response.create(
                model=model, messages=[{"role": "user", "content": f"Say {i}."}], max_tokens=1,
                user="alice")
            pinned.add(resp.headers[REPLICA_HEADER])
        assert len(pinned) == 1
        sent = 4  # /v1/models and three chats
        results: list = []

        def one(i: int) -> None:
            if i % 3 == 0:
                out = client.completions.create(model=model, prompt=f"Count {i}:", max_tokens=3,
                                                stream=True)
                results.append("".join(c.choices[0].text for c in out))
            elif i % 3 == 1:
                results.append(httpx.post(r.base_url + "/generate", json={
                    "text": f"Count {i}:", "sampling_params": {"max_new_tokens": 3}}, timeout=120).json()["text"])
            else:
                results.append(client.completions.create(model=model, prompt=f"Count {i}:",
                                                         max_tokens=3).choices[0].text)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        sent += len(threads)
        assert len(results) == len(threads)
        # A streamed request is counted once the router has relayed its last byte, which can
        # land just after the client has read it: wait (briefly) for the counters to settle.
        deadline = time.monotonic() + 10
        samples = router_metrics(r.base_url)
        while metric_sum(samples, "sglang_lite_router:requests_total") < sent and time.monotonic() < deadline:
            time.sleep(0.05)
            samples = router_metrics(r.base_url)
    requests = metric_sum(samples, "sglang_lite_router:requests_total")
    per_replica = [metric_sum(samples, "sglang_lite_router:requests_total", replica=u.removeprefix("http://"))
                   for u in urls]
    assert requests == sum(per_replica) == sent, samples
    assert metric_sum(samples, "sglang_lite_router:requests_total", outcome="ok") == sent
    assert metric_sum(samples, "sglang_lite_router:attempts_total") == sent
    assert metric_sum(samples, "sglang_lite_router:routing_decisions_total", reason="session") == 2
    assert all(v > 0 for v in per_replica)  # round robin spread the rest
    assert metric_sum(samples, "sglang_lite_router:replica_load") == 0


def _stream(base: str, i: int, out: dict, first_token: threading.Event) -> None:
    body = {"prompt": f"List the numbers from {i}:", "max_tokens": 24, "ignore_eos": True,
            "temperature": 0, "stream": True}
    out.update(status=None, replica=None, text="", errors=[], done=False, finish=None)
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=180) as r:
        out["status"], out["replica"] = r.status_code, r.headers.get(REPLICA_HEADER)
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                out["done"] = True
                continue
            event = json.loads(line[6:])
            if "error" in event:
                out["errors"].append(event["error"])
                continue
            choice = event["choices"][0]
            out["text"] += choice["text"]
            out["finish"] = choice.get("finish_reason") or out["finish"]
            if choice["text"]:
                first_token.set()


def test_killed_replica_loses_no_request(dp):
    urls = dp.urls
    victim_url = urls[0]
    victim_pid = dp.replica_pid(victim_url)
    with router(urls, "round_robin") as r:
        streams = [{} for _ in range(6)]
        plain: list = [None, None]
        events = [threading.Event() for _ in streams]
        threads = [threading.Thread(target=_stream, args=(r.base_url, i, streams[i], events[i]))
                   for i in range(len(streams))]

        def non_stream(k: int) -> None:
            plain[k] = httpx.post(r.base_url + "/v1/completions", json={
                "prompt": f"Spell {k}:", "max_tokens": 8, "ignore_eos": True}, timeout=180)

        threads += [threading.Thread(target=non_stream, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
            time.sleep(0.05)  # round robin in a known order: even ones to the victim

        def victim_has_tokens() -> bool:
            return any(e.is_set() and s.get("replica") == victim_url.removeprefix("http://")
                       for e, s in zip(events, streams))

        deadline = time.monotonic() + 120
        while not victim_has_tokens():
            assert time.monotonic() < deadline, streams
            time.sleep(0.02)
        os.kill(victim_pid, signal.SIGKILL)
        for t in threads:
            t.join(180)
        samples = router_metrics(r.base_url)
        workers = httpx.get(r.base_url + "/workers").json()["workers"]
        after = _complete(r.base_url, "Still there?")  # the survivor takes new work
    broken = [s for s in streams if s["errors"]]
    for s in streams:
        assert s["status"] == 200 and s["done"], s
        if s["errors"]:  # it had streamed from the victim: failed cleanly, in-band
            assert s["text"] and s["finish"] is None, s
            assert [e["code"] for e in s["errors"]] == ["replica_failed"], s
        else:  # finished, on the survivor if it had to be retried
            assert s["finish"] == "length", s
    assert broken and len(broken) < len(streams)
    assert all(p.status_code == 200 and p.json()["choices"][0]["finish_reason"] == "length" for p in plain)
    retries = metric_sum(samples, "sglang_lite_router:retries_total", replica=victim_url.removeprefix("http://"))
    assert retries >= 1, samples
    sent = len(streams) + len(plain)
    assert metric_sum(samples, "sglang_lite_router:requests_total") == sent
    assert metric_sum(samples, "sglang_lite_router:requests_total", outcome="stream_error") == len(broken)
    assert metric_sum(samples, "sglang_lite_router:attempts_total") == sent + retries
    assert [w["healthy"] for w in workers] == [False, True]
    assert after.headers[REPLICA_HEADER] == urls[1].removeprefix("http://")


def test_sigterm_stops_router_and_replicas(dp):
    # serve --dp's own router saw the killed replica leave too, and still answers
    assert _complete(dp.base_url, "Hello").headers[REPLICA_HEADER] == dp.urls[1].removeprefix("http://")
    dp.proc.send_signal(signal.SIGTERM)
    assert dp.proc.wait(timeout=60) == 0, dp.log_path.read_text()[-3000:]
    for u in dp.urls:
        try:
            httpx.get(u + "/health", timeout=2)
            raise AssertionError(f"replica {u} still answers after serve --dp stopped")
        except httpx.TransportError:
            pass
