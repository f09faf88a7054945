"""Replicas of `sglang-lite serve` as subprocesses on loopback, and routers over them served
in-process (uvicorn in a thread, with the router's lifespan: its HTTP client and health checks)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import httpx
import pytest

from sglang_lite.router import RouterConfig, create_router_app
from tests.server.conftest import free_port, wait_until_healthy

# One running request per replica: a second one queues, so a killed replica has requests that
# had not started. --grammar-compile-workers 0: no worker processes to start.
REPLICA_FLAGS = ("--kv-cache-memory", "64MiB", "--max-running-requests", "1", "--dtype", "float32",
                 "--grammar-compile-workers", "0", "--log-level", "warning")


def start_replicas(n: int, *flags: str) -> list[tuple[subprocess.Popen, str]]:
    """``n`` replicas starting in parallel; returns once all answer /health."""
    started = []
    for _ in range(n):
        port = free_port()
        cmd = [sys.executable, "-m", "sglang_lite.server", "--port", str(port), *flags]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        started.append((proc, f"http://127.0.0.1:{port}"))
    try:
        for proc, url in started:
            wait_until_healthy(proc, url)
    except BaseException:
        stop_all(started)
        raise
    return started


def stop_all(procs: list[tuple[subprocess.Popen, str]]) -> None:
    for proc, _ in procs:
        if proc.poll() is None:
            proc.kill()
    for proc, _ in procs:
        proc.wait()


class LiveRouter:
    def __init__(self, config: RouterConfig):
        import uvicorn

        self.app = create_router_app(config)
        self.base_url = f"http://127.0.0.1:{config.port}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=config.port,
                                                    log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, name="test-router", daemon=True)

    def __enter__(self) -> LiveRouter:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("router did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def router(urls: list[str], policy: str = "cache_aware", **options) -> LiveRouter:
    options.setdefault("health_check_interval", 0.5)
    return LiveRouter(RouterConfig(worker_urls=tuple(urls), port=free_port(), policy=policy, **options))


@pytest.fixture(scope="module")
def replicas():
    procs = start_replicas(2, *REPLICA_FLAGS)
    yield procs
    stop_all(procs)


def router_metrics(base_url: str) -> dict[tuple[str, frozenset], float]:
    """The router's samples: (name, frozenset of label pairs) -> value."""
    out = {}
    for line in httpx.get(base_url + "/metrics").text.splitlines():
        if not line.startswith("sglang_lite_router:"):
            continue
        name_labels, value = line.rsplit(" ", 1)
        name, _, labels = name_labels.partition("{")
        pairs = frozenset(tuple(kv.split("=", 1)) for kv in labels.rstrip("}").split(",") if kv)
        out[(name, frozenset((k, v.strip('"')) for k, v in pairs))] = float(value)
    return out


def metric_sum(samples: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))
