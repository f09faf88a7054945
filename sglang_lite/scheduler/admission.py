"""Prefill admission, planned before anything is taken: a step's token budget, the pages
already promised to it and the decode reserve (``PrefillAdder``), checked against each
waiting request's prefix match without locking or writing anything; the scheduler commits
an admission only once its plan fits (``KVCacheManager.admit``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sglang_lite.request import Req
from sglang_lite.scheduler.cache import KVCacheManager, PrefixMatch

DEDUP_TOKENS = 32  # shared uncached tokens that make a request wait for another's prefill


@dataclass(frozen=True, slots=True)
class PrefillPlan:
    """Admitting ``req`` this step: the prefix it reuses, the tokens it computes now, and
    the new pages those need."""

    req: Req
    match: PrefixMatch
    num_tokens: int
    pages: int

    @property
    def is_chunk(self) -> bool:
        """Whether the prompt's remainder is left for later steps (chunked prefill)."""
        return self.num_tokens < self.req.seq_len - self.match.length


class PrefillAdder:
    """One step's prefill work under its budgets. ``plan`` reads the cache and this step's
    running totals and changes nothing; ``add`` records a plan the scheduler committed.

    - ``tokens``: prefill tokens left in the step (``max_prefill_tokens`` less the decodes').
    - ``committed``: pages promised to this step's decodes and admissions so far.
    - ``reserve``: tokens the running requests are expected to decode later
      (``remaining_new_tokens * new_token_ratio``); a new request must leave their pages free,
      unless it would run alone.
    """

    def __init__(self, cache: KVCacheManager, tokens: int, committed: int, *, chunk_size: int,
                 running: Sequence[Req], max_running: int, new_token_ratio: float, context_length: int):
        self.cache = cache
        self.tokens = tokens
        self.committed = committed
        self.chunk_size = chunk_size
        self.num_running = len(running)
        self.max_running = max_running
        self.new_token_ratio = new_token_ratio
        self.context_length = context_length
        self.reserve = sum(r.remaining_new_tokens for r in running) * new_token_ratio
        self.picked: list[tuple[Req, int]] = []  # (request, tokens it computes this step)
        # Requests that would compute the same uncached tokens as one admitted this step wait
        # one step: by then its prefix is in the tree and they reuse it instead.
        self._in_flight: set[tuple | None] = set()

    def add_chunk(self, req: Req) -> bool:
        """Take the next chunk of the prefill in progress if its pages fit; True when that
        completes its prompt, so new requests may be admitted after it."""
        n = min(req.extend_len, self.chunk_size, self.tokens)
        need = self.cache.pages_needed(req, n)
        if n <= 0 or need + self.committed > self.cache.available_pages:
            return False
        self.committed += need
        self.picked.append((req, n))
        self.tokens -= n
        self._in_flight.add(dedup_key(req, req.kv_len))
        return n == req.extend_len

    def has_room(self) -> bool:
        """Whether another request could start: tokens left, a running slot, a table row."""
        return (self.tokens > 0 and self.num_running < self.max_running
                and self.cache.req_pool.num_free_rows > 0)

    def waits_for_in_flight(self, req: Req, match: PrefixMatch) -> bool:
        """Whether ``req`` would compute the uncached tokens a request admitted this step
        computes (only with a prefix cache, which shares them next step)."""
        key = dedup_key(req, match.length)
        return self.cache.radix is not None and key is not None and key in self._in_flight

    def plan(self, req: Req, match: PrefixMatch, *, chunk_busy: bool) -> PrefillPlan | None:
        """Admitting ``req`` with ``match`` now, or None when it does not fit (its pages and
        the decode reserve exceed what is left, or it needs chunking while another prompt
        is being chunked): admission stops there, later requests wait behind it."""
        extend = req.seq_len - match.length
        n = min(extend, self.chunk_size, self.tokens)
        plan = PrefillPlan(req, match, n, self.cache.pages_to_admit(match, n))
        reserve_pages = -(-int(self.reserve) // self.cache.page_size)
        available = self.cache.available_after(match) - self.committed
        alone = self.num_running == 0 and not self.picked
        if plan.pages + (0 if alone else reserve_pages) > available:
            return None
        if plan.is_chunk and chunk_busy:
            return None
        return plan

    def add(self, plan: PrefillPlan) -> None:
        """Count a committed plan against the step's budgets."""
        req = plan.req
        self._in_flight.add(dedup_key(req, plan.match.length))
        self.committed += plan.pages
        self.picked.append((req, plan.num_tokens))
        self.tokens -= plan.num_tokens
        self.num_running += 1
        self.reserve += min(req.remaining_new_tokens, self.context_length) * self.new_token_ratio


def dedup_key(req: Req, kv_len: int) -> tuple | None:
    """The first uncached tokens of ``req`` computed from ``kv_len`` (None if few)."""
    n = DEDUP_TOKENS
    if req.seq_len - kv_len <= n:
        return None
    return kv_len, req.cache_salt, tuple(req.tokens(kv_len, kv_len + n))


def could_admit(req: Req, running: Sequence[Req], cache: KVCacheManager, *, free_rows: int,
                max_running: int, chunk_size: int, new_token_ratio: float, extra_pages: int = 0) -> bool:
    """Whether ``req`` fits next to ``running`` (with ``extra_pages`` more available than
    now): its first chunk's pages, the running requests' next tokens and their reserve, and
    a running slot and a table row free."""
    if len(running) >= max_running or free_rows == 0:
        return False
    page = cache.page_size
    cached = cache.prefix_len(req.fill_ids)
    first_chunk = min(req.seq_len - cached, chunk_size)
    need = -(-(cached + first_chunk) // page) - cached // page
    decode = sum(cache.pages_needed(r, min(max(r.extend_len, 1), chunk_size)) for r in running)
    reserve = -(-int(sum(r.remaining_new_tokens for r in running) * new_token_ratio) // page)
    return need + decode + reserve <= cache.available_pages + extra_pages
