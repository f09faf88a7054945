"""Health checks: every ``interval_s`` each replica's /health is asked; after
``failure_threshold`` failures in a row (or one request that found it not answering) a replica
leaves rotation, and one success brings it back. A replica that leaves has its remembered
prefixes forgotten: it may come back restarted, with an empty cache."""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import dataclass

import httpx

from sglang_lite.router.metrics import RouterMetrics
from sglang_lite.router.policy import RoutingPolicy
from sglang_lite.router.replica import Replica, ReplicaSet

log = logging.getLogger(__name__)


@dataclass(slots=True)
class HealthChecker:
    replicas: ReplicaSet
    policy: RoutingPolicy
    metrics: RouterMetrics
    interval_s: float = 5.0
    timeout_s: float = 5.0
    failure_threshold: int = 2
    worker_dns: str | None = None  # HOST:PORT re-resolved before each round of checks

    async def run(self, client: httpx.AsyncClient) -> None:
        while True:
            await self.check_all(client)
            await asyncio.sleep(self.interval_s)

    async def check_all(self, client: httpx.AsyncClient) -> None:
        if self.worker_dns is not None:
            await self.discover()
        await asyncio.gather(*(self._check(client, r) for r in self.replicas.all))

    async def discover(self) -> None:
        """The replica set becomes the addresses ``worker_dns`` resolves to now (a failed
        lookup changes nothing: DNS hiccups must not empty the set)."""
        host, _, port = self.worker_dns.rpartition(":")
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except OSError as e:
            log.warning("worker_dns %s: lookup failed (%s); keeping %d replicas", self.worker_dns, e,
                        len(self.replicas.all))
            return
        hosts = sorted({info[4][0] for info in infos})
        urls = [f"http://[{h}]:{port}" if ":" in h else f"http://{h}:{port}" for h in hosts]
        added, removed = self.replicas.sync(urls)
        for replica in removed:
            log.info("replica %s left %s", replica.url, self.worker_dns)
            self.policy.forget(replica)
            self.metrics.forget(replica)
        for replica in added:
            log.info("replica %s joined %s", replica.url, self.worker_dns)

    async def _check(self, client: httpx.AsyncClient, replica: Replica) -> None:
        try:
            ok = (await client.get(replica.url + "/health", timeout=self.timeout_s)).status_code == 200
        except httpx.HTTPError:
            ok = False
        if ok:
            self.mark_up(replica)
        else:
            self.metrics.health_failures.labels(replica=replica.name).inc()
            replica.consecutive_failures += 1
            if replica.consecutive_failures >= self.failure_threshold:
                self._take_out(replica, "health check failed")

    def mark_failed(self, replica: Replica, why: str) -> None:
        """A request found ``replica`` not answering: out of rotation at once."""
        self.metrics.health_failures.labels(replica=replica.name).inc()
        replica.consecutive_failures = max(replica.consecutive_failures, self.failure_threshold)
        self._take_out(replica, why)

    def mark_up(self, replica: Replica) -> None:
        replica.consecutive_failures = 0
        if not replica.healthy:
            log.info("replica %s is back in rotation", replica.url)
            replica.healthy = True

    def _take_out(self, replica: Replica, why: str) -> None:
        if replica.healthy:
            log.warning("replica %s out of rotation: %s", replica.url, why)
            replica.healthy = False
            self.policy.forget(replica)
