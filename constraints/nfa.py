"""Byte-level NFA builder (Thompson construction) that regexes and JSON schemas emit into.

Every `emit_*` helper takes the state to start from and returns the state where its match ends,
so sequences chain naturally. Loops always target a fresh state, which keeps fragments that
share a start state from leaking into each other.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from .budget import CompileBudget
from .utf8 import utf8_sequences

Emit = Callable[["NFA", int], int]
CALL_BASE = 256  # symbols >= CALL_BASE are rule calls (see pushdown.py), never bytes


@dataclass(slots=True)
class NFA:
    """States are ints 0..num_states-1; edges are inclusive byte ranges (src, lo, hi, dst), kept
    as flat int32 arrays (the C subset construction reads their buffers as they are), plus
    epsilon moves."""

    budget: CompileBudget
    num_states: int = 0
    edge_src: array = field(default_factory=lambda: array("i"))
    edge_lo: array = field(default_factory=lambda: array("i"))
    edge_hi: array = field(default_factory=lambda: array("i"))
    edge_dst: array = field(default_factory=lambda: array("i"))
    eps_src: array = field(default_factory=lambda: array("i"))
    eps_dst: array = field(default_factory=lambda: array("i"))

    def new_state(self) -> int:
        self.num_states += 1
        n = self.num_states
        if n % 1024 == 0:
            self.budget.check_nfa_states(n)
            self.budget.check_time()
        return n - 1

    def new_states(self, k: int) -> int:
        """k new states (numbered on from the one returned), the budget checked as new_state does."""
        first = self.num_states
        self.num_states += k
        if (first + k) // 1024 != first // 1024:
            self.budget.check_nfa_states(self.num_states)
            self.budget.check_time()
        return first

    def add_edge(self, src: int, lo: int, hi: int, dst: int) -> None:
        self.edge_src.append(src)
        self.edge_lo.append(lo)
        self.edge_hi.append(hi)
        self.edge_dst.append(dst)

    def add_eps(self, src: int, dst: int) -> None:
        self.eps_src.append(src)
        self.eps_dst.append(dst)

    def mark(self) -> tuple[int, int, int]:
        """Where the NFA stands (states, edges, epsilon moves), for ``rollback``."""
        return self.num_states, len(self.edge_src), len(self.eps_src)

    def rollback(self, mark: tuple[int, int, int]) -> None:
        """Forget every state, edge and epsilon move added since ``mark``: the lists only
        grow, and what was added after the mark (edges out of older states too) sits past it.
        The states forgotten still count against the budget (``discard_nfa_states``)."""
        states, edges, eps = mark
        self.budget.discard_nfa_states(self.num_states - states)
        self.num_states = states
        for column in (self.edge_src, self.edge_lo, self.edge_hi, self.edge_dst):
            del column[edges:]
        del self.eps_src[eps:]
        del self.eps_dst[eps:]

    def adjacency(self) -> tuple[list[list[tuple[int, int, int]]], list[list[int]]]:
        """Per state: its edges (lo, hi, dst) and its epsilon targets (the Python walks)."""
        edges: list[list[tuple[int, int, int]]] = [[] for _ in range(self.num_states)]
        for src, lo, hi, dst in zip(self.edge_src, self.edge_lo, self.edge_hi, self.edge_dst):
            edges[src].append((lo, hi, dst))
        eps: list[list[int]] = [[] for _ in range(self.num_states)]
        for src, dst in zip(self.eps_src, self.eps_dst):
            eps[src].append(dst)
        return edges, eps


def emit_bytes(nfa: NFA, start: int, data: bytes) -> int:
    """A chain of one state per byte (the edge lists extended at once: keys and literals are
    most of a schema's edges)."""
    if not data:
        return start
    first = nfa.new_states(len(data))
    nfa.edge_src.append(start)
    nfa.edge_src.extend(range(first, first + len(data) - 1))
    nfa.edge_lo.extend(data)
    nfa.edge_hi.extend(data)
    nfa.edge_dst.extend(range(first, first + len(data)))
    return first + len(data) - 1


def emit_code_point_ranges(nfa: NFA, start: int, ranges: list[tuple[int, int]]) -> int:
    """One character from the given code-point ranges, as UTF-8 bytes."""
    end = nfa.new_state()
    for lo, hi in ranges:
        for seq in utf8_sequences(lo, hi):
            cur = start
            for i, (blo, bhi) in enumerate(seq):
                nxt = end if i == len(seq) - 1 else nfa.new_state()
                nfa.add_edge(cur, blo, bhi, nxt)
                cur = nxt
    return end


def emit_alt(nfa: NFA, start: int, branches: list[Emit]) -> int:
    end = nfa.new_state()
    for branch in branches:
        entry = nfa.new_state()
        nfa.add_eps(start, entry)
        nfa.add_eps(branch(nfa, entry), end)
    return end


def emit_seq(nfa: NFA, start: int, parts: list[Emit]) -> int:
    for part in parts:
        start = part(nfa, start)
    return start


def emit_repeat(nfa: NFA, start: int, item: Emit, lo: int, hi: int | None,
                sep: Emit | None = None) -> int:
    """item{lo,hi} (hi None = unbounded), optionally separated by `sep` between items."""
    if hi is not None and hi < lo:
        return _emit_nothing(nfa, start)
    if hi == 0:
        return start
    end = nfa.new_state()
    if lo == 0:
        nfa.add_eps(start, end)
    cur = item(nfa, start)
    for i in range(1, hi if hi is not None else max(lo, 1)):
        if i >= lo:
            nfa.add_eps(cur, end)
        cur = item(nfa, sep(nfa, cur) if sep else cur)
    nfa.add_eps(cur, end)
    if hi is None:
        # One looping copy: end -> sep -> item -> end.
        loop_entry = nfa.new_state()
        nfa.add_eps(cur, loop_entry)
        back = item(nfa, sep(nfa, loop_entry) if sep else loop_entry)
        nfa.add_eps(back, loop_entry)
        nfa.add_eps(loop_entry, end)
    return end


def emit_call(nfa: NFA, start: int, rule: int) -> int:
    """A call of pushdown rule `rule`: an edge on symbol CALL_BASE + rule (past the bytes)."""
    end = nfa.new_state()
    nfa.add_edge(start, CALL_BASE + rule, CALL_BASE + rule, end)
    return end


def _emit_nothing(nfa: NFA, start: int) -> int:
    # A fresh state with no way in from `start`: the empty language.
    return nfa.new_state()


def emit_nothing(nfa: NFA, start: int) -> int:
    return _emit_nothing(nfa, start)
