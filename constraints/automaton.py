"""What a matcher needs from a compiled constraint, and the DFA-backed implementation.

A state is any hashable value; the automaton is immutable apart from its lazily filled,
per-state caches (token bitmask rows, forced bytes), which every matcher of it shares.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable

import numpy as np
import torch

from . import native
from .bitmask import pack_token_ids
from .completion import UNREACHABLE, leaf_distances
from .fsm import DEAD, ByteDFA
from .token_walk import walk_vocab
from .vocab import TokenizerInfo

State = Hashable


SPARSE_WORDS = 64  # fill_words keeps a row as its live words up to this many (512 bytes)


def _native():
    """native.module(), read once it is loaded (a fill asks for it every time)."""
    global _MOD
    if _MOD is False:
        _MOD = native.module()
    return _MOD


_MOD = False


def write_kept(words: np.ndarray, row: int, kept: bytes | tuple | np.ndarray) -> None:
    """``words[row]`` (a CPU int32 bitmask's row) = the row ``kept`` stands for, in any form a
    row is kept in for fills: a packed row, native.sparse_row's pairs of its live words, or a
    (shared packed row, pairs ORed over it) pair (pushdown._fill_leaf)."""
    if type(kept) is bytes:
        _native().fill_sparse(words, row, kept)
    elif type(kept) is tuple:
        _native().fill_sparse(words, row, kept[1], kept[0])
    else:
        words[row] = kept


class TokenAutomaton(ABC):
    """A byte-level language over a tokenizer's vocabulary."""

    unique_items = None  # a UniqueItems where the matcher checks duplicate array items
    pruned = False  # whether steps ever dropped parses (pushdown's MAX_CONFIGS): bounds unknown

    def __init__(self, info: TokenizerInfo):
        self.info = info
        self._rows: dict[State, torch.Tensor] = {}
        self._words: dict[State, np.ndarray] = {}  # the same rows as numpy arrays
        self._continues: dict[State, bool] = {}
        self._sparse: dict[State, bytes | tuple | np.ndarray] = {}  # fill_words' form of each row

    @property
    @abstractmethod
    def initial(self) -> State: ...

    @abstractmethod
    def advance(self, state: State, data: bytes) -> State | None:
        """State after consuming `data`, or None if some byte is not allowed."""

    @abstractmethod
    def is_accepting(self, state: State) -> bool: ...

    @abstractmethod
    def allowed_token_ids(self, state: State) -> np.ndarray:
        """Non-special token ids whose bytes may come next (EOS excluded)."""

    @abstractmethod
    def forced_bytes(self, state: State) -> bytes:
        """The bytes every continuation must start with (b"" if none or if it may end here)."""

    def byte_classes(self, state: State) -> list[list[int]]:
        """The bytes that may come next (a superset: advance decides), in groups that lead
        to the same state; one group per byte by default."""
        return [[b] for b in range(256)]

    def min_bytes_to_accept(self, state: State, alphabet: np.ndarray) -> int | None:
        """Fewest bytes of ``alphabet`` ([256] bool) from ``state`` to an accepting state, or
        a lower bound on them; None where unknown (the closing search then looks itself)."""
        return None

    def max_bytes_to_accept(self, alphabet: np.ndarray) -> int | None:
        """At least min_bytes_to_accept of every state the automaton can reach (exact values,
        not lower bounds); None where unbounded or unknown."""
        return None

    def shortest_completion(self, state: State, alphabet: np.ndarray) -> bytes | None:
        """Bytes of ``alphabet`` of min_bytes_to_accept's length after which ``state``
        accepts, where the automaton can name them without a search (None: it cannot)."""
        return None

    def can_continue(self, state: State) -> bool:
        """Some non-EOS token may follow (answered from the cached mask computation)."""
        if state not in self._continues:
            self.mask_row(state)
        return self._continues[state]

    def mask_row(self, state: State) -> torch.Tensor:
        """Packed int32 row [ceil(V/32)], EOS bits set where the constraint may end; cached."""
        row = self._rows.get(state)
        if row is None:
            words = self._allowed_words(state)
            if words is None:
                words = pack_token_ids(self.allowed_token_ids(state), self.info.vocab_size)
            self._continues[state] = bool(words.any())
            if self.is_accepting(state):
                np.bitwise_or(words, self.info.eos_row, out=words)
            row = torch.from_numpy(words)
            self._rows[state] = row
        return row

    def _allowed_words(self, state: State) -> np.ndarray | None:
        """allowed_token_ids as a fresh packed row, where a subclass walks straight into one
        (None: the ids are packed)."""
        return None

    def mask_words(self, state: State) -> np.ndarray:
        """mask_row as a numpy int32 array (the same memory)."""
        words = self._words.get(state)
        if words is None:
            words = self._words[state] = self.mask_row(state).numpy()
        return words

    def fill_words(self, state: State, words: np.ndarray, row: int) -> None:
        """mask_words(state) written into ``words[row]`` (a CPU int32 bitmask). A state met
        before writes from its row's live words alone where it has at most SPARSE_WORDS
        (kept as native.sparse_row's pairs): most rows are a few words of thousands, and a
        fill that reads a whole cached row finds it cold, ~6 KB from memory, not cache."""
        kept = self._sparse.get(state)
        if kept is None:
            self._fill_new(state, words, row)
        else:
            write_kept(words, row, kept)

    def _fill_new(self, state: State, words: np.ndarray, row: int) -> None:
        """fill_words of a state met for the first time; keeps the form it fills from later."""
        mask = words[row] = self.mask_words(state)
        mod = _native()
        pairs = None if mod is None else mod.sparse_row(mask, SPARSE_WORDS)
        self._sparse[state] = mask if pairs is None else pairs

    @property
    def num_cached_masks(self) -> int:
        return max(len(self._rows), len(self._words))


class DFAAutomaton(TokenAutomaton):
    """States are DFA state ints; token masks come from the vectorized vocabulary walk."""

    def __init__(self, info: TokenizerInfo, dfa: ByteDFA):
        super().__init__(info)
        self.dfa = dfa
        self._forced: dict[int, bytes] = {}
        self._distances: dict[bytes, np.ndarray] = {}  # alphabet -> completion.leaf_distances

    @property
    def initial(self) -> int:
        return 0

    def advance(self, state: int, data: bytes) -> int | None:
        s = self.dfa.walk(state, data)
        return None if s == DEAD else s

    def is_accepting(self, state: int) -> bool:
        return bool(self.dfa.accept[state])

    def allowed_token_ids(self, state: int) -> np.ndarray:
        mod = native.module()
        trans = self.dfa.trans
        if mod is not None and trans.dtype == np.int32 and trans.flags.c_contiguous:
            found = native.leaf_walk(mod, trans, self.dfa.accept, None,
                                     self.info.layout.lexicographic_arrays(), state)
            if found is not None:  # the tokens whose bytes all stay alive
                return self.info.layout.token_ids[found[0][0]]
        ids, _ = walk_vocab(trans, state, self.info.layout)
        return ids

    def _allowed_words(self, state: int) -> np.ndarray | None:
        """The C walk sets the allowed tokens in the row itself (no id list to pack)."""
        mod = native.module()
        trans = self.dfa.trans
        if mod is None or trans.dtype != np.int32 or not trans.flags.c_contiguous:
            return None
        found = native.leaf_row(mod, trans, self.dfa.accept, self.info.layout.lexicographic_arrays(),
                                state, self.info.vocab_size)
        return None if found is None else found[0]

    def byte_classes(self, state: int) -> list[list[int]]:
        return group_bytes(self.dfa.trans[state, :256][None, :])

    def min_bytes_to_accept(self, state: int, alphabet: np.ndarray) -> int | None:
        dist = self._distances.get(alphabet.tobytes())
        if dist is None:
            dist = self._distances[alphabet.tobytes()] = leaf_distances(self.dfa, alphabet)
        return None if dist[state] >= UNREACHABLE else int(dist[state])

    def max_bytes_to_accept(self, alphabet: np.ndarray) -> int | None:
        self.min_bytes_to_accept(0, alphabet)  # the distances, cached
        most = int(self._distances[alphabet.tobytes()].max(initial=0))
        return None if most >= UNREACHABLE else most

    def can_continue(self, state: int) -> bool:
        return bool((self.dfa.trans[state] >= 0).any())

    def forced_bytes(self, state: int) -> bytes:
        out = self._forced.get(state)
        if out is None:
            out = self._forced[state] = self._follow_single_edges(state)
        return out

    def _follow_single_edges(self, state: int) -> bytes:
        out = bytearray()
        seen = set()
        while not self.dfa.accept[state] and state not in seen:
            seen.add(state)
            nxt = np.nonzero(self.dfa.trans[state] >= 0)[0]
            if len(nxt) != 1:
                break
            out.append(int(nxt[0]))
            state = int(self.dfa.trans[state, nxt[0]])
        return bytes(out)


def group_bytes(columns: np.ndarray) -> list[list[int]]:
    """Bytes grouped by their column of ``columns`` ([k, 256]: whatever decides a byte's step,
    e.g. each configuration's next state); bytes whose first row is dead are left out."""
    live = np.nonzero(columns[0] >= 0)[0] if len(columns) == 1 else np.nonzero((columns >= 0).any(axis=0))[0]
    if not len(live):
        return []
    keys = np.ascontiguousarray(columns[:, live].T.astype(np.int64))  # one row per live byte
    keys = keys.view(np.dtype((np.void, keys.shape[1] * 8))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    if len(first) == len(live):
        return [[b] for b in live.tolist()]
    inverse = inverse.ravel()
    ends = np.cumsum(np.bincount(inverse))[:-1]
    return [g.tolist() for g in np.split(live[np.argsort(inverse, kind="stable")], ends)]
