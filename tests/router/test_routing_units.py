"""The router's parts without replicas: the approximate prefix tree (match, split, LRU
eviction, removal), the cache-aware policy's thresholds, what is read from a request, and
the flags `serve --dp` passes on to its replicas."""

from __future__ import annotations

import pytest

from sglang_lite.router.args import RouterConfig, parse_args
from sglang_lite.router.launcher import replica_argv
from sglang_lite.router.policy import CacheAwarePolicy, RoundRobinPolicy
from sglang_lite.router.prefix_tree import PrefixTree
from sglang_lite.router.replica import Replica
from sglang_lite.router.request_key import request_key


def test_prefix_tree_matches_longest_prefix_per_replica():
    t = PrefixTree()
    t.insert("hello world", "a")
    t.insert("hello there", "b")
    t.insert("hello world again", "a")
    assert t.match("hello world again and again") == {"a": 17, "b": 6}
    assert t.match("hello th") == {"a": 6, "b": 8}
    assert t.match("goodbye") == {}
    assert t.size("a") == len("hello world again") and t.size("b") == len("hello there")
    t.remove_replica("a")
    assert t.match("hello world") == {"b": 6} and t.size("a") == 0


def test_prefix_tree_evicts_least_recently_used_first():
    t = PrefixTree(max_chars=100)
    for i in range(20):
        t.insert(f"doc {i:02d} " * 4, "a")
        t.insert("doc 00 " * 4, "a")  # kept in use: never the LRU leaf
    assert t.size("a") <= 100
    assert t.match("doc 00 " * 4) == {"a": 28}
    assert t.match("doc 01 " * 4)["a"] < 28  # evicted down to what it shares with others
    assert t.match("doc 19 " * 4) == {"a": 28}  # the newest is kept


def _replicas(*loads: int) -> list[Replica]:
    return [Replica(f"http://r{i}", in_flight=n, healthy=True) for i, n in enumerate(loads)]


def test_cache_aware_follows_prefix_until_load_is_uneven():
    policy = CacheAwarePolicy(cache_threshold=0.5, balance_abs=4, balance_rel=1.5)
    reps = _replicas(0, 0)
    first = policy.choose("shared system prompt; question 1", reps)
    assert first.reason == "cache_miss"
    again = policy.choose("shared system prompt; question 2", reps)
    assert again.reason == "cache_hit" and again.replica is first.replica
    other = policy.choose("something else entirely", reps)
    assert other.reason == "cache_miss" and other.replica is not first.replica  # the emptier tree
    first.replica.in_flight = 10  # 10 - 0 > 4 and 10 > 1.5 * 0: balance wins over affinity
    balanced = policy.choose("shared system prompt; question 3", reps)
    assert balanced.reason == "balance" and balanced.replica is not first.replica
    first.replica.in_flight = 3  # within the absolute threshold: affinity again; both now hold
    again = policy.choose("shared system prompt; question 4", reps)  # the prefix: less loaded wins
    assert again.reason == "cache_hit" and again.replica is balanced.replica
    first.replica.in_flight = 0
    deeper = policy.choose("shared system prompt; question 1 and more", reps)
    assert deeper.reason == "cache_hit" and deeper.replica is first.replica  # longest match wins


def test_cache_aware_ignores_a_short_match_and_forgets_a_removed_replica():
    policy = CacheAwarePolicy(cache_threshold=0.5)
    reps = _replicas(0, 0)
    first = policy.choose("abcdefghij", reps)
    reps[1 - reps.index(first.replica)].in_flight = 0
    first.replica.in_flight = 1
    short = policy.choose("abc" + "z" * 20, reps)  # 3 of 23 chars matched: below the threshold
    assert short.reason == "cache_miss" and short.replica is not first.replica
    policy.forget(first.replica)
    assert policy.tree.match("abcdefghij").get(first.replica.url) is None


def test_round_robin_cycles_over_candidates():
    policy, reps = RoundRobinPolicy(), _replicas(0, 0, 0)
    assert [policy.choose("", reps).replica.url for _ in range(4)] == \
        ["http://r0", "http://r1", "http://r2", "http://r0"]


@pytest.mark.parametrize(("path", "body", "text"), [
    ("/v1/completions", {"prompt": "hi there"}, "hi there"),
    ("/v1/completions", {"prompt": ["first", "second"]}, "first"),
    ("/v1/completions", {"prompt": [1, 2, 3]}, "[1, 2, 3"),
    ("/generate", {"text": "native"}, "native"),
    ("/generate", {"input_ids": [5, 6]}, "[5, 6"),
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "S"},
                                           {"role": "user", "content": [{"type": "text", "text": "U"}]}]},
     "<system>S<user>U"),
    ("/v1/chat/completions", {"messages": "not a list"}, ""),
])
def test_request_key_text(path, body, text):
    assert request_key(path, body, {}).text == text


def test_request_key_session_and_stream():
    key = request_key("/v1/chat/completions", {"messages": [], "user": "bob", "stream": True}, {})
    assert key.session == "bob" and key.stream
    assert request_key("/generate", {"text": "x"}, {"x-session-id": "s1"}).session == "s1"
    assert request_key("/generate", {"text": "x", "user": 7}, {}).session is None


