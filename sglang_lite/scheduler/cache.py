"""KV ownership per request: which pages back its positions, what the prefix cache
serves, and where its pages go when it finishes, is retracted or aborted.

The pool and the radix tree are mechanisms; this manager is the policy that drives them
for the scheduler. Without a radix tree every request owns all of its pages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from sglang_lite.mem.kv_pool import KVPool
from sglang_lite.mem.req_to_token import ReqToTokenPool
from sglang_lite.request import KVHold, Req


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """What admitting a request would reuse, found without taking anything: its cached
    prefix (page-aligned), the node that ends it, and what locking that node would cost."""

    length: int  # tokens served from the prefix cache
    node: Any = None  # the radix node ending the match (None: no match)
    slots: torch.Tensor | None = None  # [length] int64
    lock_pages: int = 0  # pages locking ``node`` takes out of the evictable ones


_NO_MATCH = PrefixMatch(0)


class KVCacheManager:
    def __init__(self, kv_pool: KVPool, req_pool: ReqToTokenPool, radix=None):
        self.kv_pool = kv_pool
        self.req_pool = req_pool
        self.allocator = kv_pool.allocator
        self.page_size = kv_pool.page_size
        self.radix = radix

    # ---- capacity -------------------------------------------------------------------
    @property
    def available_pages(self) -> int:
        """Pages obtainable now: free ones plus unlocked cached ones."""
        evictable = self.radix.evictable_size // self.page_size if self.radix else 0
        return self.allocator.num_free_pages + evictable

    def pages_needed(self, req: Req, num_tokens: int) -> int:
        """New pages ``req`` needs to hold positions up to kv_len + num_tokens."""
        total = -(-(req.kv_len + num_tokens) // self.page_size)
        return max(total - len(req.kv.pages), 0)

    def prefix_len(self, token_ids: list[int]) -> int:
        """Length of the cached prefix of ``token_ids`` (no locking)."""
        if self.radix is None:
            return 0
        return len(self.radix.match_prefix(token_ids).slots)

    # ---- admission: plan, then commit ------------------------------------------------------
    def match(self, req: Req) -> PrefixMatch:
        """The cached prefix ``req`` would reuse if admitted now; locks and writes nothing."""
        if self.radix is None:
            return _NO_MATCH
        m = self.radix.match_prefix(req.cache_ids[: req.cacheable_prefix_limit])
        if not m.prefix_len:
            return _NO_MATCH
        return PrefixMatch(m.prefix_len, m.last_node, m.slots, self.radix.lock_cost(m.last_node) // self.page_size)

    def pages_to_admit(self, match: PrefixMatch, num_tokens: int) -> int:
        """New pages a request admitted with ``match`` needs for its first ``num_tokens``."""
        return max(-(-(match.length + num_tokens) // self.page_size) - match.length // self.page_size, 0)

    def available_after(self, match: PrefixMatch) -> int:
        """``available_pages`` once ``match``'s prefix is locked."""
        return self.available_pages - match.lock_pages

    def admit(self, req: Req, match: PrefixMatch | None = None) -> None:
        """Give ``req`` a req_to_token row and its cached prefix (``match``, found now if not
        given): the one commit of an admission."""
        match = self.match(req) if match is None else match
        kv = req.kv = KVHold(row=self.req_pool.allocate())
        req.kv_len = 0
        if match.length:
            self.radix.inc_lock_ref(match.node)
            kv.node = match.node
            kv.pages = self._pages_of(match.slots)
            kv.num_cached_pages = len(kv.pages)
            req.kv_len = match.length
            self.req_pool.write(kv.row, 0, match.slots)

    def allocate_batch(self, reqs: list[Req], lens: list[int]) -> list[torch.Tensor]:
        """Slots [lens[i]] for positions kv_len .. kv_len+lens[i] of each request, pages
        allocated (evicting cached pages if needed), with one req_to_token write for all."""
        ps = self.page_size
        rows, positions, slots_all, per_req = [], [], [], []
        for req, n in zip(reqs, lens):
            need = self.pages_needed(req, n)
            pages = req.kv.pages
            if need:
                self._ensure_free(need)
                pages.extend(self.allocator.allocate(need))
            pos = range(req.kv_len, req.kv_len + n)
            slots = [pages[p // ps] * ps + p % ps for p in pos]
            rows.extend([req.kv.row] * n)
            positions.extend(pos)
            slots_all.extend(slots)
            per_req.append(torch.tensor(slots, dtype=torch.int64))
        self.req_pool.write_many(rows, positions, slots_all)
        return per_req

    def _ensure_free(self, num_pages: int) -> None:
        short = num_pages - self.allocator.num_free_pages
        if short > 0 and self.radix is not None:
            self.radix.evict(short)
        if num_pages > self.allocator.num_free_pages:
            raise MemoryError(f"KV pool: need {num_pages} pages, {self.allocator.num_free_pages} free")

    def slots_of(self, req: Req, length: int) -> torch.Tensor:
        """Slots [length] of positions 0 .. length, from the host pages: the device row of the
        request-to-token table is written, never read back (a read is a device sync)."""
        ps = self.page_size
        pages = req.kv.pages[: -(-length // ps)]
        if len(pages) * ps < length:
            raise RuntimeError(f"{req.rid}: positions < {length} are not all backed by pages")
        page_ids = torch.tensor(pages, dtype=torch.int64)
        return (page_ids[:, None] * ps + torch.arange(ps, dtype=torch.int64)).flatten()[:length]

    def cache_unfinished(self, req: Req) -> None:
        """Insert the computed, page-aligned part of a still-running request (a chunk that
        just finished) so later requests can share it; the request keeps using it, locked."""
        if self.radix is None:
            return
        kv, aligned = req.kv, req.kv_len // self.page_size * self.page_size
        if aligned <= kv.num_cached_pages * self.page_size:
            return
        tokens = req.cache_ids[:aligned]
        self._insert(req, tokens, aligned)
        m = self.radix.match_prefix(tokens)
        self.radix.inc_lock_ref(m.last_node)
        if kv.node is not None:
            self.radix.dec_lock_ref(kv.node)
        kv.node = m.last_node
        kv.pages[: aligned // self.page_size] = self._pages_of(m.slots)  # the tree's, duplicates replaced
        self.req_pool.write(kv.row, 0, m.slots)

    def release(self, req: Req) -> None:
        """Return everything ``req`` holds (finished, retracted or aborted). Computed,
        page-aligned tokens go into the prefix cache; the rest is freed."""
        if self.radix is not None and req.kv_len >= self.page_size:
            aligned = req.kv_len // self.page_size * self.page_size
            self._insert(req, req.cache_ids[:aligned], aligned)
        self.discard(req)

    def discard(self, req: Req) -> None:
        """Return what ``req`` still holds, caching nothing: the pages it owns, its lock,
        its row. Each is cleared as it is returned, so after a release that raised part way
        this frees the rest and nothing twice (the tree checks its arguments before it links
        anything, so a failed insert leaves the pages the request's)."""
        kv = req.kv
        own, kv.pages = kv.pages[kv.num_cached_pages :], []
        req.kv_len, kv.num_cached_pages = 0, 0
        self.allocator.free(own)
        node, kv.node = kv.node, None
        if self.radix is not None and node is not None:
            self.radix.dec_lock_ref(node)
        row, kv.row = kv.row, None
        if row is not None:
            self.req_pool.free(row)

    def _insert(self, req: Req, tokens: list, aligned: int) -> None:
        """Give the tree positions [0, aligned) of ``req``: from here on they are its cached
        pages. The pages we computed for a range the tree already held are duplicates and
        are freed; the caller puts the tree's pages in their place or drops the request."""
        kv = req.kv
        present = self.radix.insert(tokens, self.slots_of(req, aligned))
        dup_from, dup_to = kv.num_cached_pages, present // self.page_size
        duplicates = kv.pages[dup_from:dup_to]
        kv.num_cached_pages = aligned // self.page_size  # the tree owns those pages now
        self.allocator.free(duplicates)

    def _pages_of(self, slots: torch.Tensor) -> list[int]:
        """The pages of whole-page ``slots`` (the tree's values), in order."""
        return (slots[:: self.page_size] // self.page_size).tolist()
