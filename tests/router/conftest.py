"""Replicas of `sglang-lite serve` on loopback started by `sglang-lite serve --dp N`, and more
routers over them served in-process (uvicorn in a thread, with the router's lifespan: its HTTP
client and health checks)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from sglang_lite.loopback import AppThread, ServerStartError, free_port, wait_until_healthy
from sglang_lite.router import RouterConfig, create_router_app

# One running request per replica: a second one queues, so a killed replica has requests that
# had not started. --grammar-compile-workers 0: no worker processes to start.
REPLICA_FLAGS = ("--kv-cache-memory", "64MiB", "--max-running-requests", "1", "--dtype", "float32",
                 "--grammar-compile-workers", "0", "--log-level", "warning")


@dataclass(slots=True)
class DataParallel:
    """``sglang-lite serve --dp N`` running: the launcher, its router's URL, the replicas'."""
    proc: subprocess.Popen
    base_url: str
    urls: list[str]
    log_path: Path

    def replica_pid(self, url: str) -> int:
        """The pid of the replica serving ``url`` (found by its --port in /proc)."""
        port = url.rsplit(":", 1)[1]
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                args = cmdline.read_bytes().split(b"\0")
            except OSError:
                continue
            if b"sglang_lite.server" in args and b"--port" in args and \
                    args[args.index(b"--port") + 1] == port.encode() and b"--dp" not in args:
                return int(cmdline.parent.name)
        raise LookupError(f"no replica process for {url}")


def start_dp(log_path: Path, n: int, *flags: str, timeout_s: float = 300) -> DataParallel:
    port = free_port()
    cmd = [sys.executable, "-m", "sglang_lite.server", "--dp", str(n), "--port", str(port), *flags]
    with open(log_path, "w") as log:  # a file: replicas log more than a pipe holds unread
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy([(proc, base)], timeout_s)
    except ServerStartError as e:
        proc.kill()
        raise RuntimeError(f"serve --dp did not start: {log_path.read_text()[-3000:]}") from e
    urls = [w["url"] for w in httpx.get(base + "/workers").json()["workers"]]
    return DataParallel(proc, base, urls, log_path)


class LiveRouter(AppThread):
    def __init__(self, config: RouterConfig):
        super().__init__(create_router_app(config), config.port, name="test-router")


def router(urls: list[str], policy: str = "cache_aware", **options) -> LiveRouter:
    options.setdefault("health_check_interval", 0.5)
    return LiveRouter(RouterConfig(worker_urls=tuple(urls), port=free_port(), policy=policy, **options))


@pytest.fixture(scope="module")
def dp(tmp_path_factory):
    """Two replicas of the embedded model behind `serve --dp 2` (its router: round robin)."""
    launched = start_dp(tmp_path_factory.mktemp("dp") / "serve.log", 2, "--router-policy",
                        "round_robin", "--health-check-interval", "1", "--shutdown-timeout", "5",
                        *REPLICA_FLAGS)
    yield launched
    if launched.proc.poll() is None:
        launched.proc.kill()  # the replicas die with it (PR_SET_PDEATHSIG)
        launched.proc.wait()


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
