"""Fewest bytes from each grammar position to the end of its rule, over an alphabet.

The closing search (closing.py) looks for a shortest byte string from a state to an accepting
one. Over a recursive transition network that length is a sum: the fewest bytes that finish
the current rule from its position, then those that finish each caller from the return state
on the stack. Each rule's column is computed once, backwards from its accepting states
(Dijkstra: a byte costs 1, a call costs the callee's fewest bytes), so a state's distance is
a handful of lookups instead of a breadth-first search over configurations. Leaves (no calls)
are shared between grammars: their distances are cached per (leaf DFA, alphabet).

The value is exact for the grammar; a pushdown state can only be further away (configurations
dropped by the ambiguity cap), so callers verify it by walking a way of that length.
"""

from __future__ import annotations

import heapq

import numpy as np

from . import native
from .fsm import UNREACHABLE, ByteDFA, native_distances
from .nfa import CALL_BASE


def leaf_distances(dfa: ByteDFA, alphabet: np.ndarray) -> np.ndarray:
    """[states] fewest bytes of ``alphabet`` ([256] bool) from each state to an accepting one
    (UNREACHABLE if none)."""
    mod = native.module()
    if mod is not None:
        return native_distances(mod, dfa, alphabet, _NO_COSTS)
    src, dst = _byte_edges(dfa.trans, alphabet)
    return backward_distances(dfa.num_states, src, dst, np.ones(len(src), dtype=np.int64), dfa.accept)


def rule_distances(dfa: ByteDFA, alphabet: np.ndarray, callee_costs: np.ndarray) -> np.ndarray:
    """Like leaf_distances for a rule with calls: column CALL_BASE + k costs
    ``callee_costs[k]`` (the fewest bytes rule k matches; UNREACHABLE = not yet known)."""
    mod = native.module()
    if mod is not None:
        return native_distances(mod, dfa, alphabet, callee_costs)
    src, dst = _byte_edges(dfa.trans, alphabet)
    weight = np.ones(len(src), dtype=np.int64)
    calls = dfa.trans[:, CALL_BASE:CALL_BASE + len(callee_costs)]
    csrc, ck = np.nonzero(calls >= 0)
    cw = callee_costs[ck]
    ok = cw < UNREACHABLE
    src = np.concatenate([src, csrc[ok]])
    dst = np.concatenate([dst, calls[csrc[ok], ck[ok]].astype(np.int64)])
    weight = np.concatenate([weight, cw[ok]])
    return backward_distances(dfa.num_states, src, dst, weight, dfa.accept)


_NO_COSTS = np.zeros(0, dtype=np.int64)


_HEAP_MAX_EDGES = 50_000  # below this, a plain heap is faster than array steps per level


def backward_distances(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray,
                       accept: np.ndarray) -> np.ndarray:
    """Dijkstra backwards from the accepting states over edges src -> dst of non-negative
    integer weights (a zero-weight edge settles its source in the level it is met at): with
    a heap for small graphs; for large ones one distance level at a time (Dial's buckets),
    each level one array step over the edges into the states it settles."""
    if len(src) <= _HEAP_MAX_EDGES:
        return _heap_distances(n, src, dst, weight, accept)
    order = np.argsort(dst, kind="stable")
    src, weight = src[order], weight[order]
    starts = np.searchsorted(dst[order], np.arange(n + 1))
    dist = np.full(n, UNREACHABLE, dtype=np.int64)
    settle = np.nonzero(accept)[0]
    dist[settle] = 0
    buckets: dict[int, list[np.ndarray]] = {0: [settle]}
    levels = [0]
    while levels:
        level = heapq.heappop(levels)
        nodes = np.unique(np.concatenate(buckets.pop(level)))
        nodes = nodes[dist[nodes] == level]
        lo = starts[nodes]
        sizes = starts[nodes + 1] - lo
        if not len(nodes) or not sizes.any():
            continue
        idx = np.arange(int(sizes.sum())) + np.repeat(lo - (np.cumsum(sizes) - sizes), sizes)
        pred, cand = src[idx], level + weight[idx]
        better = cand < dist[pred]
        pred, cand = pred[better], cand[better]
        if not len(pred):
            continue
        np.minimum.at(dist, pred, cand)
        for c in np.unique(cand).tolist():
            if c not in buckets:
                buckets[c] = []
                heapq.heappush(levels, c)
            buckets[c].append(pred[cand == c])
    return dist


def _heap_distances(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray,
                    accept: np.ndarray) -> np.ndarray:
    order = np.argsort(dst, kind="stable")
    preds, costs = src[order].tolist(), weight[order].tolist()
    starts = np.searchsorted(dst[order], np.arange(n + 1)).tolist()
    dist = [UNREACHABLE] * n
    heap = [(0, q) for q in np.nonzero(accept)[0].tolist()]
    for _, q in heap:
        dist[q] = 0
    while heap:
        d, q = heapq.heappop(heap)
        if d > dist[q]:
            continue
        for i in range(starts[q], starts[q + 1]):
            p, c = preds[i], d + costs[i]
            if c < dist[p]:
                dist[p] = c
                heapq.heappush(heap, (c, p))
    return np.array(dist, dtype=np.int64)


