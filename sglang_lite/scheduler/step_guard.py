"""A failed step fails only the requests whose data made it fail.

The scheduler tells the guard which requests a step runs (``batch``) and when it starts
changing their state (``commit``: after the forward pass, when tokens are appended). On an
error, ``recover`` probes each request of the batch alone: the requests whose own values
cannot be turned into the step's tensors are the culprits, and are failed with the error.

- Before ``commit`` nothing but KV slots (kept, reused by the next step) has changed, so
  every other request simply runs again next step: one bad request costs the rest one step.
- After ``commit`` the batch's state is half-updated; its requests are failed (never the
  requests outside the batch).
- With no batch yet (scheduling itself failed) the guard declines and the engine decides.
"""

from __future__ import annotations

import logging

from sglang_lite.request import Req

log = logging.getLogger(__name__)


class StepGuard:
    __slots__ = ("reqs", "committed", "num_isolated")

    def __init__(self) -> None:
        self.reqs: list[Req] | None = None
        self.committed = False
        self.num_isolated = 0  # requests failed alone so far (for stats and tests)

    def begin(self) -> None:
        self.reqs, self.committed = None, False

    def batch(self, reqs: list[Req]) -> None:
        self.reqs = list(reqs)

    def commit(self) -> None:
        self.committed = True

    def end(self) -> None:
        self.reqs = None

    def recover(self, scheduler, error: Exception) -> bool:
        """Fail the culprits of ``error`` (and, past commit, the rest of the batch); False
        if there is no batch to blame, so the caller falls back to its own handling."""
        if not self.reqs:
            return False
        culprits = [r for r in self.reqs if _probe(scheduler, r) is not None]
        log.warning("step failed (%s: %s); %d of %d requests in the batch caused it",
                    type(error).__name__, error, len(culprits), len(self.reqs))
        for req in culprits:
            scheduler.abort_one(req, f"engine error: this request's parameters cannot be run: "
                                     f"{type(error).__name__}: {error}")
        self.num_isolated += len(culprits)
        if self.committed or not culprits:
            for req in self.reqs:
                if req not in culprits and not req.finished:
                    scheduler.abort_one(req, f"engine error: {type(error).__name__}: {error}")
        return True


def _probe(scheduler, req: Req) -> Exception | None:
    """The error building this request's own sampling tensors raises, if any."""
    try:
        scheduler.sampler.row_params([req], scheduler.runner.device)
        scheduler.sampler.continuous([req], scheduler.runner.device)
    except Exception as e:
        return e
    return None
