"""One replica of ``sglang-lite serve`` as the router sees it: its URL, the requests the router
has in flight on it (its load), and whether it is in rotation."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class Replica:
    url: str
    in_flight: int = 0
    healthy: bool = False  # in rotation once a health check (or the launcher) saw it answer
    consecutive_failures: int = 0

    @property
    def name(self) -> str:
        """The label it carries in metrics and the ``X-Sglang-Lite-Replica`` header."""
        return self.url.removeprefix("http://").removeprefix("https://")


class ReplicaSet:
    """The replicas, in the order given; ``healthy`` ones are the candidates for routing."""

    def __init__(self, urls: list[str]):
        if not urls:
            raise ValueError("worker_urls: at least one replica is needed")
        self.all = [Replica(u.rstrip("/")) for u in urls]

    def healthy(self, exclude: tuple[Replica, ...] = ()) -> list[Replica]:
        return [r for r in self.all if r.healthy and r not in exclude]
