"""The router's own Prometheus metrics (``sglang_lite_router:`` prefix), in a registry owned
by one router app.

Every client request is counted once in ``requests_total``, under the replica that gave the
final answer (``none`` when no replica was healthy), so the per-replica counts add up to the
requests received. ``attempts_total`` counts what was sent to each replica, retries included.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from sglang_lite.router.policy import Decision
from sglang_lite.router.replica import Replica, ReplicaSet

P = "sglang_lite_router:"


class RouterMetrics:
    def __init__(self, replicas: ReplicaSet, policy: str):
        self.replicas = replicas
        self.registry = r = CollectorRegistry()
        self.requests = Counter(P + "requests", "Client requests answered, by the replica that "
                                "answered last (none: no healthy replica) and outcome "
                                "(ok, error, stream_error).", ["replica", "outcome"], registry=r)
        self.attempts = Counter(P + "attempts", "Requests sent to a replica, retries included.",
                                ["replica"], registry=r)
        self.retries = Counter(P + "retries", "Requests sent again to another replica after the "
                               "first failed before answering, by the replica that failed.",
                               ["replica"], registry=r)
        self.decisions = Counter(P + "routing_decisions", "Routing decisions by policy and reason "
                                 "(cache_hit, cache_miss, balance, session, round_robin, random).",
                                 ["policy", "reason"], registry=r)
        self.matched_chars = Counter(P + "prefix_matched_chars", "Characters of routed requests "
                                     "that the chosen replica was sent before (cache_aware).",
                                     registry=r)
        self.routed_chars = Counter(P + "routed_chars", "Characters of requests routed by the "
                                    "cache_aware policy (sessions aside).", registry=r)
        self.hit_rate = Gauge(P + "cache_affinity_hit_rate", "prefix_matched_chars / routed_chars: "
                              "the share of routed text sent to a replica that was sent that "
                              "prefix before.", registry=r)
        self.load = Gauge(P + "replica_load", "Requests in flight on a replica (through this "
                          "router).", ["replica"], registry=r)
        self.healthy = Gauge(P + "replica_healthy", "1 while a replica is in rotation.",
                             ["replica"], registry=r)
        self.health_failures = Counter(P + "replica_failures", "Failed health checks and "
                                       "requests that found a replica not answering.",
                                       ["replica"], registry=r)
        self.policy = policy
        self._matched = self._routed = 0
        for replica in replicas.all:  # every series exists from the start (at 0)
            self.attempts.labels(replica=replica.name)
            self.retries.labels(replica=replica.name)
            self.health_failures.labels(replica=replica.name)

    def forget(self, replica: Replica) -> None:
        """``replica`` left the set: its gauges go (its counters stay, they are history)."""
        for gauge in (self.load, self.healthy):
            try:
                gauge.remove(replica.name)
            except KeyError:
                pass

    def on_decision(self, decision: Decision, text_len: int) -> None:
        self.decisions.labels(policy=self.policy, reason=decision.reason).inc()
        if self.policy != "cache_aware" or decision.reason == "session":
            return
        self.routed_chars.inc(text_len)
        self._routed += text_len
        if decision.reason == "cache_hit":
            self.matched_chars.inc(decision.matched_chars)
            self._matched += decision.matched_chars

    def on_answered(self, replica_name: str, outcome: str) -> None:
        self.requests.labels(replica=replica_name, outcome=outcome).inc()

    def render(self) -> bytes:
        for replica in self.replicas.all:
            self.load.labels(replica=replica.name).set(replica.in_flight)
            self.healthy.labels(replica=replica.name).set(1 if replica.healthy else 0)
        self.hit_rate.set(self._matched / self._routed if self._routed else 0.0)
        return generate_latest(self.registry)