def test_router_flags_validated_once():
    config = parse_args(["--worker-urls", "http://a:1", "http://b:2", "--policy", "round_robin",
                         "--balance-abs-threshold", "8"])
    assert config.worker_urls == ("http://a:1", "http://b:2") and config.balance_abs_threshold == 8
    with pytest.raises(ValueError, match="worker_urls"):
        RouterConfig(worker_urls=("a:1",))
    with pytest.raises(ValueError, match="cache_threshold"):
        RouterConfig(worker_urls=("http://a:1",), cache_threshold=2.0)
    with pytest.raises(SystemExit):
        parse_args(["--worker-urls", "http://a:1", "--policy", "fastest"])


def test_dp_flags_not_passed_to_replicas():
    argv = ["--dp", "2", "--port", "8000", "--host=0.0.0.0", "--router-policy", "random",
            "--cache-threshold=0.4", "--api-key-file", "keys", "--max-running-requests", "4"]
    assert replica_argv(argv, 1234) == ["--api-key-file", "keys", "--max-running-requests", "4",
                                        "--host", "127.0.0.1", "--port", "1234"]


def test_worker_dns_discovers_the_replica_set():
    import asyncio

    from sglang_lite.router.health import HealthChecker
    from sglang_lite.router.metrics import RouterMetrics
    from sglang_lite.router.replica import ReplicaSet

    replicas = ReplicaSet(["http://10.0.0.9:30000"])
    policy = CacheAwarePolicy()
    checker = HealthChecker(replicas, policy, RouterMetrics(replicas, "cache_aware"),
                            worker_dns="localhost:30123")
    asyncio.run(checker.discover())
    urls = {r.url for r in replicas.all}
    assert urls and urls <= {"http://127.0.0.1:30123", "http://[::1]:30123"}, urls
    assert all(not r.healthy for r in replicas.all)  # in rotation only once a check passes
    RouterConfig(worker_dns="svc:30000")
    with pytest.raises(ValueError, match="worker_dns"):
        RouterConfig(worker_dns="svc")


def test_router_without_a_live_replica_answers_cleanly():
    import httpx

    from sglang_lite.loopback import free_port
    from tests.router.conftest import metric_sum, router, router_metrics

    with router([f"http://127.0.0.1:{free_port()}"], health_check_interval=60) as r:
        assert httpx.get(r.base_url + "/health").status_code == 503
        resp = httpx.post(r.base_url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1})
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "no_healthy_replica"
        bad = httpx.post(r.base_url + "/v1/completions", content=b"{not json",
                         headers={"Content-Type": "application/json"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "body"
        assert httpx.post(r.base_url + "/generate", json=[1, 2]).status_code == 400
        samples = router_metrics(r.base_url)
    assert metric_sum(samples, "sglang_lite_router:requests_total", replica="none", outcome="error") == 1
    assert metric_sum(samples, "sglang_lite_router:replica_healthy") == 0


def test_router_refuses_oversized_and_too_deep_bodies_itself():
    import httpx

    from sglang_lite.loopback import free_port
    from tests.router.conftest import metric_sum, router, router_metrics

    assert parse_args(["--worker-urls", "http://a:1", "--max-request-bytes", "4096"]).max_request_bytes == 4096
    with pytest.raises(ValueError, match="max_request_bytes"):
        RouterConfig(worker_urls=("http://a:1",), max_request_bytes=0)
    with router([f"http://127.0.0.1:{free_port()}"], health_check_interval=60,
                max_request_bytes=4096) as r:
        big = httpx.post(r.base_url + "/v1/completions", json={"prompt": "x" * 5000, "max_tokens": 1})
        assert big.status_code == 413
        assert big.json()["error"]["code"] == "request_too_large" and big.json()["error"]["param"] == "body"
        deep = httpx.post(r.base_url + "/v1/completions", content=b"[" * 1000 + b"]" * 1000,
                          headers={"Content-Type": "application/json"})
        assert deep.status_code == 400 and "nested deeper" in deep.json()["error"]["message"]
        samples = router_metrics(r.base_url)
    # Refused at the door: no routing decision, no attempt on a replica.
    assert metric_sum(samples, "sglang_lite_router:requests_total") == 0


def test_a_client_leaving_after_done_is_counted_ok_and_before_it_client_gone():
    """The openai client closes a stream as soon as it has read ``data: [DONE]``, which can be
    while the router still waits on the replica's last (empty) read: that answer was whole."""
    import asyncio

    from sglang_lite.router.proxy import Forwarder, _Lease
    from sglang_lite.router.replica import Replica

    answered = []

    class Metrics:
        def on_answered(self, replica: str, outcome: str) -> None:
            answered.append(outcome)

    async def upstream_chunks():
        yield b"data: {}\n\n"
        yield b"data: [DONE]\n\n"
        await asyncio.sleep(30)  # the replica's connection not closed yet

    async def client(read: int) -> None:
        replica = Replica("http://127.0.0.1:1", in_flight=1)
        fwd = Forwarder(None, None, None, None, Metrics(), None)
        relay = fwd._relay(replica, _Lease(replica), None, upstream_chunks(), b"")
        for _ in range(read):
            await relay.__anext__()
        await relay.aclose()
        assert replica.in_flight == 0  # the lease is given back either way

    asyncio.run(client(2))  # read through [DONE], then left
    asyncio.run(client(1))  # left mid-answer
    assert answered == ["ok", "client_gone"]