def _byte_edges(trans: np.ndarray, alphabet: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (source, target) pairs over the alphabet's byte columns."""
    n = trans.shape[0]
    sub = np.where(alphabet, trans[:, :256], -1)
    # Rows run in long stretches of one target: only a stretch's first byte can be new.
    starts = np.ones(sub.shape, dtype=bool)
    starts[:, 1:] = sub[:, 1:] != sub[:, :-1]
    src, col = np.nonzero(starts & (sub >= 0))
    pairs = np.unique(src.astype(np.int64) * n + sub[src, col].astype(np.int64))
    return pairs // n, pairs % n


class GrammarDistances:
    """Fewest bytes to finish from every global state of a pushdown grammar's table."""

    def __init__(self, rules: tuple[ByteDFA, ...], leaf: list[bool], min_chars: list[int],
                 alphabet: np.ndarray, leaf_cache: dict, callees: dict[int, list[int]] | None = None):
        """rules[0] is the main rule, rules[1 + k] rule k (columns CALL_BASE + k call it);
        ``leaf[k]``: rule k is a shared leaf without calls (its distances come from
        ``leaf_cache``, keyed by (dfa, alphabet bytes), shared by the tokenizer's grammars);
        ``min_chars[k]``: characters a counted leaf needs beyond its DFA's shortest string
        (each at least a byte; the caller adds what is still needed inside it); ``callees``:
        rule -> the rules it calls, where the caller knows them (else read off the tables)."""
        key = alphabet.tobytes()
        cols: list[np.ndarray | None] = [None] * len(rules)
        for k, d in enumerate(rules):
            if leaf[k]:
                hit = leaf_cache.get((d, key))
                if hit is None:
                    hit = leaf_distances(d, alphabet)
                    if len(leaf_cache) >= _LEAF_CACHE_MAX:
                        leaf_cache.clear()
                    leaf_cache[(d, key)] = hit
                cols[k] = hit
            elif d.trans.shape[1] <= CALL_BASE:
                cols[k] = leaf_distances(d, alphabet)
        costs = np.array([UNREACHABLE if c is None or c[0] >= UNREACHABLE else int(c[0]) + n
                          for c, n in zip(cols, min_chars)], dtype=np.int64)
        callers: dict[int, list[int]] = {}
        for k, d in enumerate(rules):
            if cols[k] is None:
                called = (callees.get(k, ()) if callees is not None else
                          [1 + c for c in np.nonzero((d.trans[:, CALL_BASE:] >= 0).any(axis=0))[0].tolist()])
                for c in called:
                    callers.setdefault(c, []).append(k)
        # Callees come after their callers: the reversed order meets them first, and a rule
        # is done again only when a callee's cost drops later (recursion).
        todo = [k for k in range(len(rules)) if cols[k] is None][::-1]
        queued = set(todo)
        while todo:
            k = todo.pop(0)
            queued.discard(k)
            col = cols[k] = rule_distances(rules[k], alphabet, costs[1:])
            if int(col[0]) != costs[k]:
                costs[k] = int(col[0])
                for c in callers.get(k, ()):
                    if c not in queued:
                        queued.add(c)
                        todo.append(c)
        self.dist = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
        # The same, read one position at a time: a tuple, not a list, so the garbage
        # collector walks it once, not at every collection (see pushdown._int_table).
        self.dist_of = tuple(self.dist.tolist())
        self._stack_cost: dict[tuple[int, ...], int] = {(): 0}
        self.moves: dict = {}  # (position, counting) -> the next step toward the end (pushdown.py)
        self.steps: np.ndarray | None = None  # the same for native.c's descent: [2 S], -2 unknown
        self.fewest: dict = {}  # state -> (its fewest bytes to finish, a config needing them): pushdown
        self.segments: dict = {}  # return position -> its frame's way to the end (pushdown.py)
        # (position, main frame) -> the way from there to its frame's end (pushdown.py)
        self.frame_ways: dict = {}
        self.most: int | None | bool = False  # pushdown.max_bytes_to_accept, once computed

    def stack_cost(self, stack: tuple[int, ...]) -> int:
        """Bytes to finish every caller on ``stack`` (count frames, negative, cost nothing)."""
        out = self._stack_cost.get(stack)
        if out is None:
            top = stack[-1]
            out = self.stack_cost(stack[:-1]) + (int(self.dist[top]) if top >= 0 else 0)
            self._stack_cost[stack] = out
        return out


_LEAF_CACHE_MAX = 4096
