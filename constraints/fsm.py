"""Immutable byte-level DFA, built from an NFA by subset construction, and product automata."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import native
from .budget import CompileBudget
from .errors import CompileTimeoutError
from .nfa import NFA

DEAD = -1


@dataclass(frozen=True, slots=True, eq=False)
class ByteDFA:
    """trans[state, byte] -> next state or DEAD; state 0 is the start."""

    trans: np.ndarray  # [num_states, 256] int32
    accept: np.ndarray  # [num_states] bool

    @property
    def num_states(self) -> int:
        return int(self.trans.shape[0])

    def walk(self, state: int, data: bytes) -> int:
        trans = self.trans
        for b in data:
            state = int(trans[state, b])
            if state < 0:
                return DEAD
        return state

    def matches(self, data: bytes) -> bool:
        s = self.walk(0, data)
        return s >= 0 and bool(self.accept[s])

    def is_empty(self) -> bool:
        mod = native.module()
        if mod is None:
            return not bool(self.accept[_reachable(self)].any())
        # No accepting state within reach of the start (call columns count as edges).
        calls = np.ones(self.trans.shape[1] - 256, dtype=np.int64)
        return bool(native_distances(mod, self, ALL_BYTES, calls)[0] >= UNREACHABLE)


UNREACHABLE = np.iinfo(np.int64).max // 4  # no accepting state within reach (completion.py)
ALL_BYTES = np.ones(256, dtype=bool)
ALL_BYTES.flags.writeable = False


def native_distances(mod, dfa: ByteDFA, alphabet: np.ndarray, costs: np.ndarray) -> np.ndarray:
    """completion.rule_distances in C (native.c): Dijkstra backwards from the accepting
    states, a byte of ``alphabet`` costing 1 and call column 256 + k ``costs[k]``."""
    dist = np.empty(dfa.num_states, dtype=np.int64)
    mod.fewest_bytes(np.ascontiguousarray(dfa.trans, dtype=np.int32),
                     np.ascontiguousarray(dfa.accept, dtype=bool),
                     np.ascontiguousarray(alphabet, dtype=bool),
                     np.ascontiguousarray(costs, dtype=np.int64), UNREACHABLE, dist)
    return dist


def _reachable(dfa: ByteDFA) -> np.ndarray:
    """States reachable from 0."""
    return _reachable_in(_distinct_columns(dfa.trans)[0])


def _distinct_columns(trans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The table's distinct live columns [n, C], and for each column of ``trans`` the index of
    its distinct column (C for one dead in every state). Equal columns (a byte range, the
    unused call symbols) lead alike, so trimming and refinement read one of each."""
    n, width = trans.shape
    live = np.nonzero((trans >= 0).any(axis=0))[0]
    index = np.zeros(width, dtype=np.int64)
    if not len(live):
        return np.zeros((n, 0), dtype=trans.dtype), index
    t = trans[:, live]
    new_run = np.ones(len(live), dtype=bool)  # neighbouring equal columns first: cheap
    new_run[1:] = (t[:, 1:] != t[:, :-1]).any(axis=0)
    heads = t[:, new_run]
    with np.errstate(over="ignore"):
        hashes = _row_weights(n) @ (heads.astype(np.int64) + 1)
    _, first, inv = np.unique(hashes, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    cols = heads[:, first]
    if not (cols[:, inv] == heads).all():  # a hash collision: group the columns exactly
        cols, inv = np.unique(heads, axis=1, return_inverse=True)
        inv = inv.reshape(-1)
    index[:] = cols.shape[1]
    index[live] = inv[np.cumsum(new_run) - 1]
    return cols, index


@lru_cache(maxsize=64)
def _row_weights(n: int) -> np.ndarray:
    return np.random.default_rng(n).integers(1, 2**63, size=n, dtype=np.int64) | 1


def _reachable_in(cols: np.ndarray) -> np.ndarray:
    """States of a table reachable from 0 (depth-first over the distinct edges)."""
    n = cols.shape[0]
    src, c = np.nonzero(cols >= 0)
    pairs = np.unique(src.astype(np.int64) * n + cols[src, c])
    starts = np.searchsorted(pairs // n, np.arange(n + 1)).tolist()
    dst = (pairs % n).tolist()
    seen = [False] * n
    seen[0] = True
    stack = [0]
    while stack:
        q = stack.pop()
        for d in dst[starts[q]:starts[q + 1]]:
            if not seen[d]:
                seen[d] = True
                stack.append(d)
    return np.array(seen, dtype=bool)


def _closure(eps: list[list[int]], states: frozenset[int]) -> frozenset[int]:
    stack = list(states)
    seen = set(states)
    while stack:
        for t in eps[stack.pop()]:
            if t not in seen:
                seen.add(t)
                stack.append(t)
    return frozenset(seen)


def _moves(adjacent: list, members: frozenset[int]) -> list[tuple[int, int, frozenset[int]]]:
    """Partition 0..255 into ranges with the same NFA target set (non-empty ones only)."""
    edges = [e for s in members for e in adjacent[s]]
    if len(edges) <= 1:
        return [(lo, hi, frozenset([d])) for lo, hi, d in edges]
    edges.sort()
    # Usually the ranges are equal or disjoint (literal bytes, punctuation): one pass groups
    # them. Overlapping ones need the sweep.
    out = []
    lo0, hi0, d0 = edges[0]
    group = [d0]
    for lo, hi, d in edges[1:]:
        if lo == lo0 and hi == hi0:
            group.append(d)
            continue
        if lo <= hi0:
            return _swept_moves(edges)
        out.append((lo0, hi0, frozenset(group)))
        lo0, hi0, group = lo, hi, [d]
    out.append((lo0, hi0, frozenset(group)))
    return out


def _swept_moves(edges: list[tuple[int, int, int]]) -> list[tuple[int, int, frozenset[int]]]:
    # A sweep over the range ends: the targets live between two consecutive cuts.
    changes: dict[int, list[tuple[int, int]]] = {}
    for lo, hi, d in edges:
        changes.setdefault(lo, []).append((d, 1))
        changes.setdefault(hi + 1, []).append((d, -1))
    cuts = sorted(changes)
    live: dict[int, int] = {}
    out = []
    for lo, nxt in zip(cuts, cuts[1:]):
        for d, step in changes[lo]:
            left = live.get(d, 0) + step
            if left:
                live[d] = left
            else:
                del live[d]
        if live:
            out.append((lo, nxt - 1, frozenset(live)))
    return out


def _absorbed(closed: frozenset[int], eps: list[list[int]], absorbing: frozenset[int]) -> frozenset[int]:
    hit = closed & absorbing
    return _closure(eps, frozenset([min(hit)])) if hit else closed


def determinize(nfa: NFA, start: int, final: int, budget: CompileBudget,
                return_members: bool = False, width: int = 256, absorbing: frozenset[int] = frozenset()):
    """Subset construction; raises GrammarTooComplexError / CompileTimeoutError past the budget.

    `width` > 256 keeps the call symbols of a pushdown rule as extra columns. ``absorbing``:
    NFA states from which every text is accepted (a search pattern's match, padded with any
    text after it); a subset holding one accepts every text whatever else it holds, so it is
    replaced by that state's closure alone (an unanchored search of n looping alternatives
    otherwise keeps up to 2**n subsets of the loops it is still in).
    """
    mod = native.module()
    if mod is not None and not return_members:
        return _native_determinize(mod, nfa, start, final, budget, width, absorbing)
    edges, eps = nfa.adjacency()
    closures: dict[frozenset[int], frozenset[int]] = {}
    first = _closure(eps, frozenset([start]))
    ids = {first: 0}
    order = [first]
    runs: list[tuple[int, int, int, int]] = []  # (state, lo, hi, target)
    for s, members in enumerate(order):  # grows while it is walked
        for lo, hi, targets in _moves(edges, members):
            closed = closures.get(targets)
            if closed is None:
                closed = closures[targets] = _absorbed(_closure(eps, targets), eps, absorbing)
            d = ids.get(closed)
            if d is None:
                d = ids[closed] = len(order)
                order.append(closed)
                budget.check_dfa_states(len(order))
            runs.append((s, lo, hi, d))
        if s % 64 == 63:
            budget.check_time()
    trans = _fill_runs(len(order), width, runs)
    accept = np.array([final in m for m in order], dtype=bool)
    if return_members:
        return ByteDFA(trans, accept), order
    return ByteDFA(trans, accept)


def _native_determinize(mod, nfa: NFA, start: int, final: int, budget: CompileBudget, width: int,
                        absorbing: frozenset[int]) -> ByteDFA:
    """The subset construction in C (native.c): the same states in the same order."""
    absorb = np.zeros(nfa.num_states, dtype=bool)
    absorb[list(absorbing)] = True
    arrays = (nfa.edge_src, nfa.edge_lo, nfa.edge_hi, nfa.edge_dst, nfa.eps_src, nfa.eps_dst)
    return _built(mod.determinize(nfa.num_states, start, final, *arrays, absorb, width, budget.max_states,
                                  max(budget.deadline - time.monotonic(), 0.0)), width, budget)


def _built(found, width: int, budget: CompileBudget) -> ByteDFA:
    """A C construction's (trans bytes, accept bytes) as a DFA, or its budget error: -2 past
    max_states, -3 past the deadline."""
    if isinstance(found, int):
        if found == -2:
            budget.check_dfa_states(budget.max_states + 1)
        budget.check_time()
        raise CompileTimeoutError(f"constraint compilation exceeded {budget.timeout_s:.1f} s")
    trans, accept = found
    return ByteDFA(np.frombuffer(trans, dtype=np.int32).reshape(len(accept), width),
                   np.frombuffer(accept, dtype=bool))


def _fill_runs(n: int, width: int, runs: list[tuple[int, int, int, int]]) -> np.ndarray:
    """[n, width] table with trans[s, lo:hi + 1] = d for each run, DEAD elsewhere."""
    trans = np.full(n * width, DEAD, dtype=np.int32)
    if runs:
        s, lo, hi, d = np.array(runs, dtype=np.int64).T
        sizes = hi - lo + 1
        first = s * width + lo  # each run's first cell, then consecutive cells
        offsets = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        trans[np.repeat(first, sizes) + offsets] = np.repeat(d, sizes)
    return trans.reshape(n, width)


def product(a: ByteDFA, b: ByteDFA, mode: str, budget: CompileBudget) -> ByteDFA:
    """Product automaton: mode 'and' = intersection, 'diff' = L(a) minus L(b)."""
    mod = native.module()
    if mod is not None:
        return _native_product(mod, a, b, mode, budget)
    ids = {(0, 0): 0}
    order = [(0, 0)]
    rows = []
    while len(rows) < len(order):
        sa, sb = order[len(rows)]
        ta = a.trans[sa]
        tb = b.trans[sb] if sb >= 0 else np.full(256, DEAD, dtype=np.int32)
        row = np.full(256, DEAD, dtype=np.int32)
        live = (ta >= 0) & (tb >= 0) if mode == "and" else ta >= 0
        # Few distinct successor pairs per row: look each up once, not once per byte.
        pairs = ta[live].astype(np.int64) * (b.num_states + 1) + (tb[live].astype(np.int64) + 1)
        uniq, inv = np.unique(pairs, return_inverse=True)
        targets = np.empty(len(uniq), dtype=np.int32)
        for u, pair in enumerate(uniq.tolist()):
            key = (pair // (b.num_states + 1), pair % (b.num_states + 1) - 1)
            if key not in ids:
                ids[key] = len(order)
                order.append(key)
                budget.check_dfa_states(len(order))
            targets[u] = ids[key]
        row[live] = targets[inv.reshape(-1)]
        rows.append(row)
        if len(rows) % 64 == 0:
            budget.check_time()
    acc_a = [bool(a.accept[x]) for x, _ in order]
    acc_b = [y >= 0 and bool(b.accept[y]) for _, y in order]
    accept = [x and (y if mode == "and" else not y) for x, y in zip(acc_a, acc_b)]
    return ByteDFA(np.stack(rows).astype(np.int32), np.array(accept, dtype=bool))


def _native_product(mod, a: ByteDFA, b: ByteDFA, mode: str, budget: CompileBudget) -> ByteDFA:
    """The product in C (native.c): the same states in the same order."""
    return _built(mod.product(np.ascontiguousarray(a.trans, dtype=np.int32), np.ascontiguousarray(a.accept, dtype=bool),
                              np.ascontiguousarray(b.trans, dtype=np.int32), np.ascontiguousarray(b.accept, dtype=bool),
                              mode == "diff", budget.max_states, max(budget.deadline - time.monotonic(), 0.0)),
                  256, budget)


def embed_dfa(nfa: NFA, start: int, dfa: ByteDFA) -> int:
    """Copy a DFA into the NFA as a fragment from `start`; returns the fragment's end state."""
    base = nfa.new_states(dfa.num_states + 1)
    end = base + dfa.num_states
    nfa.add_eps(start, base)
    src, lo, hi, dst = _dfa_runs(dfa)
    nfa.edge_src.extend([base + q for q in src])
    nfa.edge_lo.extend(lo)
    nfa.edge_hi.extend(hi)
    nfa.edge_dst.extend([base + q for q in dst])
    accepting = np.nonzero(dfa.accept)[0].tolist()
    nfa.eps_src.extend([base + q for q in accepting])
    nfa.eps_dst.extend([end] * len(accepting))
    return end


@lru_cache(maxsize=256)
def _dfa_runs(dfa: ByteDFA) -> tuple[list[int], list[int], list[int], list[int]]:
    """The table's byte runs as edges (state, lo, hi, target), state by state, ascending:
    all rows at once. Shared sub-automata (string bodies, numbers) are embedded many times,
    so this is computed once per DFA."""
    t = dfa.trans[:, :256]
    starts = np.ones(t.shape, dtype=bool)
    starts[:, 1:] = t[:, 1:] != t[:, :-1]
    src, lo = np.nonzero(starts)
    hi = np.empty_like(lo)
    hi[:-1] = lo[1:] - 1
    last = np.ones(len(src), dtype=bool)  # a row's last run ends at byte 255
    last[:-1] = src[1:] != src[:-1]
    hi[last] = 255
    dst = t[src, lo]
    live = dst >= 0
    return src[live].tolist(), lo[live].tolist(), hi[live].tolist(), dst[live].tolist()


def trim_and_minimize(dfa: ByteDFA, minimize: bool = True) -> ByteDFA:
    """Drop states that cannot reach acceptance (a token must never lead into a dead end),
    then merge equivalent states (Moore refinement) so fewer states need token masks.
    ``minimize=False`` only trims. Works on the table's distinct columns (_distinct_columns)
    and spreads the result back over all of them."""
    mod = native.module()
    if mod is not None:
        return _native_trim_and_minimize(mod, dfa, minimize)
    cols, index = _distinct_columns(dfa.trans)
    dist, keep = _trim(cols, dfa.accept)
    if keep is None:
        return ByteDFA(np.full((1, dfa.trans.shape[1]), DEAD, dtype=np.int32),
                       np.zeros(1, dtype=bool))
    if len(keep) < len(cols) or not (dist >= 0).all():  # some state goes: renumber the rest
        cols = np.where((cols >= 0) & (dist >= 0)[np.maximum(cols, 0)], cols, DEAD)
        remap = np.full(dfa.num_states + 1, DEAD, dtype=np.int64)
        remap[keep] = np.arange(len(keep))
        sub, accept, dist = remap[cols[keep]], dfa.accept[keep], dist[keep]
    else:
        sub, accept = cols.astype(np.int64), dfa.accept
    if minimize:
        sub, accept = _minimized(sub, accept, dist)
    else:
        accept = accept.copy()
    padded = np.concatenate([sub, np.full((len(sub), 1), DEAD, dtype=sub.dtype)], axis=1)
    # Row-major like every table: the mask walks read a state's row.
    return ByteDFA(padded[:, index].astype(np.int32, order="C"), accept)


def _native_trim_and_minimize(mod, dfa: ByteDFA, minimize: bool) -> ByteDFA:
    """trim_and_minimize in C (native.c): the same states, numbered the same way."""
    trans = np.ascontiguousarray(dfa.trans, dtype=np.int32)
    n = dfa.num_states
    cls_of, rep = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    out = np.empty_like(trans)  # left unwritten where every state stays (m == n)
    accept = np.ascontiguousarray(dfa.accept, dtype=bool)
    m = mod.trim_minimize(trans, accept, minimize, cls_of, rep, out)
    if m == 0:
        return ByteDFA(np.full((1, trans.shape[1]), DEAD, dtype=np.int32), np.zeros(1, dtype=bool))
    if m == n:  # every state kept as it was: the same table (tables are never written in place)
        return ByteDFA(trans, accept)
    # C wrote the new table into out's first m rows: those rows, copied (a cached grammar
    # keeps its rules: they do not hold their untrimmed size)
    return ByteDFA(out[:m].copy(), accept[rep[:m]])


def _trim(cols: np.ndarray, accept: np.ndarray) -> tuple[np.ndarray, list[int] | None]:
    """Each state's fewest steps to acceptance (-1 where none: breadth-first backwards), and
    the states both reachable from 0 and alive, ascending (None when 0 is not alive)."""
    n = cols.shape[0]
    src, c = np.nonzero(cols >= 0)
    pairs = np.unique(src.astype(np.int64) * n + cols[src, c])
    succ: list[list[int]] = [[] for _ in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    for q, d in zip((pairs // n).tolist(), (pairs % n).tolist()):
        succ[q].append(d)
        pred[d].append(q)
    dist = [-1] * n
    frontier = np.nonzero(accept)[0].tolist()
    for q in frontier:
        dist[q] = 0
    level = 0
    while frontier:
        level += 1
        nxt = []
        for d in frontier:
            for p in pred[d]:
                if dist[p] < 0:
                    dist[p] = level
                    nxt.append(p)
        frontier = nxt
    if dist[0] < 0:
        return np.array(dist, dtype=np.int64), None
    seen = [False] * n
    seen[0] = True
    stack = [0]
    while stack:
        for d in succ[stack.pop()]:
            if not seen[d] and dist[d] >= 0:
                seen[d] = True
                stack.append(d)
    return np.array(dist, dtype=np.int64), [q for q in range(n) if seen[q]]


def _minimized(sub: np.ndarray, accept: np.ndarray, dist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Moore refinement starting from the distance to acceptance (equal in equivalent states,
    and 0 exactly where a state accepts): a chain of states is told apart at once instead
    of one state per round, and the result is the same coarsest partition."""
    start = np.unique(dist, return_inverse=True)[1].astype(np.int64).reshape(-1)
    cls = _refine(sub, start, _hashed_keys)
    if not _stable(sub, start, cls):  # a hash collision merged two states: refine exactly
        cls = _refine(sub, start, _exact_keys)
    return _renumber(sub, accept, cls)


@lru_cache(maxsize=256)
def equivalent_within(dfa: ByteDFA, depth: int) -> np.ndarray:
    """Each state's representative (the smallest state of its class): states agree when
    every string of at most ``depth`` bytes is alive after them alike and accepted alike
    (``depth`` rounds of exact Moore refinement from acceptance). A leaf's token walk reads
    no further than its longest token, so states alike to that depth walk alike: a string
    of the pattern under a maxLength repeats one walk for every length far from the bound."""
    cols, _ = _distinct_columns(dfa.trans[:, :256])
    cls = dfa.accept.astype(np.int64)
    count = len(np.unique(cls))
    ext = np.full(len(cls) + 1, DEAD, dtype=np.int64)
    for _ in range(depth):
        ext[:-1] = cls
        cls, new_count = _split(cls, ext[cols])
        if new_count == count:
            break
        count = new_count
    _, first = np.unique(cls, return_index=True)
    return first[cls]


def _split(cls: np.ndarray, succ: np.ndarray) -> tuple[np.ndarray, int]:
    """One exact round of refinement: states stay together where their class and their
    successors' classes agree. Grouped by a hash of those (an int64 sort, not whole rows:
    CRYENGINE's 16,602-state enum leaf took 355 ms over 81 rounds), each group checked
    against its first member, and grouped by the rows themselves where a hash collided."""
    keys = _hashed_keys(cls, succ)
    uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    rep = first[inverse]
    if (cls[rep] == cls).all() and (succ[rep] == succ).all():
        return inverse, len(uniq)
    uniq, inverse = np.unique(_exact_keys(cls, succ), return_inverse=True)
    return inverse.reshape(-1), len(uniq)


def _refine(cols: np.ndarray, cls: np.ndarray, keys_of) -> np.ndarray:
    """Moore refinement: a state's class and its successors' classes, until no class splits."""
    count = int(cls.max()) + 1
    ext = np.full(len(cls) + 1, DEAD, dtype=np.int64)  # ext[DEAD] stays DEAD
    while True:
        ext[:-1] = cls
        uniq, new_cls = np.unique(keys_of(cls, ext[cols]), return_inverse=True)
        if len(uniq) == count:
            return cls
        cls, count = new_cls.reshape(-1), len(uniq)


_MULTIPLIERS = np.random.default_rng(0x5EED).integers(1, 2**63, size=4096, dtype=np.int64) | 1


def _hashed_keys(cls: np.ndarray, succ: np.ndarray) -> np.ndarray:
    """One int64 per state from its class and successor classes (sorting int64 keys is many
    times faster than sorting whole rows); a collision is caught by _stable."""
    if succ.shape[1] >= len(_MULTIPLIERS):  # wider than any rule table gets in practice
        return _exact_keys(cls, succ)
    mult = _MULTIPLIERS[:succ.shape[1] + 1]
    with np.errstate(over="ignore"):
        return cls * mult[0] + (succ + 1) @ mult[1:]


def _exact_keys(cls: np.ndarray, succ: np.ndarray) -> np.ndarray:
    sig = np.ascontiguousarray(np.concatenate([cls[:, None], succ], axis=1))
    return sig.view(np.dtype((np.void, sig.shape[1] * sig.itemsize))).ravel()


def _stable(cols: np.ndarray, start: np.ndarray, cls: np.ndarray) -> bool:
    """Whether every state agrees with its class's first state on acceptance and on its
    successors' classes (then ``cls`` is a stable refinement: the states are equivalent)."""
    succ = np.append(cls, DEAD)[cols]
    _, first = np.unique(cls, return_index=True)
    rep = first[cls]
    return bool((start == start[rep]).all() and (succ == succ[rep]).all())


def _renumber(sub: np.ndarray, accept: np.ndarray, cls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # Classes renumbered in first-appearance order so the start state stays 0.
    _, first = np.unique(cls, return_index=True)
    order = np.argsort(first)
    new_id = np.empty_like(order)
    new_id[order] = np.arange(len(order))
    cls = new_id[cls]
    reps = first[order]
    return np.append(cls, DEAD)[sub[reps]], accept[reps].copy()
