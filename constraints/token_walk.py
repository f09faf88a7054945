"""Vectorized walk of the whole vocabulary through a byte DFA from one state.

Tokens are sorted by length and stored column-major, so each byte position is one gather over
the tokens still alive; tokens that die drop out at once (most do at the first byte in
structural states), which keeps a cold state to a few milliseconds for 49k tokens.
"""

from __future__ import annotations

import numpy as np

from .vocab import VocabLayout


def walk_vocab(trans: np.ndarray, state: int, layout: VocabLayout,
               keep_end_states: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Token ids whose bytes stay alive from `state`, and the DFA state each ends in."""
    flat = trans.reshape(-1)
    alive = np.arange(len(layout.token_ids))
    cur = np.full(len(alive), state, dtype=np.int64)
    done_pos: list[np.ndarray] = []
    done_state: list[np.ndarray] = []
    lengths = layout.lengths
    for j in range(layout.columns.shape[0]):
        k = int(np.searchsorted(lengths[alive], j, side="right"))
        if k:
            done_pos.append(alive[:k])
            done_state.append(cur[:k])
            alive, cur = alive[k:], cur[k:]
        if not len(alive):
            break
        cur = flat[cur * 256 + layout.columns[j, alive]]
        live = cur >= 0
        if not live.all():
            alive, cur = alive[live], cur[live]
    done_pos.append(alive)
    done_state.append(cur)
    pos = np.concatenate(done_pos)
    return layout.token_ids[pos], np.concatenate(done_state)


def walk_positions(trans: np.ndarray, start: int, layout: VocabLayout, positions: np.ndarray,
                   col: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Walk layout positions (ascending) from byte `col` on, reporting where tokens die.

    Returns (positions fully consumed, dead positions, column each died at, state before it).
    """
    flat = trans.reshape(-1)
    alive = positions
    cur = np.full(len(alive), start, dtype=np.int64)
    done: list[np.ndarray] = []
    dead_pos: list[np.ndarray] = []
    dead_col: list[np.ndarray] = []
    dead_state: list[np.ndarray] = []
    for j in range(col, layout.columns.shape[0]):
        k = int(np.searchsorted(layout.lengths[alive], j, side="right"))
        done.append(alive[:k])
        alive, cur = alive[k:], cur[k:]
        if not len(alive):
            break
        nxt = flat[cur * 256 + layout.columns[j, alive]]
        died = nxt < 0
        if died.any():
            dead_pos.append(alive[died])
            dead_col.append(np.full(int(died.sum()), j, dtype=np.int64))
            dead_state.append(cur[died])
            alive, nxt = alive[~died], nxt[~died]
        cur = nxt
    done.append(alive)
    empty = np.zeros(0, dtype=np.int64)
    return (np.concatenate(done), np.concatenate(dead_pos or [empty]),
            np.concatenate(dead_col or [empty]), np.concatenate(dead_state or [empty]))
