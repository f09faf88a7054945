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
    """The replicas, in the order given (or discovered); ``healthy`` ones are the candidates
    for routing."""

    def __init__(self, urls: list[str]):
        self.all = [Replica(u.rstrip("/")) for u in urls]

    def healthy(self, exclude: tuple[Replica, ...] = ()) -> list[Replica]:
        return [r for r in self.all if r.healthy and r not in exclude]

    def sync(self, urls: list[str]) -> tuple[list[Replica], list[Replica]]:
        """Make the set exactly ``urls`` (service discovery): returns (added, removed). A
        removed replica keeps serving what it has in flight; it only gets no new requests."""
        wanted = [u.rstrip("/") for u in urls]
        removed = [r for r in self.all if r.url not in wanted]
        known = {r.url for r in self.all}
        added = [Replica(u) for u in wanted if u not in known]
        self.all = [r for r in self.all if r.url in wanted] + added
        return added, removed
