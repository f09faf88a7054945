"""A replica that starts draining (SIGTERM: new work answered 503) mid-load: the router sends
what it refused to another replica, once, takes the draining one out of rotation, and loses
nothing. Two real server apps over the session engine, the real router in front."""

from __future__ import annotations

import httpx

from sglang_lite.loopback import AppThread, free_port
from sglang_lite.router import RouterConfig, create_router_app
from sglang_lite.router.proxy import REPLICA_HEADER
from sglang_lite.server import create_app
from tests.router.conftest import metric_sum, router_metrics
from tests.server.conftest import LiveServer


def test_draining_replica_503_is_retried_elsewhere(engine):
    draining, healthy = LiveServer(create_app(engine)).start(), LiveServer(create_app(engine)).start()
    config = RouterConfig(worker_urls=(draining.base_url, healthy.base_url), port=free_port(),
                          policy="round_robin", health_check_interval=60)
    try:
        with AppThread(create_router_app(config), config.port) as router:
            draining.app.state.draining = True  # what SIGTERM sets; /health says 503 from now on
            answers = [httpx.post(router.base_url + "/v1/completions", timeout=120, json={
                "prompt": f"Count to {i}:", "max_tokens": 4, "ignore_eos": True}) for i in range(4)]
            samples = router_metrics(router.base_url)
            workers = httpx.get(router.base_url + "/workers").json()["workers"]
    finally:
        draining.stop()
        healthy.stop()
    survivor = healthy.base_url.removeprefix("http://")
    assert [a.status_code for a in answers] == [200] * 4
    assert all(a.headers[REPLICA_HEADER] == survivor for a in answers)
    assert all(a.json()["usage"]["completion_tokens"] == 4 for a in answers)
    # Round robin's first pick is the draining one; after its 503 it leaves rotation, so only
    # the first request needed a retry.
    victim = draining.base_url.removeprefix("http://")
    assert metric_sum(samples, "sglang_lite_router:retries_total", replica=victim) == 1
    assert metric_sum(samples, "sglang_lite_router:attempts_total") == 5
    assert metric_sum(samples, "sglang_lite_router:requests_total", outcome="ok") == 4
    assert [w["healthy"] for w in workers] == [False, True]
