"""A live server on 127.0.0.1 (in-process uvicorn in a thread) over one small engine."""

from __future__ import annotations

import time

import httpx
import pytest

from sglang_lite import Engine, loopback
from sglang_lite.server import create_app

# Small on purpose: max_running_requests forces queueing in the load test.
# Constraints compile in worker processes, as `sglang-lite serve` does by default.
ENGINE_OPTIONS = {"kv_cache_memory": "64MiB", "max_running_requests": 12, "max_queue_size": 1024,
                  "grammar_compile_workers": 2}


def wait_until_healthy(proc, base_url: str, timeout_s: float = 120) -> None:
    """Wait for a `sglang-lite serve` subprocess to answer /health; if it exits or the deadline
    passes, kill it and raise with the end of its output."""
    try:
        loopback.wait_until_healthy([(proc, base_url)], timeout_s, poll_s=0.2)
    except loopback.ServerStartError as e:
        proc.kill()
        raise RuntimeError(f"{e}: {proc.stdout.read()[-3000:]}") from e


class LiveServer(loopback.AppThread):
    """The server app without its lifespan: the engine fixture owns the engine."""

    def __init__(self, app):
        super().__init__(app, lifespan="off", name="test-uvicorn")


@pytest.fixture(scope="session")
def engine():
    eng = Engine(**ENGINE_OPTIONS)
    yield eng
    eng.shutdown()


@pytest.fixture(scope="session")
def server(engine):
    live = LiveServer(create_app(engine)).start()
    yield live
    live.stop()


@pytest.fixture(scope="session")
def model_name(engine) -> str:
    return engine.source.name


@pytest.fixture()
def http(server):
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        yield client


@pytest.fixture()
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def server_info(http: httpx.Client) -> dict:
    return http.get("/get_server_info").json()


def wait_idle(http: httpx.Client, timeout: float = 60) -> dict:
    """Wait until nothing runs or waits; return the server info."""
    deadline = time.monotonic() + timeout
    while True:
        info = server_info(http)
        if info["num_running_reqs"] == 0 and info["num_queue_reqs"] == 0:
            return info
        if time.monotonic() > deadline:
            raise AssertionError(f"engine not idle: {info}")
        time.sleep(0.05)


def assert_no_leaked_pages(http: httpx.Client) -> None:
    wait_idle(http)
    assert http.post("/flush_cache").status_code == 200
    info = server_info(http)
    assert info["num_free_pages"] == info["num_usable_pages"], info


def scrape(http: httpx.Client) -> dict[str, float]:
    """Prometheus text -> {sample name without labels: value} for the sglang_lite: samples."""
    out: dict[str, float] = {}
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("sglang_lite:"):
            name_labels, value = line.rsplit(" ", 1)
            name = name_labels.split("{", 1)[0]
            if "_bucket" not in name:
                out[name] = float(value)
    return out
