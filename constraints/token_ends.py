"""The tokens allowed from one state, grouped by the state each leads to (what the closing's
budget rows read), and packed rows of them by group of end states, without listing the
tokens: a string body's state allows ~48k tokens that lead to a handful of states."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import native
from .bitmask import bitmask_words, pack_token_ids


@dataclass(frozen=True, slots=True)
class TokenEnds:
    """``ends`` the distinct end states; token ``ids[i]`` leads to ``ends[end[i]]``, or dies
    where ``end[i] < 0`` (the C walk reports over all tokens in lexicographic order, the
    Python walk only the allowed ones)."""

    ends: list
    ids: np.ndarray  # int64 token ids
    end: np.ndarray  # int32 index into ends, -1: not allowed

    def by_token(self) -> tuple[np.ndarray, np.ndarray]:
        """(allowed token ids, the index of the end state each leads to)."""
        alive = np.nonzero(self.end >= 0)[0]
        return self.ids[alive], self.end[alive].astype(np.int64)

    def rows(self, group_of_end: np.ndarray, groups: int, vocab_size: int) -> np.ndarray:
        """[groups, words] packed rows: row g holds the tokens whose end state's group is g
        (``group_of_end[k] < 0``: in no row)."""
        group_of_end = np.ascontiguousarray(group_of_end, dtype=np.int64)
        words = bitmask_words(vocab_size)
        out = np.zeros((groups, words), dtype=np.int32)
        mod = native.module()
        if mod is not None:
            mod.pack_groups(np.ascontiguousarray(self.ids, dtype=np.int64),
                            np.ascontiguousarray(self.end, dtype=np.int32), group_of_end, out, words)
            return out
        alive = self.end >= 0
        group = np.full(len(self.end), -1, dtype=np.int64)
        group[alive] = group_of_end[self.end[alive]]
        for g in range(groups):
            out[g] = pack_token_ids(self.ids[group == g], vocab_size)
        return out
