"""Structural token masks of a pushdown automaton: the sorted vocabulary walked as a trie.

From a configuration in a structural rule (keys, punctuation, a value's start), each allowed
next byte narrows the run of tokens with that prefix by bisection, through the automaton's
cached byte steps; a run of positions with one live byte each and no calls or returns (a
key's letters) is read off the rule's table in one loop; where many bytes may come next, the
tokens left in the run are walked together, vectorized (pda_walk.py). Rows are cached by the automaton (pushdown.py).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

import numpy as np

from .pda_walk import walk_tokens

if TYPE_CHECKING:
    from .pushdown import Config, PushdownAutomaton

_TRIE_BRANCHING = 24  # bytes allowed next above which a trie walk goes vectorized
_TRIE_MIN_RUN = 8  # tokens left in a run below which it does too


def trie_walk(pda: PushdownAutomaton, config: Config,
              rule_configs: list[Config] | None = None) -> tuple[np.ndarray, int]:
    """Tokens allowed from a structural configuration, found by walking the sorted
    vocabulary as a trie: while few bytes may come next (keys, punctuation) each byte
    narrows the run of tokens with that prefix by bisection, through the automaton's
    cached byte steps; where many may (a value's start, a string body) the tokens left
    in the run are walked together, vectorized, from there on.

    A node is one configuration at a plain position (no call, no return, not counting:
    ``pda._plain``) stepped straight through the rule's table, or else an automaton state
    stepped through its caches.

    ``rule_configs``: walk only from these configurations of ``config``'s closure, by their
    own bytes (no calls or returns from them before the first byte): the rest of the
    closure (the leaves it calls) is the caller's to add."""
    tokens, ids, positions = pda.info.layout.lexicographic()
    plain, trans, one = pda._plain, pda._trans, pda._one_byte
    found: list[np.ndarray] = []
    lowest = len(config[0])
    if rule_configs is None:
        todo = [(None, config, b"", 0, len(tokens))]
    else:
        todo = _first_bytes(pda, rule_configs, tokens)
        lowest = min([lowest] + [len(c[0]) for c in rule_configs])
    while todo:
        state, (stack, g), prefix, lo, hi = todo.pop()
        if state is None and not plain[g]:
            state = frozenset([(stack, g)])
        if state is None:
            lowest = min(lowest, len(stack))
        else:
            closure = pda._closure(state)
            lowest = min(lowest, pda._depth(state))
        if prefix and tokens[lo] == prefix:  # the prefix itself is a token: it ends here
            found.append(ids[lo:lo + 1])
            lo += 1
        if lo >= hi:
            continue
        if hi - lo < _TRIE_MIN_RUN:  # a few tokens left: step each on its own
            keep = []
            for i in range(lo, hi):
                rest = tokens[i][len(prefix):]
                alive, depth = (_plain_alive(pda, stack, g, rest) if state is None
                                else pda._ends_alive(state, rest))
                lowest = min(lowest, depth)
                if alive:
                    keep.append(i)
            found.append(ids[keep])
            continue
        if state is None:
            if one[g] >= 0:  # a key's letters: followed in one go
                _key_run(pda, stack, g, prefix, lo, hi, tokens, ids, found, todo)
                continue
            allowed = pda._live_bytes(g)
        else:
            allowed = pda._next_bytes(state, closure)
        if len(allowed) > _TRIE_BRANCHING:
            more, low = walk_tokens(pda, {(stack, g)} if state is None else closure,
                                    positions[lo:hi], np.full(hi - lo, len(prefix), dtype=np.int64))
            found.append(more)
            lowest = min(lowest, low)
            continue
        for b in allowed:
            if state is None:
                nxt, at = None, (stack, int(trans[g, b]))
            else:
                nxt = pda._step(state, b)
                if nxt is None:
                    continue
                at = next(iter(nxt)) if len(nxt) == 1 else (stack, -1)
                if len(nxt) == 1 and plain[at[1]]:
                    nxt = None  # one plain configuration: stepped by the table from here
            key = prefix + bytes([b])
            start = bisect_left(tokens, key, lo, hi)
            end = bisect_left(tokens, prefix + bytes([b + 1]), start, hi) if b < 255 else hi
            if start < end:
                todo.append((nxt, at, key, start, end))
    if not found:
        return np.zeros(0, dtype=np.int64), lowest
    return np.concatenate(found), lowest  # disjoint runs of the sorted vocabulary


def _first_bytes(pda: PushdownAutomaton, configs: list[Config], tokens: list[bytes]) -> list:
    """Trie nodes one byte in from rule configurations, each stepped by its own table
    (rule bytes neither call, return nor count)."""
    trans, plain = pda._trans, pda._plain
    by_byte: dict[int, set] = {}
    for stack, g in configs:
        for b in pda._live_bytes(g):
            by_byte.setdefault(b, set()).add((stack, int(trans[g, b])))
    todo = []
    for b in sorted(by_byte):
        nxt = frozenset(by_byte[b])
        key = bytes([b])
        start = bisect_left(tokens, key)
        end = bisect_left(tokens, bytes([b + 1]), start) if b < 255 else len(tokens)
        if start < end:
            at = next(iter(nxt)) if len(nxt) == 1 else (configs[0][0], -1)
            todo.append((None if len(nxt) == 1 and plain[at[1]] else nxt, at, key, start, end))
    return todo


def _plain_alive(pda: PushdownAutomaton, stack: tuple[int, ...], g: int, rest: bytes) -> tuple[bool, int]:
    """Whether ``rest`` can follow the plain configuration (stack, g), and the shallowest
    stack it looked at: table steps while positions stay plain, the automaton's after."""
    plain, trans = pda._plain, pda._trans
    for k, b in enumerate(rest):
        if not plain[g]:
            return pda._ends_alive(frozenset([(stack, g)]), rest[k:])
        g = int(trans[g, b])
        if g < 0:
            return False, len(stack)
    return True, len(stack)


def _key_run(pda: PushdownAutomaton, stack: tuple[int, ...], g: int, prefix: bytes, lo: int,
             hi: int, tokens: list[bytes], ids: np.ndarray, found: list, todo: list) -> None:
    """From one configuration at a position with one live byte and no calls or returns (a
    key's letters): the run of such positions read off the rule's one-byte successors, one
    dict lookup of the vocabulary's prefixes per byte (no bisection, no automaton states).
    Tokens (of the sorted run [lo, hi) starting with ``prefix``) that end inside the run go
    to ``found``; those going past it to ``todo``, as the trie walk would have reached them
    one byte at a time. The stack is not read."""
    one, after, branch = pda._one_byte, pda._one_next, pda._branches
    starts = pda.info.layout.prefix_starts()
    limit = pda._max_token_len
    key = prefix
    ending: list[int] = []  # sorted-list indices of tokens ending inside the run
    at: int | None = -1  # None once no token goes as far as the run
    while one[g] >= 0 and len(key) < limit:
        key += _BYTE[one[g]]
        g = after[g]
        at = starts.get(key)
        if at is None:
            break  # no token goes this far: nothing reaches past the run
        lo = at
        if branch[g]:
            break
        if one[g] >= 0 and tokens[at] == key:
            ending.append(at)
            lo = at + 1
    if ending:
        found.append(ids[ending])
    if at is None or len(key) == len(prefix):
        return
    above = successor(key)
    end = hi if above is None else bisect_left(tokens, above, lo, hi)
    if lo < end:
        todo.append((None, (stack, g), key, lo, end))


_BYTE = [bytes([b]) for b in range(256)]


def successor(prefix: bytes) -> bytes | None:
    """The least byte string above every string that starts with ``prefix`` (None: none)."""
    stripped = prefix.rstrip(b"\xff")
    return stripped[:-1] + bytes([stripped[-1] + 1]) if stripped else None
