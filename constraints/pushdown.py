"""Recursive constraints as a pushdown automaton over byte DFAs (a recursive transition network).

Each rule (the main pattern plus one per recursive JSON Schema `$ref`) is a DFA over the 256
bytes plus one call symbol per rule (column CALL_BASE + k). All rule DFAs are laid out in one
global state table. A configuration is (stack of return states, current state); a call pushes
the state after the call edge and jumps to the callee's start, and an accepting callee state
may pop back. Calls and returns consume nothing, so one automaton state is the frozenset of
configurations reachable after the bytes read so far (ambiguity, e.g. whitespace that belongs
to the callee or to the caller, keeps several alive).
"""

from __future__ import annotations

import numpy as np

from .automaton import TokenAutomaton
from .budget import CompileBudget
from .errors import UnsupportedSchemaError
from .fsm import DEAD, ByteDFA, determinize, trim_and_minimize
from .nfa import CALL_BASE, NFA
from .vocab import TokenizerInfo

Config = tuple[tuple[int, ...], int]  # (return states, bottom first; current global state)
State = frozenset  # of Config
MAX_CONFIGS = 64  # parses of one prefix kept alive (see _step)


class PushdownAutomaton(TokenAutomaton):
    """dfas[0] is the main pattern, dfas[1 + k] rule k; all trimmed, none accepts ''."""

    def __init__(self, info: TokenizerInfo, dfas: list[ByteDFA]):
        super().__init__(info)
        sizes = [d.num_states for d in dfas]
        offsets = np.concatenate(([0], np.cumsum(sizes)))
        self._trans = np.concatenate([np.where(d.trans[:, :256] >= 0, d.trans[:, :256] + off, DEAD)
                                      for d, off in zip(dfas, offsets)]).astype(np.int64)
        accept = np.concatenate([d.accept for d in dfas])
        self._final = accept & (np.arange(len(accept)) < sizes[0])  # main accepts, stack empty
        self._returns = accept & ~self._final
        self._calls: list[tuple[tuple[int, int], ...]] = []
        for d, off in zip(dfas, offsets):
            for q in range(d.num_states):
                row = d.trans[q, CALL_BASE:]
                self._calls.append(tuple((int(offsets[1 + k]), int(off + row[k]))
                                         for k in np.nonzero(row >= 0)[0]))
        self._branch = self._returns | np.array([bool(c) for c in self._calls])
        self._closures: dict[State, frozenset[Config]] = {}
        self._steps: dict[tuple[State, int], State | None] = {}
        self._forced: dict[State, bytes] = {}
        # g -> [(stack suffix the walk read, token ids)]: a deeper stack with the same suffix
        # has the same tokens, so masks do not go cold with every level of nesting.
        self._config_ids: dict[int, list[tuple[tuple[int, ...], np.ndarray]]] = {}

    @property
    def initial(self) -> State:
        return frozenset([((), 0)])

    @property
    def num_states(self) -> int:
        return len(self._trans)

    # -- configurations ---------------------------------------------------------------------
    def _config_closure(self, config: Config) -> set[Config]:
        """Configurations reachable by calls and returns alone (finite: no left recursion)."""
        seen = {config}
        todo = [config]
        while todo:
            stack, g = todo.pop()
            nxt = [(stack + (ret,), start) for start, ret in self._calls[g]]
            if self._returns[g]:
                nxt.append((stack[:-1], stack[-1]))
            for c in nxt:
                if c not in seen:
                    seen.add(c)
                    todo.append(c)
        return seen

    def _closure(self, state: State) -> frozenset[Config]:
        out = self._closures.get(state)
        if out is None:
            out = frozenset().union(*(self._config_closure(c) for c in state))
            self._closures[state] = out
        return out

    def _step(self, state: State, byte: int) -> State | None:
        key = (state, byte)
        if key in self._steps:
            return self._steps[key]
        nxt = set()
        for stack, g in self._closure(state):
            t = int(self._trans[g, byte])
            if t >= 0:
                nxt.add((stack, t))
        if len(nxt) > MAX_CONFIGS:
            # Pathological ambiguity: keep the shallowest parses. Every kept one is live, so
            # this can only over-constrain, and matchers never raise mid-generation.
            nxt = sorted(nxt, key=lambda c: (len(c[0]), c))[:MAX_CONFIGS]
        out = self._steps[key] = frozenset(nxt) or None
        return out

    # -- TokenAutomaton ---------------------------------------------------------------------
    def advance(self, state: State, data: bytes) -> State | None:
        for b in data:
            state = self._step(state, b)
            if state is None:
                return None
        return state

    def is_accepting(self, state: State) -> bool:
        return any(self._final[g] for _, g in self._closure(state))

    def allowed_token_ids(self, state: State) -> np.ndarray:
        found = [self._config_token_ids(c) for c in state]
        return found[0] if len(found) == 1 else np.unique(np.concatenate(found))

    def _config_token_ids(self, config: Config) -> np.ndarray:
        stack, g = config
        known = self._config_ids.setdefault(g, [])
        for suffix, ids in known:
            if len(stack) >= len(suffix) and stack[len(stack) - len(suffix):] == suffix:
                return ids
        ids, lowest = _walk(self, self._config_closure(config))
        known.append((stack[lowest:], ids))
        return ids

    def forced_bytes(self, state: State) -> bytes:
        if state not in self._forced:
            out = bytearray()
            cur = state
            while len(out) < 256 and not self.is_accepting(cur):
                rows = self._trans[[g for _, g in self._closure(cur)]]
                nxt = np.nonzero((rows >= 0).any(axis=0))[0]
                if len(nxt) != 1:
                    break
                out.append(int(nxt[0]))
                cur = self._step(cur, int(nxt[0]))
            self._forced[state] = bytes(out)
        return self._forced[state]


