"""Health checks: every ``interval_s`` each replica's /health is asked; after
``failure_threshold`` failures in a row (or one request that found it not answering) a replica
leaves rotation, and one success brings it back. A replica that leaves has its remembered
prefixes forgotten: it may come back restarted, with an empty cache."""

from __future__ import annotations

import asyncio
import logging
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

    async def run(self, client: httpx.AsyncClient) -> None:
        while True:
            await self.check_all(client)
            await asyncio.sleep(self.interval_s)

    async def check_all(self, client: httpx.AsyncClient) -> None:
        await asyncio.gather(*(self._check(client, r) for r in self.replicas.all))

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
