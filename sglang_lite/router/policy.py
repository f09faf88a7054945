"""Routing policies: which healthy replica gets a request.

``cache_aware`` follows sgl-router: while load is balanced, a request goes to the replica that
was sent the longest prefix of its text when that prefix covers more than ``cache_threshold``
of it, else to the least loaded replica (ties: the one remembering the least, which has the
most cache room). When load is uneven beyond both thresholds (max - min > ``balance_abs`` and
max > ``balance_rel`` x min) it goes to the least loaded replica. Either way the text is
remembered for the chosen replica.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol

from sglang_lite.router.prefix_tree import PrefixTree
from sglang_lite.router.replica import Replica

POLICIES = ("cache_aware", "round_robin", "random")


@dataclass(slots=True, frozen=True)
class Decision:
    replica: Replica
    reason: str  # cache_hit | cache_miss | balance | round_robin | random | session
    matched_chars: int = 0


class RoutingPolicy(Protocol):
    def choose(self, text: str, candidates: list[Replica]) -> Decision:
        """``candidates``: healthy replicas, never empty. May remember ``text``."""

    def observe(self, text: str, replica: Replica) -> None:
        """``text`` was sent to ``replica`` without asking (a pinned session)."""

    def forget(self, replica: Replica) -> None:
        """``replica`` left rotation (its cache is unknown from now on)."""


@dataclass(slots=True)
class CacheAwarePolicy:
    cache_threshold: float = 0.3
    balance_abs: int = 64
    balance_rel: float = 1.5
    tree: PrefixTree = None

    def __post_init__(self):
        if self.tree is None:
            self.tree = PrefixTree()

    def choose(self, text: str, candidates: list[Replica]) -> Decision:
        loads = [r.in_flight for r in candidates]
        if max(loads) - min(loads) > self.balance_abs and max(loads) > self.balance_rel * min(loads):
            decision = Decision(self._least_loaded(candidates), "balance")
        else:
            decision = self._by_prefix(text, candidates)
        self.tree.insert(text, decision.replica.url)
        return decision

    def observe(self, text: str, replica: Replica) -> None:
        self.tree.insert(text, replica.url)

    def forget(self, replica: Replica) -> None:
        self.tree.remove_replica(replica.url)

    def _by_prefix(self, text: str, candidates: list[Replica]) -> Decision:
        matches = self.tree.match(text)
        by_url = {r.url: r for r in candidates}
        best = max(((n, url) for url, n in matches.items() if url in by_url),
                   key=lambda m: (m[0], -by_url[m[1]].in_flight), default=None)
        if best is not None and text and best[0] / len(text) > self.cache_threshold:
            return Decision(by_url[best[1]], "cache_hit", best[0])
        return Decision(self._least_loaded(candidates), "cache_miss", best[0] if best else 0)

    def _least_loaded(self, candidates: list[Replica]) -> Replica:
        return min(candidates, key=lambda r: (r.in_flight, self.tree.size(r.url)))


@dataclass(slots=True)
class RoundRobinPolicy:
    _next: int = 0

    def choose(self, text: str, candidates: list[Replica]) -> Decision:
        replica = candidates[self._next % len(candidates)]
        self._next += 1
        return Decision(replica, "round_robin")

    def observe(self, text: str, replica: Replica) -> None:
        pass

    def forget(self, replica: Replica) -> None:
        pass


@dataclass(slots=True)
class RandomPolicy:
    rng: random.Random = None

    def __post_init__(self):
        if self.rng is None:
            self.rng = random.Random()

    def choose(self, text: str, candidates: list[Replica]) -> Decision:
        return Decision(self.rng.choice(candidates), "random")

    def observe(self, text: str, replica: Replica) -> None:
        pass

    def forget(self, replica: Replica) -> None:
        pass


def make_policy(name: str, cache_threshold: float = 0.3, balance_abs: int = 64,
                balance_rel: float = 1.5, max_tree_chars: int = 4_000_000) -> RoutingPolicy:
    if name == "cache_aware":
        return CacheAwarePolicy(cache_threshold, balance_abs, balance_rel, PrefixTree(max_tree_chars))
    if name == "round_robin":
        return RoundRobinPolicy()
    if name == "random":
        return RandomPolicy()
    raise ValueError(f"policy: unknown {name!r} (one of {', '.join(POLICIES)})")
