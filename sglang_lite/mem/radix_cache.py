"""RadixAttention's prefix cache: a radix tree over token ids whose nodes own KV pages.

Mechanism only. The tree matches, inserts, locks and evicts when told to; the scheduler
decides when to evict, what to lock and in which order to admit requests.

Invariants (``check_invariants`` verifies them; the unit tests call it after every step):

- Every non-root node holds ``len(key) > 0`` tokens, a multiple of ``page_size``, and as many
  slots in ``value``; each page-sized run of ``value`` is one whole page
  (``p*page_size .. p*page_size+page_size-1``). So a node boundary is a page boundary.
- A node's children are keyed by their first page of tokens (a tuple), so no two children
  share a first page and a key is compared page by page.
- Every page the tree holds is owned by exactly one node; it returns to the allocator only
  through ``evict`` or ``reset``.
- ``node.lock_ref`` counts the locks on paths through the node: ``inc_lock_ref(n)`` adds one on
  every node of root..n. A node's count is never below the sum of its children's and never
  negative. Only unlocked leaves are evicted.
- ``evictable_size`` (tokens in unlocked nodes) + ``protected_size`` (tokens in locked nodes)
  == ``total_size`` (tokens in the tree).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from sglang_lite.mem.kv_pool import PageAllocator

_EMPTY_SLOTS = torch.empty(0, dtype=torch.int64)


@dataclass(slots=True, eq=False)
class TreeNode:
    """One edge of the radix tree: ``key`` token ids whose KV lives in ``value`` slots."""

    key: tuple[int, ...]
    value: torch.Tensor  # [len(key)] int64 slots on CPU
    parent: TreeNode | None
    children: dict[tuple[int, ...], TreeNode] = field(default_factory=dict)
    lock_ref: int = 0
    last_access: int = 0
    node_id: int = 0  # deterministic tie-break for equal access times

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def __repr__(self) -> str:
        return f"TreeNode(id={self.node_id}, len={len(self.key)}, lock_ref={self.lock_ref})"


@dataclass(slots=True)
class MatchResult:
    """The longest cached page-aligned prefix: its slots and the node where it ends."""

    slots: torch.Tensor  # [prefix_len] int64 on CPU
    last_node: TreeNode

    @property
    def prefix_len(self) -> int:
        return self.slots.numel()


class RadixCache:
    """A radix tree of token ids whose nodes own whole KV pages of ``allocator``.

    Mutating calls: ``match_prefix`` (may split a node; bumps LRU times on the path),
    ``insert``, ``inc_lock_ref`` / ``dec_lock_ref``, ``evict``, ``reset``.
    """

    def __init__(self, allocator: PageAllocator, page_size: int):
        if page_size < 1 or page_size != allocator.page_size:
            raise ValueError(
                f"page_size: {page_size} must be >= 1 and equal the allocator's ({allocator.page_size})"
            )
        self.allocator = allocator
        self.page_size = page_size
        self.evicted_tokens = 0  # cumulative stat; survives reset
        self._clock = itertools.count(1)
        self._ids = itertools.count(1)
        self._init_root()

    def _init_root(self) -> None:
        # The root holds no tokens; it is never locked, split or evicted.
        self.root = TreeNode(key=(), value=_EMPTY_SLOTS, parent=None, node_id=0)
        self.evictable_size = 0
        self.protected_size = 0

    @property
    def total_size(self) -> int:
        return self.evictable_size + self.protected_size

    # ---- lookup and insertion -------------------------------------------------------------

    def match_prefix(self, token_ids: list[int]) -> MatchResult:
        """Longest cached prefix of ``token_ids``, truncated to a multiple of ``page_size``.

        Splits a node when the match ends inside it, so ``last_node`` ends exactly at the
        match. Returns the root and no slots when nothing matches. Does not lock anything.
        """
        ps = self.page_size
        n = len(token_ids) - len(token_ids) % ps
        key = tuple(token_ids[:n])
        now = next(self._clock)
        node, pos, parts = self.root, 0, []
        while pos < n:
            child = node.children.get(key[pos : pos + ps])
            if child is None:
                break
            common = self._common_len(child.key, key, pos)
            if common < len(child.key):
                child = self._split(child, common)
            child.last_access = now  # after the split: the unmatched tail keeps its age
            parts.append(child.value)
            node, pos = child, pos + common
        slots = torch.cat(parts) if parts else _EMPTY_SLOTS
        return MatchResult(slots=slots, last_node=node)

    def insert(self, token_ids: list[int], slots: torch.Tensor) -> int:
        """Cache ``token_ids`` whose KV lives in ``slots``; return how many leading tokens
        were already cached.

        ``len(token_ids)`` must be a multiple of ``page_size`` (the caller truncates) and
        ``slots`` whole pages. The tree keeps its own pages for the already-present range;
        the caller frees its pages in that range that are not the tree's (those it did not
        get from ``match_prefix``). Pages past that range become owned by the tree.
        """
        key = tuple(token_ids)
        slots = self._check_insert_args(key, slots)
        ps, n = self.page_size, len(key)
        now = next(self._clock)
        node, pos = self.root, 0
        while pos < n:
            child = node.children.get(key[pos : pos + ps])
            if child is None:
                self._add_leaf(node, key[pos:], slots[pos:], now)
                return pos
            common = self._common_len(child.key, key, pos)
            if common < len(child.key):
                child = self._split(child, common)
            child.last_access = now
            node, pos = child, pos + common
        return n

    def _check_insert_args(self, key: tuple[int, ...], slots: torch.Tensor) -> torch.Tensor:
        ps = self.page_size
        if len(key) % ps:
            raise ValueError(f"insert: {len(key)} tokens is not a multiple of page_size {ps}")
        slots = slots.to(device="cpu", dtype=torch.int64).reshape(-1)
        if slots.numel() != len(key):
            raise ValueError(f"insert: {slots.numel()} slots for {len(key)} tokens")
        pages = slots.view(-1, ps)
        whole = (pages[:, 0] % ps == 0) & (pages - pages[:, :1] == torch.arange(ps)).all(dim=1)
        if not bool(whole.all()):
            raise ValueError("insert: slots are not whole pages (p*page_size + 0..page_size-1)")
        return slots

    def _common_len(self, node_key: tuple[int, ...], key: tuple[int, ...], pos: int) -> int:
        """Length of the page-aligned common prefix of ``node_key`` and ``key[pos:]``."""
        ps, i = self.page_size, 0
        limit = min(len(node_key), len(key) - pos)
        limit -= limit % ps
        while i < limit and node_key[i : i + ps] == key[pos + i : pos + i + ps]:
            i += ps
        return i

    def _split(self, child: TreeNode, at: int) -> TreeNode:
        """Cut ``child`` at token ``at`` (a page boundary); return the new upper half.

        The upper half inherits the lock count and access time: every lock on a path through
        ``child`` also passes through it, so the sizes do not change.
        """
        parent = child.parent
        upper = TreeNode(
            key=child.key[:at],
            value=child.value[:at],
            parent=parent,
            lock_ref=child.lock_ref,
            last_access=child.last_access,
            node_id=next(self._ids),
        )
        child.key, child.value, child.parent = child.key[at:], child.value[at:], upper
        upper.children[child.key[: self.page_size]] = child
        parent.children[upper.key[: self.page_size]] = upper
        return upper

    def _add_leaf(
        self, parent: TreeNode, key: tuple[int, ...], value: torch.Tensor, now: int
    ) -> None:
        leaf = TreeNode(
            key=key, value=value.clone(), parent=parent, last_access=now, node_id=next(self._ids)
        )
        parent.children[key[: self.page_size]] = leaf
        self.evictable_size += len(key)

    # ---- locks ------------------------------------------------------------------------------

    def inc_lock_ref(self, node: TreeNode) -> None:
        """Lock the path root..``node`` so none of it can be evicted."""
        for n in self._path_to_root(node):
            if n.lock_ref == 0:
                self.evictable_size -= len(n.key)
                self.protected_size += len(n.key)
            n.lock_ref += 1

    def lock_cost(self, node: TreeNode) -> int:
        """Tokens that ``inc_lock_ref(node)`` would take out of the evictable ones (the
        unlocked nodes of the path root..``node``); changes nothing."""
        return sum(len(n.key) for n in self._path_to_root(node) if n.lock_ref == 0)

    def dec_lock_ref(self, node: TreeNode) -> None:
        """Undo one ``inc_lock_ref(node)``; raises ValueError on underflow."""
        path = self._path_to_root(node)
        if path and path[0].lock_ref <= 0:
            raise ValueError(f"dec_lock_ref: {node!r} is not locked")
        for n in path:
            n.lock_ref -= 1
            if n.lock_ref == 0:
                self.protected_size -= len(n.key)
                self.evictable_size += len(n.key)

    def _path_to_root(self, node: TreeNode) -> list[TreeNode]:
        """Nodes from ``node`` up to (excluding) the root; raises if ``node`` left the tree."""
        path = []
        while node is not self.root:
            if node.parent is None:
                raise ValueError(f"{node!r} is no longer in the tree (evicted or reset)")
            path.append(node)
            node = node.parent
        return path

    # ---- eviction ---------------------------------------------------------------------------

    def evict(self, num_pages: int) -> int:
        """Free at least ``num_pages`` pages (or every evictable one) from unlocked leaves,
        least recently used first. A parent left as an unlocked leaf becomes a candidate.
        Returns the number of pages freed (whole leaves, so possibly more than asked)."""
        heap = [(n.last_access, n.node_id, n) for n in self._iter_nodes() if self._evictable(n)]
        heapq.heapify(heap)
        freed = 0
        while freed < num_pages and heap:
            _, _, leaf = heapq.heappop(heap)
            freed += self._remove_leaf(leaf)
            parent = leaf.parent
            leaf.parent = None
            if self._evictable(parent):
                heapq.heappush(heap, (parent.last_access, parent.node_id, parent))
        return freed

    def _evictable(self, node: TreeNode) -> bool:
        return node is not self.root and node.lock_ref == 0 and node.is_leaf

    def _remove_leaf(self, leaf: TreeNode) -> int:
        pages = self._node_pages(leaf)
        del leaf.parent.children[leaf.key[: self.page_size]]
        self.allocator.free(pages)
        self.evictable_size -= len(leaf.key)
        self.evicted_tokens += len(leaf.key)
        return len(pages)

    def reset(self) -> None:
        """Drop every node and free all its pages. Only valid when nothing is locked."""
        if self.protected_size:
            raise RuntimeError(f"reset: {self.protected_size} tokens are still locked")
        pages = sorted(self.all_pages())
        for node in list(self._iter_nodes()):
            node.parent = None  # detach, so a stale inc_lock_ref raises
        self.allocator.free(pages)
        self._init_root()

    # ---- inspection -------------------------------------------------------------------------

    def _node_pages(self, node: TreeNode) -> list[int]:
        return (node.value[:: self.page_size] // self.page_size).tolist()

    def _iter_nodes(self) -> Iterator[TreeNode]:
        """Every non-root node, parents before children."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def all_pages(self) -> set[int]:
        """Every page the tree owns (for leak checks)."""
        return {p for node in self._iter_nodes() for p in self._node_pages(node)}

    def check_invariants(self) -> None:
        """Raise AssertionError naming the first broken invariant (debug and tests; O(tree))."""
        seen: set[int] = set()
        evictable = protected = 0
        for node in self._iter_nodes():
            self._check_node(node)
            pages = self._node_pages(node)
            assert seen.isdisjoint(pages), f"{node!r} shares a page with another node"
            seen.update(pages)
            if node.lock_ref:
                protected += len(node.key)
            else:
                evictable += len(node.key)
        assert (evictable, protected) == (self.evictable_size, self.protected_size), (
            f"sizes: counted {evictable}/{protected}, tracked {self.evictable_size}/{self.protected_size}"
        )
        free, usable = self.allocator.num_free_pages, self.allocator.num_usable_pages
        assert len(seen) + free <= usable, f"{len(seen)} tree + {free} free > {usable} pages"

    def _check_node(self, node: TreeNode) -> None:
        ps = self.page_size
        n = len(node.key)
        assert n > 0 and n % ps == 0, f"{node!r}: length {n} is not a positive multiple of {ps}"
        assert node.value.numel() == n, f"{node!r}: {node.value.numel()} slots for {n} tokens"
        assert node.parent.children.get(node.key[:ps]) is node, f"{node!r}: wrong child key"
        assert node.lock_ref >= 0, f"{node!r}: negative lock_ref"
        below = sum(c.lock_ref for c in node.children.values())
        assert node.lock_ref >= below, f"{node!r}: lock_ref {node.lock_ref} < children's {below}"

    def pretty_print(self) -> None:
        """Print the tree, one node a line: length, lock count, first tokens."""
        print(
            f"RadixCache: total={self.total_size} evictable={self.evictable_size} "
            f"protected={self.protected_size} tokens"
        )
        stack = [(c, 1) for c in reversed(self.root.children.values())]
        while stack:
            node, depth = stack.pop()
            head = list(node.key[:8])
            more = "..." if len(node.key) > 8 else ""
            print(f"{'  ' * depth}[{len(node.key)}] lock={node.lock_ref} {head}{more}")
            stack.extend((c, depth + 1) for c in reversed(node.children.values()))