def _walk(pda: PushdownAutomaton, configs: set[Config]) -> tuple[np.ndarray, int]:
    """Vectorized vocabulary walk over (token, state, stack) entries, forking at calls/returns.

    Each byte column is one gather over the live entries; entries sitting on a state with a
    call or a return are first copied once per configuration their closure reaches.
    Returns the token ids and the shortest stack seen (frames below it were never read).
    """
    layout = pda.info.layout
    stacks: dict[tuple[int, ...], int] = {}
    stack_of: list[tuple[int, ...]] = []

    def sid(stack: tuple[int, ...]) -> int:
        if stack not in stacks:
            stacks[stack] = len(stack_of)
            stack_of.append(stack)
        return stacks[stack]

    n = len(layout.token_ids)
    cfgs = sorted(configs, key=lambda c: (len(c[0]), c))
    pos = np.tile(np.arange(n), len(cfgs))
    g = np.repeat(np.array([c[1] for c in cfgs], dtype=np.int64), n)
    s = np.repeat(np.array([sid(c[0]) for c in cfgs], dtype=np.int64), n)
    flat = pda._trans.reshape(-1)
    found: list[np.ndarray] = []
    for j in range(layout.columns.shape[0] + 1):
        if j:
            pos, g, s = _fork(pda, pos, g, s, stack_of, sid)
        done = layout.lengths[pos] <= j
        if done.any():
            found.append(pos[done])
            keep = ~done
            pos, g, s = pos[keep], g[keep], s[keep]
        if not len(pos) or j == layout.columns.shape[0]:
            break
        g = flat[g * 256 + layout.columns[j, pos]]
        live = g >= 0
        pos, g, s = pos[live], g[live], s[live]
        if len(cfgs) > 1 or len(stack_of) > 1:
            key = (pos * pda.num_states + g) * len(stack_of) + s
            _, first = np.unique(key, return_index=True)
            pos, g, s = pos[first], g[first], s[first]
    lowest = min(len(st) for st in stack_of)
    if not found:
        return np.zeros(0, dtype=np.int64), lowest
    return layout.token_ids[np.unique(np.concatenate(found))], lowest


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


def build_pushdown(info: TokenizerInfo, fragments: list[tuple[NFA, int, int]],
                   pointers: list[str], budget: CompileBudget) -> PushdownAutomaton:
    """fragments[0] = main (nfa, start, end), fragments[1 + k] = rule k, found at pointers[k]."""
    width = CALL_BASE + len(fragments) - 1
    dfas = [determinize(nfa, s, e, budget, width=width) for nfa, s, e in fragments]
    _check_not_left_recursive(dfas, pointers)
    dfas = _drop_empty_calls(dfas)
    return PushdownAutomaton(info, dfas)


def _drop_empty_calls(dfas: list[ByteDFA]) -> list[ByteDFA]:
    """Least fixpoint of 'rule k matches some string'; calls of empty rules become dead edges."""
    live: set[int] = set()
    while True:
        masked = [_mask_calls(d, live) for d in dfas]
        now = {k for k in range(len(dfas) - 1) if not masked[1 + k].is_empty()}
        if now == live:
            return [trim_and_minimize(d) for d in masked]
        live = now


def _mask_calls(dfa: ByteDFA, live: set[int]) -> ByteDFA:
    trans = dfa.trans.copy()
    for k in range(trans.shape[1] - CALL_BASE):
        if k not in live:
            trans[:, CALL_BASE + k] = DEAD
    return ByteDFA(trans, dfa.accept)


def _check_not_left_recursive(dfas: list[ByteDFA], pointers: list[str]) -> None:
    """A rule that can call itself before reading a byte would push forever."""
    first = {k: np.nonzero(dfas[1 + k].trans[0, CALL_BASE:] >= 0)[0].tolist()
             for k in range(len(dfas) - 1)}
    for k, dfa in enumerate(dfas[1:]):
        if dfa.accept[0]:
            raise UnsupportedSchemaError.at("$ref", pointers[k], "matches the empty string")
    state = dict.fromkeys(first, 0)  # 0 new, 1 on the DFS path, 2 done

    def visit(k: int) -> None:
        state[k] = 1
        for c in first[k]:
            if state[c] == 1:
                raise UnsupportedSchemaError.at(
                    "$ref", pointers[c], "is left-recursive (it reaches itself before any input)")
            if state[c] == 0:
                visit(c)
        state[k] = 2

    for k in first:
        if state[k] == 0:
            visit(k)
