"""Leaves of a pushdown grammar: terminals (string bodies, numbers, formats, keys) as shared
DFAs, a length-counted string leaf, and each leaf state's walk of the vocabulary, computed
once per tokenizer and reused by every grammar that calls the leaf."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .bitmask import pack_token_ids
from .fsm import ByteDFA
from .vocab import TokenizerInfo


@dataclass(frozen=True, slots=True)
class CountedLeaf:
    """A string leaf with minLength/maxLength kept as a count at run time: ``dfa`` is the
    unbounded quoted string, ``starts_char[q, b]`` says byte b in state q begins a character."""

    dfa: ByteDFA
    lo: int
    hi: int | None
    starts_char: np.ndarray = None  # [states, 256] bool

    @classmethod
    def of_plain_string(cls, dfa: ByteDFA, lo: int, hi: int | None) -> CountedLeaf:
        return cls(dfa, lo, hi, _char_starts(dfa))

    def __hash__(self) -> int:
        return hash((id(self.dfa), self.lo, self.hi))

    def __eq__(self, other) -> bool:
        return (isinstance(other, CountedLeaf) and other.dfa is self.dfa
                and (other.lo, other.hi) == (self.lo, self.hi))


def _char_starts(dfa: ByteDFA) -> np.ndarray:
    """In a quoted plain string ``"chars*"``, a character starts wherever the closing quote
    could come instead (between characters), on any byte but the quote."""
    quote = dfa.trans[:, ord('"')]
    between = (quote >= 0) & dfa.accept[np.maximum(quote, 0)]
    starts = between[:, None] & (dfa.trans[:, :256] >= 0)
    starts[:, ord('"')] = False
    return starts


@dataclass(frozen=True, slots=True)
class LeafWalk:
    """One leaf state's walk of the whole vocabulary, valid in every grammar using the leaf."""

    inside: np.ndarray  # packed row: tokens whose bytes all stay inside the leaf
    exit_pos: np.ndarray  # layout positions of tokens that may leave it with bytes left...
    exit_col: np.ndarray  # ...and the byte each would continue from in the caller
    inside_pos: np.ndarray  # layout positions of the tokens that stay inside...
    inside_count: np.ndarray  # ...and the characters each starts (counted leaves)...
    inside_closes: np.ndarray  # ...and whether it ends the leaf (then the minimum applies)
    exit_count: np.ndarray  # characters started before each exit
    max_inside_count: int


_LEAF_WALKS_MAX = 8192


def leaf_walk(info: TokenizerInfo, dfa: ByteDFA, q: int,
              starts_char: np.ndarray | None = None) -> LeafWalk:
    cache = info.leaf_walks
    key = (dfa, q, starts_char is not None)
    hit = cache.get(key)
    if hit is not None:
        return hit
    layout = info.layout
    pos = layout.starting_with(np.nonzero(dfa.trans[q, :256] >= 0)[0])
    cur = np.full(len(pos), q, dtype=np.int64)
    count = np.zeros(len(pos), dtype=np.int64)
    flat = dfa.trans[:, :256].reshape(-1).astype(np.int64)
    starts = None if starts_char is None else starts_char.reshape(-1)
    inside, inside_n, inside_end, exit_pos, exit_col, exit_n = [], [], [], [], [], []
    for j in range(layout.columns.shape[0] + 1):
        done = layout.lengths[pos] <= j
        if done.any():
            inside.append(pos[done])
            inside_n.append(count[done])
            inside_end.append(dfa.accept[cur[done]])
            pos, cur, count = pos[~done], cur[~done], count[~done]
        if not len(pos) or j == layout.columns.shape[0]:
            break
        if j:
            out = dfa.accept[cur]
            if out.any():
                exit_pos.append(pos[out])
                exit_col.append(np.full(int(out.sum()), j, dtype=np.int64))
                exit_n.append(count[out])
        at = cur * 256 + layout.columns[j, pos]
        if starts is not None:
            count = count + starts[at]
        cur = flat[at]
        live = cur >= 0
        pos, cur, count = pos[live], cur[live], count[live]
    empty = np.zeros(0, dtype=np.int64)
    inside_pos = np.concatenate(inside or [empty])
    inside_count = np.concatenate(inside_n or [empty])
    inside_closes = np.concatenate(inside_end or [np.zeros(0, dtype=bool)])
    walk = LeafWalk(pack_token_ids(layout.token_ids[inside_pos], info.vocab_size),
                    np.concatenate(exit_pos or [empty]), np.concatenate(exit_col or [empty]),
                    inside_pos, inside_count, inside_closes, np.concatenate(exit_n or [empty]),
                    int(inside_count.max()) if len(inside_count) else 0)
    if len(cache) >= _LEAF_WALKS_MAX:  # oldest first; admission threads fill it too
        try:
            cache.pop(next(iter(cache)), None)
        except (RuntimeError, StopIteration):
            pass
    cache[key] = walk
    return walk
