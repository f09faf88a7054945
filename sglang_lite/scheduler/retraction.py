"""Which running requests give way, and when: retraction when the pool cannot hold the
running requests' next tokens, and preemption for a waiting request that outranks running
ones (priority scheduling).

Policy only: the scheduler's ``retract`` moves a request back to the waiting queue and
returns its KV; these functions decide whom it is called on, re-reading the pool after
each call (a retracted request's pages are available again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from sglang_lite.request import Req
from sglang_lite.scheduler.cache import KVCacheManager
from sglang_lite.scheduler.policy import PriorityRule

log = logging.getLogger(__name__)


def make_room_for_decode(decode: list[Req], cache: KVCacheManager, rule: PriorityRule | None,
                         retract: Callable[[Req], None]) -> list[Req]:
    """Retract running requests (the youngest; with priorities, the lowest ranked) until
    the rest can take their next tokens; returns the requests that stay."""
    decode = list(decode)
    need = sum(cache.pages_needed(r, r.extend_len) for r in decode)
    while need > cache.available_pages and decode:
        if rule is not None:
            victim = rule.victim(decode)
        else:
            victim = max(decode, key=lambda r: r.arrival_time)  # the youngest
        decode.remove(victim)
        need -= cache.pages_needed(victim, victim.extend_len)
        retract(victim)
    return decode


def preempt_for_priority(waiting: Sequence[Req], running: Sequence[Req], rule: PriorityRule,
                         could_admit: Callable[..., bool], retract: Callable[[Req], None]) -> None:
    """Retract running requests that the most urgent waiting one outranks (by more than
    the threshold), lowest rank first, until it could be admitted this step
    (``could_admit(req, without=...)``). Nothing is retracted unless retracting all of those
    would be enough (preempting for a request that still cannot start would only thrash)."""
    top = min(waiting, key=lambda r: (-rule.rank(r), r.arrival_time))
    if could_admit(top):
        return
    victims = sorted((r for r in running if rule.may_preempt(top, r)),
                     key=lambda r: (rule.rank(r), -r.arrival_time))
    if not victims or not could_admit(top, without=victims):
        return
    for victim in victims:
        log.debug("preempting %s (priority %d) for %s (priority %d)",
                  victim.rid, victim.priority, top.rid, top.priority)
        retract(victim)
        if could_admit(top):
            return
