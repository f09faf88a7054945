"""RadixCache: unit tests of each operation, then a stateful property test against a model."""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from sglang_lite.mem.kv_pool import PageAllocator
from sglang_lite.mem.radix_cache import RadixCache


def _make(page_size: int = 4, num_pages: int = 64) -> RadixCache:
    return RadixCache(PageAllocator(num_pages, page_size), page_size)


def _slots(pages: list[int], page_size: int) -> torch.Tensor:
    return torch.tensor(
        [p * page_size + i for p in pages for i in range(page_size)], dtype=torch.int64
    )


def _insert_fresh(cache: RadixCache, tokens: list[int]) -> tuple[int, list[int]]:
    """Insert ``tokens`` as a caller that did not match would: fresh pages for all, then free
    its duplicates. Returns (already present, pages now owned by the tree for ``tokens``)."""
    ps = cache.page_size
    pages = cache.allocator.allocate(len(tokens) // ps)
    present = cache.insert(tokens, _slots(pages, ps))
    cache.allocator.free(pages[: present // ps])
    cache.check_invariants()
    return present, pages


def _leak_check(cache: RadixCache) -> None:
    alloc = cache.allocator
    free = alloc._free
    assert len(free) == len(set(free)), "a page is on the free list twice"
    tree = cache.all_pages()
    assert tree.isdisjoint(free)
    assert tree | set(free) == set(range(1, alloc.num_pages))


# ---- match / insert -------------------------------------------------------------------------


def test_match_on_empty_tree():
    cache = _make()
    m = cache.match_prefix([1, 2, 3, 4, 5, 6, 7, 8])
    assert m.prefix_len == 0 and m.slots.dtype == torch.int64
    assert m.last_node is cache.root
    assert cache.match_prefix([]).last_node is cache.root


@pytest.mark.parametrize("page_size", [1, 4])
def test_insert_then_match_full_partial_and_mid_page(page_size):
    cache = _make(page_size)
    tokens = list(range(100, 112))  # 12 tokens: 3 pages of 4, or 12 of 1
    present, pages = _insert_fresh(cache, tokens)
    assert present == 0
    want = _slots(pages, page_size)
    assert torch.equal(cache.match_prefix(tokens).slots, want)
    assert torch.equal(cache.match_prefix(tokens + [7, 7, 7]).slots, want)  # longer query
    assert torch.equal(cache.match_prefix(tokens[:8]).slots, want[:8])  # partial, page-aligned
    # Diverging mid-page (token 6) or a query ending mid-page: truncated to the page boundary.
    assert cache.match_prefix(tokens[:6] + [0, 0]).prefix_len == 6 - 6 % page_size
    assert cache.match_prefix(tokens[:7]).prefix_len == 7 - 7 % page_size
    assert cache.match_prefix([5] + tokens).prefix_len == 0
    _leak_check(cache)


def test_match_splits_node_at_page_boundary():
    cache = _make(page_size=2)
    tokens = [1, 2, 3, 4, 5, 6, 7, 8]
    _, pages = _insert_fresh(cache, tokens)
    m = cache.match_prefix([1, 2, 3, 4, 9, 9])
    assert m.prefix_len == 4
    upper = m.last_node
    assert upper.key == (1, 2, 3, 4) and upper.parent is cache.root
    (lower,) = upper.children.values()
    assert lower.key == (5, 6, 7, 8) and lower.parent is upper
    assert upper.children == {(5, 6): lower}
    assert torch.equal(torch.cat([upper.value, lower.value]), _slots(pages, 2))
    assert cache.total_size == 8 and cache.evictable_size == 8
    cache.check_invariants()
    # The full sequence still matches across the split, ending at the lower node.
    assert cache.match_prefix(tokens).last_node is lower


def test_insert_returns_already_present_length_and_branches():
    cache = _make(page_size=2)
    assert _insert_fresh(cache, [1, 2, 3, 4, 5, 6])[0] == 0
    assert _insert_fresh(cache, [1, 2, 3, 4, 5, 6])[0] == 6  # all present: nothing new
    assert _insert_fresh(cache, [1, 2, 3, 4])[0] == 4
    assert _insert_fresh(cache, [1, 2, 3, 9, 9, 9])[0] == 2  # diverges mid-page 2
    assert _insert_fresh(cache, [1, 2, 3, 4, 5, 6, 7, 8])[0] == 6
    assert cache.total_size == 6 + 4 + 2
    root_child = cache.root.children[(1, 2)]
    assert root_child.key == (1, 2) and set(root_child.children) == {(3, 4), (3, 9)}
    _leak_check(cache)


def test_insert_keeps_existing_pages_and_caller_frees_duplicates():
    cache = _make(page_size=1, num_pages=8)
    _, first = _insert_fresh(cache, [1, 2, 3])
    _, second = _insert_fresh(cache, [1, 2, 3, 4])
    m = cache.match_prefix([1, 2, 3, 4])
    assert m.slots.tolist() == first + second[3:]
    _leak_check(cache)


def test_insert_rejects_bad_arguments():
    cache = _make(page_size=4)
    with pytest.raises(ValueError, match="multiple of page_size"):
        cache.insert([1, 2, 3], torch.arange(4, 7))
    with pytest.raises(ValueError, match="slots for"):
        cache.insert([1, 2, 3, 4], torch.arange(4, 12))
    with pytest.raises(ValueError, match="whole pages"):
        cache.insert([1, 2, 3, 4], torch.arange(5, 9))
    with pytest.raises(ValueError, match="page_size"):
        RadixCache(PageAllocator(8, 4), 2)


# ---- locks and eviction ---------------------------------------------------------------------


def test_lock_protects_path_from_eviction():
    cache = _make(page_size=2)
    _insert_fresh(cache, [1, 2, 3, 4])
    _insert_fresh(cache, [1, 2, 5, 6])
    node = cache.match_prefix([1, 2, 3, 4]).last_node
    cache.inc_lock_ref(node)
    assert (cache.protected_size, cache.evictable_size) == (4, 2)
    assert cache.evict(100) == 1  # only the unlocked branch [5, 6]
    assert cache.match_prefix([1, 2, 3, 4]).prefix_len == 4
    assert cache.match_prefix([1, 2, 5, 6]).prefix_len == 2
    cache.dec_lock_ref(node)
    assert (cache.protected_size, cache.evictable_size) == (0, 4)
    assert cache.evict(100) == 2
    assert cache.total_size == 0
    _leak_check(cache)


def test_lock_counts_nest_and_underflow_raises():
    cache = _make(page_size=1)
    _insert_fresh(cache, [1, 2, 3])
    node = cache.match_prefix([1, 2, 3]).last_node
    cache.inc_lock_ref(node)
    cache.inc_lock_ref(node)
    cache.dec_lock_ref(node)
    assert cache.evict(10) == 0 and cache.protected_size == 3
    cache.dec_lock_ref(node)
    with pytest.raises(ValueError, match="not locked"):
        cache.dec_lock_ref(node)
    assert node.lock_ref == 0 and cache.evictable_size == 3
    cache.check_invariants()


def test_split_of_locked_node_keeps_lock_on_both_halves():
    cache = _make(page_size=2)
    _insert_fresh(cache, [1, 2, 3, 4, 5, 6])
    leaf = cache.match_prefix([1, 2, 3, 4, 5, 6]).last_node
    cache.inc_lock_ref(leaf)
    upper = cache.match_prefix([1, 2, 9, 9]).last_node
    assert upper.lock_ref == 1 and leaf.parent is upper
    assert cache.protected_size == 6
    cache.check_invariants()
    cache.dec_lock_ref(leaf)
    assert upper.lock_ref == 0 and cache.evictable_size == 6


def test_eviction_is_lru_over_leaves():
    cache = _make(page_size=1)
    for first in (10, 20, 30):
        _insert_fresh(cache, [first, 1, 2])
    cache.match_prefix([10, 1, 2])  # 10 is now the most recently used, 20 the least
    assert cache.evict(3) == 3
    assert cache.match_prefix([20, 1, 2]).prefix_len == 0
    assert cache.match_prefix([10, 1, 2]).prefix_len == 3
    assert cache.match_prefix([30, 1, 2]).prefix_len == 3  # now 10 is the least recent
    assert cache.evict(1) == 3  # a whole leaf, even when asked for less
    assert cache.match_prefix([10]).prefix_len == 0
    assert cache.match_prefix([30]).prefix_len == 1
    assert cache.evicted_tokens == 6
    _leak_check(cache)


def test_split_tail_keeps_its_age():
    cache = _make(page_size=1)
    _insert_fresh(cache, [1, 2, 3, 4])
    _insert_fresh(cache, [9])
    cache.match_prefix([1, 2, 7])  # splits [1..4]; only [1, 2] was used just now
    assert cache.evict(1) == 2  # the old tail [3, 4] goes before [9]
    assert cache.match_prefix([1, 2, 3, 4]).prefix_len == 2
    assert cache.match_prefix([9]).prefix_len == 1


def test_parent_becomes_evictable_after_its_children():
    cache = _make(page_size=1)
    _insert_fresh(cache, [1, 2])
    _insert_fresh(cache, [1, 2, 3])
    _insert_fresh(cache, [1, 2, 4])
    _insert_fresh(cache, [9])
    cache.match_prefix([9])  # [9] is newer than the whole [1, 2, ...] subtree
    assert cache.evict(3) == 4  # leaves [3] and [4], then their parent [1, 2] (2 pages)
    assert cache.match_prefix([1, 2, 3]).prefix_len == 0
    assert cache.match_prefix([9]).prefix_len == 1
    _leak_check(cache)


def test_stale_node_cannot_be_locked():
    cache = _make(page_size=1)
    _insert_fresh(cache, [1, 2])
    node = cache.match_prefix([1, 2]).last_node
    cache.evict(10)
    with pytest.raises(ValueError, match="no longer in the tree"):
        cache.inc_lock_ref(node)


def test_reset_frees_everything_and_refuses_while_locked():
    cache = _make(page_size=2)
    _insert_fresh(cache, [1, 2, 3, 4])
    _insert_fresh(cache, [5, 6])
    node = cache.match_prefix([5, 6]).last_node
    cache.inc_lock_ref(node)
    with pytest.raises(RuntimeError, match="locked"):
        cache.reset()
    cache.dec_lock_ref(node)
    cache.reset()
    assert cache.total_size == 0 and cache.all_pages() == set()
    assert cache.allocator.num_free_pages == cache.allocator.num_usable_pages
    assert cache.match_prefix([1, 2, 3, 4]).prefix_len == 0
    _leak_check(cache)


def test_pretty_print(capsys):
    cache = _make(page_size=1)
    _insert_fresh(cache, [1, 2, 3])
    _insert_fresh(cache, [1, 5])
    cache.pretty_print()
    out = capsys.readouterr().out
    assert "total=4" in out and "[1] lock=0 [1]" in out


# ---- stateful property test -----------------------------------------------------------------

TOKENS = st.lists(st.integers(0, 2), min_size=0, max_size=14)  # small alphabet: lots of sharing
NUM_PAGES = 25


class RadixCacheMachine(RuleBasedStateMachine):
    """Random insert / match / lock / unlock / evict / reset against a reference model.

    The model is ``ref``: every cached page-aligned prefix (a tuple of tokens) -> the page
    holding its last page of tokens. It is prefix-closed, and a lookup is the longest prefix
    of the query present in it.
    """

    @initialize(page_size=st.sampled_from([1, 2, 3]))
    def setup(self, page_size):
        self.ps = page_size
        self.cache = RadixCache(PageAllocator(NUM_PAGES, page_size), page_size)
        self.ref: dict[tuple[int, ...], int] = {}
        self.held: list = []  # (node, locked prefix) per outstanding lock

    def _ref_match(self, tokens: list[int]) -> tuple[int, list[int]]:
        n, pages = 0, []
        while n + self.ps <= len(tokens) and tuple(tokens[: n + self.ps]) in self.ref:
            n += self.ps
            pages.append(self.ref[tuple(tokens[:n])])
        return n, pages

    def _sync_ref_after_evict(self) -> None:
        owned = self.cache.all_pages()
        gone = [k for k, p in self.ref.items() if p not in owned]
        for k in gone:
            del self.ref[k]
        for _, prefix in self.held:
            assert all(prefix[:i] in self.ref for i in range(self.ps, len(prefix) + 1, self.ps))

    @rule(tokens=TOKENS, reuse_prefix=st.booleans())
    def insert(self, tokens, reuse_prefix):
        tokens = tokens[: len(tokens) - len(tokens) % self.ps]
        known, ref_pages = self._ref_match(tokens)
        own_from = 0
        if reuse_prefix:  # a caller that matched first: reuses the tree's pages, locks them
            m = self.cache.match_prefix(tokens)
            assert m.prefix_len == known
            self.cache.inc_lock_ref(m.last_node)
            own_from = known
        need = (len(tokens) - own_from) // self.ps
        short = need - self.cache.allocator.num_free_pages
        if short > 0:
            self.cache.evict(short)
            self._sync_ref_after_evict()
        if self.cache.allocator.can_allocate(need):
            self._insert_with(tokens, own_from, need)
        if reuse_prefix:
            self.cache.dec_lock_ref(m.last_node)

    def _insert_with(self, tokens, own_from, need):
        known, ref_pages = self._ref_match(tokens)
        pages = ref_pages[: own_from // self.ps] + self.cache.allocator.allocate(need)
        present = self.cache.insert(tokens, _slots(pages, self.ps))
        assert present == known
        self.cache.allocator.free(pages[own_from // self.ps : present // self.ps])
        for i in range(present, len(tokens), self.ps):
            self.ref[tuple(tokens[: i + self.ps])] = pages[i // self.ps]

    @rule(tokens=TOKENS)
    def match(self, tokens):
        known, pages = self._ref_match(tokens)
        m = self.cache.match_prefix(tokens)
        assert m.slots.tolist() == _slots(pages, self.ps).tolist()
        assert (
            m.last_node is self.cache.root or sum(len(n.key) for n in _path(m.last_node)) == known
        )

    @rule(tokens=TOKENS)
    def lock(self, tokens):
        m = self.cache.match_prefix(tokens)
        self.cache.inc_lock_ref(m.last_node)
        self.held.append((m.last_node, tuple(tokens[: m.prefix_len])))

    @rule(pick=st.integers(0, 63))
    def unlock(self, pick):
        # Always enabled (a no-op with nothing held): no filtered draws, no health-check noise.
        if self.held:
            node, _ = self.held.pop(pick % len(self.held))
            self.cache.dec_lock_ref(node)

    @rule(num_pages=st.integers(0, 8))
    def evict(self, num_pages):
        free_before = self.cache.allocator.num_free_pages
        evictable_pages = self.cache.evictable_size // self.ps
        freed = self.cache.evict(num_pages)
        assert freed >= min(num_pages, evictable_pages)
        assert self.cache.allocator.num_free_pages == free_before + freed
        n_before = len(self.ref)
        self._sync_ref_after_evict()
        assert n_before - len(self.ref) == freed
        if freed < num_pages:
            assert self.cache.evictable_size == 0

    @rule()
    def reset(self):
        # As a cache flush would: only once nothing is locked.
        for node, _ in self.held:
            self.cache.dec_lock_ref(node)
        self.held.clear()
        self.cache.reset()
        self.ref.clear()

    @invariant()
    def tree_agrees_with_model(self):
        if not hasattr(self, "cache"):
            return
        self.cache.check_invariants()
        _leak_check(self.cache)
        assert self.cache.all_pages() == set(self.ref.values())
        assert self.cache.total_size == len(self.ref) * self.ps
        direct = {}
        for node, _ in self.held:
            direct[id(node)] = direct.get(id(node), 0) + 1
        for node in self.cache._iter_nodes():
            below = sum(c.lock_ref for c in node.children.values())
            assert node.lock_ref == below + direct.get(id(node), 0)

    def teardown(self):
        if not hasattr(self, "cache"):
            return
        for node, _ in self.held:
            self.cache.dec_lock_ref(node)
        self.held.clear()
        self.cache.evict(NUM_PAGES)
        assert self.cache.total_size == 0
        assert self.cache.allocator.num_free_pages == self.cache.allocator.num_usable_pages
        _leak_check(self.cache)


def _path(node):
    while node.parent is not None:
        yield node
        node = node.parent


RadixCacheMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None
)
test_radix_cache_state_machine = RadixCacheMachine.TestCase
