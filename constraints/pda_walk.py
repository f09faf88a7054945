"""The vectorized vocabulary walk of a pushdown automaton: (token, state, stack) entries
advanced one byte column at a time, forking at calls and returns, counting characters in
counted leaves."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .fsm import DEAD

if TYPE_CHECKING:
    from .pushdown import Config, PushdownAutomaton


def walk_tokens(pda: PushdownAutomaton, configs: set[Config], positions: np.ndarray | None = None,
          cols: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Vectorized vocabulary walk over (token, state, stack) entries, forking at calls/returns.

    Each byte column is one gather over the live entries; entries sitting on a state with a
    call or a return are first copied once per configuration their closure reaches. Without
    ``positions`` every token whose first byte some configuration allows is walked from byte
    0; with them, layout position ``positions[i]`` joins at byte ``cols[i]`` (the rest of a
    token that left a leaf there). Returns the token ids and the shortest stack seen (frames
    below it were never read).
    """
    layout = pda.info.layout
    stacks: dict[tuple[int, ...], int] = {}
    stack_of: list[tuple[int, ...]] = []

    def sid(stack: tuple[int, ...]) -> int:
        if stack not in stacks:
            stacks[stack] = len(stack_of)
            stack_of.append(stack)
        return stacks[stack]

    cfgs = sorted(configs, key=lambda c: (len(c[0]), c))
    if positions is None:
        firsts = [layout.starting_with(np.nonzero(pda._trans[c[1]] >= 0)[0]) for c in cfgs]
        col_of = None
    else:
        order = np.argsort(cols, kind="stable")
        firsts = [positions[order]] * len(cfgs)
        col_of = np.tile(cols[order], len(cfgs))
    pending_p = np.concatenate(firsts) if firsts else np.zeros(0, dtype=np.int64)
    pending_g = np.repeat(np.array([c[1] for c in cfgs], dtype=np.int64), [len(f) for f in firsts])
    pending_s = np.repeat(np.array([sid(c[0]) for c in cfgs], dtype=np.int64),
                          [len(f) for f in firsts])
    if col_of is not None:  # join in column order
        by_col = np.argsort(col_of, kind="stable")
        pending_p, pending_g, pending_s, col_of = (pending_p[by_col], pending_g[by_col],
                                                   pending_s[by_col], col_of[by_col])
    empty = np.zeros(0, dtype=np.int64)
    pos, g, s = empty, empty, empty
    flat = pda._trans.reshape(-1)
    found: list[np.ndarray] = []
    joined = 0
    for j in range(layout.columns.shape[0] + 1):
        if j and len(pos):
            pos, g, s = _fork(pda, pos, g, s, stack_of, sid)
        upto = len(pending_p) if col_of is None else int(np.searchsorted(col_of, j, side="right"))
        if upto > joined:
            pos = np.concatenate([pos, pending_p[joined:upto]])
            g = np.concatenate([g, pending_g[joined:upto]])
            s = np.concatenate([s, pending_s[joined:upto]])
            joined = upto
        done = layout.lengths[pos] <= j
        if done.any():
            found.append(pos[done])
            keep = ~done
            pos, g, s = pos[keep], g[keep], s[keep]
        if (not len(pos) and joined == len(pending_p)) or j == layout.columns.shape[0]:
            break
        if not len(pos):
            continue
        at = g * 256 + layout.columns[j, pos]
        g = flat[at].astype(np.int64)
        if pda._counted_any:
            g, s = _count_chars(pda, pda._inc.reshape(-1)[at] * (g >= 0), g, s, stack_of, sid)
            g = np.where(_too_short(pda, g, s, stack_of), DEAD, g)
        live = g >= 0
        pos, g, s = pos[live], g[live], s[live]
        if len(cfgs) > 1 or len(stack_of) > 1:
            key = (pos * pda.num_states + g) * len(stack_of) + s
            _, first = np.unique(key, return_index=True)
            pos, g, s = pos[first], g[first], s[first]
    lowest = min((len(st) for st in stack_of), default=0)
    if not found:
        return empty, lowest
    return layout.token_ids[np.unique(np.concatenate(found))], lowest


def _count_chars(pda: PushdownAutomaton, rises: np.ndarray, g, s, stack_of, sid):
    """Entries whose byte raised a counted leaf's count (one for a character; a pattern
    leaf's detour more) move to the stack with the count that much higher (their global
    state ``g`` is already the one after the byte); past the leaf's maximum they die."""
    idx = np.nonzero(rises)[0]
    if not len(idx):
        return g, s
    g, s = g.copy(), s.copy()
    keys = (s[idx] * pda.num_states + g[idx]) * 256 + rises[idx].astype(np.int64)
    uniq, inv = np.unique(keys, return_inverse=True)
    new_s = np.empty(len(uniq), dtype=np.int64)
    for u, key in enumerate(uniq.tolist()):
        key, rise = divmod(key, 256)
        ss, gg = divmod(key, pda.num_states)
        up = pda._counted_up(stack_of[ss], gg, rise)
        new_s[u] = -1 if up is None else sid(up)
    moved = new_s[inv]
    s[idx] = np.maximum(moved, 0)
    g[idx[moved < 0]] = DEAD
    return g, s


def _too_short(pda: PushdownAutomaton, g, s, stack_of) -> np.ndarray:
    """Entries that just closed a counted leaf with fewer characters than its minimum."""
    closing = pda._closes_counted[np.maximum(g, 0)] & (g >= 0)
    idx = np.nonzero(closing)[0]
    short = np.zeros(len(g), dtype=bool)
    for i in idx.tolist():
        short[i] = -stack_of[s[i]][-1] - 1 < pda._count_lo[g[i]]
    return short


def _fork(pda: PushdownAutomaton, pos, g, s, stack_of, sid):
    branch = pda._branch[g]
    if not branch.any():
        return pos, g, s
    idx = np.nonzero(branch)[0]
    keys = g[idx] * (1 << 32) + s[idx]
    uniq, inv = np.unique(keys, return_inverse=True)
    parts_p, parts_g, parts_s = [pos], [g], [s]
    for u, key in enumerate(uniq.tolist()):
        gg, ss = divmod(key, 1 << 32)
        members = pos[idx[inv == u]]
        for stack2, g2 in pda._config_closure((stack_of[ss], gg)) - {(stack_of[ss], gg)}:
            parts_p.append(members)
            parts_g.append(np.full(len(members), g2, dtype=np.int64))
            parts_s.append(np.full(len(members), sid(stack2), dtype=np.int64))
    return np.concatenate(parts_p), np.concatenate(parts_g), np.concatenate(parts_s)
