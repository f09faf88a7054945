"""`sglang-lite router` options, validated once into a frozen RouterConfig (sgl-router's flag
names where it has one)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from sglang_lite.router.policy import POLICIES


@dataclass(slots=True, frozen=True)
class RouterConfig:
    worker_urls: tuple[str, ...] = ()
    worker_dns: str | None = None  # HOST:PORT: the replicas are HOST's addresses (re-resolved)
    host: str = "127.0.0.1"
    port: int = 30000
    policy: str = "cache_aware"
    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    max_tree_size: int = 4_000_000
    max_sessions: int = 100_000
    health_check_interval: float = 5.0
    health_check_timeout: float = 5.0
    health_failure_threshold: int = 2
    request_timeout: float = 600.0
    max_request_bytes: int | None = None  # larger bodies: 413, never read whole; None: serve's default
    log_level: str = "info"

    def __post_init__(self):
        if not self.worker_urls and not self.worker_dns:
            raise ValueError("worker_urls: at least one replica URL (or worker_dns) is needed")
        if self.worker_dns is not None and not self.worker_dns.rpartition(":")[2].isdigit():
            raise ValueError(f"worker_dns: {self.worker_dns!r} is not HOST:PORT")
        for url in self.worker_urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"worker_urls: {url!r} is not an http(s) URL")
        if self.policy not in POLICIES:
            raise ValueError(f"policy: unknown {self.policy!r} (one of {', '.join(POLICIES)})")
        if not 0.0 <= self.cache_threshold <= 1.0:
            raise ValueError("cache_threshold: must be within [0, 1]")
        if self.balance_abs_threshold < 0 or self.balance_rel_threshold < 1.0:
            raise ValueError("balance_abs_threshold / balance_rel_threshold: must be >= 0 / >= 1")
        if self.health_check_interval <= 0 or self.health_failure_threshold < 1:
            raise ValueError("health_check_interval / health_failure_threshold: must be > 0 / >= 1")
        if self.max_request_bytes is not None and self.max_request_bytes < 1:
            raise ValueError("max_request_bytes: must be >= 1")


# (flag, destination, type, default, help): shared by `sglang-lite router` (--policy) and
# `sglang-lite serve --dp N` (--router-policy).
_ROUTING_FLAGS = (
    ("--cache-threshold", "cache_threshold", float, 0.3,
     "cache_aware: follow a prefix match covering more than this share of the prompt"),
    ("--balance-abs-threshold", "balance_abs_threshold", int, 64,
     "cache_aware: load is uneven when max - min in-flight requests exceeds this ..."),
    ("--balance-rel-threshold", "balance_rel_threshold", float, 1.5,
     "... and max exceeds this times min; then the least loaded replica is chosen"),
    ("--max-tree-size", "max_tree_size", int, 4_000_000,
     "cache_aware: prompt characters remembered per replica (LRU beyond)"),
    ("--health-check-interval", "health_check_interval", float, 5.0, "seconds between /health checks"),
    ("--health-failure-threshold", "health_failure_threshold", int, 2,
     "failed checks in a row that take a replica out of rotation"),
    ("--request-timeout", "request_timeout", float, 600.0,
     "seconds a replica may take to answer (or between streamed chunks)"),
)
ROUTING_FLAG_NAMES = tuple(f[0] for f in _ROUTING_FLAGS)


def add_routing_flags(p, policy_flag: str = "--policy", dest_prefix: str = "") -> None:
    """The routing flags on ``p`` (a parser or a group), their destinations prefixed."""
    p.add_argument(policy_flag, dest=dest_prefix + "policy", choices=POLICIES, default="cache_aware",
                   help="cache_aware (default): the replica most likely to hold the prompt's "
                        "prefix, the least loaded when load is uneven; round_robin; random")
    for flag, dest, type_, default, help_ in _ROUTING_FLAGS:
        p.add_argument(flag, dest=dest_prefix + dest, type=type_, default=default,
                       help=f"{help_} (default: {default})")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglang-lite router",
                                description="Cache-aware HTTP router in front of sglang-lite serve replicas.")
    p.add_argument("--worker-urls", nargs="+", default=[], help="the replicas, e.g. http://127.0.0.1:30001")
    p.add_argument("--worker-dns", default=None,
                   help="HOST:PORT: route to every address HOST resolves to, re-resolved at each "
                        "health check (a Kubernetes headless Service)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--log-level", default="info")
    p.add_argument("--max-request-bytes", type=int, default=None,
                   help="larger request bodies get 413 (default: sglang-lite serve's, 16 MiB)")
    add_routing_flags(p)
    return p


def config_from(options: dict, worker_urls: list[str], host: str, port: int,
                log_level: str = "info", max_request_bytes: int | None = None) -> RouterConfig:
    """``options``: the routing flags' values by destination (``policy``, ``cache_threshold``, ...)."""
    return RouterConfig(worker_urls=tuple(worker_urls), host=host, port=port, log_level=log_level,
                        max_request_bytes=max_request_bytes, **options)


def parse_args(argv: list[str]) -> RouterConfig:
    ns = vars(build_parser().parse_args(argv))
    base = {k: ns.pop(k) for k in ("worker_urls", "host", "port", "log_level", "max_request_bytes")}
    return config_from(ns, **base)
