"""trim_and_minimize and determinize on random tables, against plain reference definitions:
the same language, no dead or duplicate states, row-major int32 tables (the mask walks
read rows)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from constraints.budget import CompileBudget
from constraints.fsm import DEAD, ByteDFA, determinize, equivalent_within, trim_and_minimize
from constraints.nfa import CALL_BASE, NFA

SYMBOLS = (ord("a"), ord("b"), ord("c"), CALL_BASE + 1)  # three bytes and one call column


def _random_dfa(seed: int, n: int) -> ByteDFA:
    rng = np.random.default_rng(seed)
    trans = np.full((n, CALL_BASE + 2), DEAD, dtype=np.int32)
    for s in SYMBOLS:
        live = rng.random(n) < 0.6
        trans[live, s] = rng.integers(0, n, int(live.sum()))
    trans[:, ord("b") + 1:ord("b") + 9] = trans[:, [ord("b")]]  # a byte range: equal columns
    return ByteDFA(trans, rng.random(n) < 0.25)


def _accepts(dfa: ByteDFA, word: tuple[int, ...]) -> bool:
    state = 0
    for s in word:
        state = int(dfa.trans[state, s])
        if state < 0:
            return False
    return bool(dfa.accept[state])


def _words(length: int):
    for k in range(length + 1):
        yield from itertools.product(SYMBOLS, repeat=k)


def _reference_classes(dfa: ByteDFA) -> int:
    """Equivalence classes of the states reachable from 0 that reach acceptance, by
    textbook Moore rounds."""
    n = dfa.num_states
    alive = dfa.accept.copy()
    for _ in range(n):
        alive = alive | np.array([any(t >= 0 and alive[t] for t in dfa.trans[q]) for q in range(n)])
    seen, todo = {0}, [0]
    while todo:
        for t in dfa.trans[todo.pop()].tolist():
            if t >= 0 and alive[t] and t not in seen:
                seen.add(t)
                todo.append(t)
    cls = {q: int(dfa.accept[q]) for q in seen if alive[q]}
    while True:
        sig = {q: (cls[q], *(cls.get(int(t), -1) for t in dfa.trans[q])) for q in cls}
        ids = {s: i for i, s in enumerate(sorted(set(sig.values())))}
        new = {q: ids[sig[q]] for q in cls}
        if len(set(new.values())) == len(set(cls.values())):
            return len(set(new.values()))
        cls = new


@pytest.mark.parametrize("seed", range(12))
def test_minimized_tables_keep_the_language_and_merge_every_equivalent_state(seed):
    dfa = _random_dfa(seed, n=8 + seed * 3)
    out = trim_and_minimize(dfa)
    assert out.trans.dtype == np.int32 and out.trans.flags["C_CONTIGUOUS"]
    assert out.trans.shape[1] == dfa.trans.shape[1]
    for word in _words(5):
        assert _accepts(out, word) == _accepts(dfa, word), word
    if out.accept.any():  # the empty language stays one dead state
        assert out.num_states == _reference_classes(dfa)
    trimmed = trim_and_minimize(dfa, minimize=False)
    assert trimmed.trans.flags["C_CONTIGUOUS"]
    assert all(_accepts(trimmed, w) == _accepts(dfa, w) for w in _words(4))


def _trace(dfa: ByteDFA, state: int, word: tuple[int, ...]) -> tuple:
    """Alive and accepting after each prefix of ``word`` (what a token walk reads)."""
    out = []
    for s in word:
        state = int(dfa.trans[state, s]) if state >= 0 else DEAD
        out.append(state >= 0 and bool(dfa.accept[state]) if state >= 0 else None)
    return tuple(out)


@pytest.mark.parametrize("collide", [False, True])
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("depth", [1, 2, 4])
def test_states_alike_to_a_depth_share_a_representative_and_no_others_do(seed, depth, collide, monkeypatch):
    """Exact, also where every hashed key collides (each round then groups by whole rows)."""
    import constraints.fsm as fsm

    if collide:
        monkeypatch.setattr(fsm, "_hashed_keys", lambda cls, succ: np.zeros(len(cls), dtype=np.int64))
    dfa = _random_dfa(seed, n=10 + seed * 4)
    reps = equivalent_within.__wrapped__(dfa, depth)
    byte_words = [w for w in _words(depth) if all(s < 256 for s in w)]

    def signature(q: int) -> tuple:
        return (bool(dfa.accept[q]), *(_trace(dfa, q, w) for w in byte_words))

    sigs = [signature(q) for q in range(dfa.num_states)]
    for q in range(dfa.num_states):
        assert reps[q] == min(p for p in range(dfa.num_states) if sigs[p] == sigs[q]), q


def test_a_long_chain_minimizes_to_its_distinct_states():
    # n copies of the same chain from a branching start: each position is one class.
    n, copies = 40, 3
    trans = np.full((1 + copies * n + 1, 256), DEAD, dtype=np.int32)
    end = copies * n + 1
    for c in range(copies):
        trans[0, ord("x") + c] = 1 + c * n
        for i in range(n):
            q = 1 + c * n + i
            trans[q, ord("a")] = q + 1 if i < n - 1 else end
    accept = np.zeros(len(trans), dtype=bool)
    accept[end] = True
    out = trim_and_minimize(ByteDFA(trans, accept))
    assert out.num_states == 1 + n + 1
    assert out.matches(b"y" + b"a" * n) and not out.matches(b"y" + b"a" * (n - 1))


def test_determinize_overlapping_and_disjoint_ranges():
    nfa = NFA(CompileBudget())
    start, mid, end = nfa.new_state(), nfa.new_state(), nfa.new_state()
    nfa.add_edge(start, ord("a"), ord("z"), mid)  # overlaps the next one
    nfa.add_edge(start, ord("m"), ord("m"), end)
    nfa.add_edge(mid, ord("0"), ord("0"), end)
    nfa.add_edge(mid, ord("1"), ord("1"), end)  # disjoint from the one before
    dfa = determinize(nfa, start, end, CompileBudget())
    assert dfa.trans.flags["C_CONTIGUOUS"]
    accepted = {bytes([a, b]) for a in range(256) for b in range(256) if dfa.matches(bytes([a, b]))}
    assert accepted == {bytes([a, b]) for a in range(ord("a"), ord("z") + 1) for b in b"01"}
    assert dfa.matches(b"m") and not dfa.matches(b"a") and not dfa.matches(b"m2")


@pytest.mark.parametrize("seed", range(6))
def test_an_embedded_dfa_keeps_its_language(seed):
    """embed_dfa copies a table's byte runs (ranges of one target, split where the target
    changes) into an NFA fragment; determinized again it accepts the same words. A run cut
    one byte short, or an accepting state without its way to the fragment's end, fails."""
    from constraints.fsm import embed_dfa

    dfa = _random_dfa(seed, 12)
    accept = dfa.accept.copy()
    accept[max(dfa.trans[0, list(b"abc")])] = True  # some one-byte word is accepted
    dfa = ByteDFA(np.ascontiguousarray(dfa.trans[:, :CALL_BASE]), accept)
    nfa = NFA(CompileBudget())
    start = nfa.new_state()
    end = embed_dfa(nfa, nfa.new_state() if seed % 2 else start, dfa)
    if seed % 2:
        nfa.add_eps(start, 1)
    again = determinize(nfa, start, end, CompileBudget())
    byte_symbols = [s for s in SYMBOLS if s < CALL_BASE] + [ord("b") + 4, ord("b") + 9]
    accepted = 0
    for k in range(5):
        for word in itertools.product(byte_symbols, repeat=k):
            assert _accepts(again, word) == _accepts(dfa, word), word
            accepted += _accepts(dfa, word)
    assert accepted > 0
