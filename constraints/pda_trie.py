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


def trie_walk(pda: PushdownAutomaton, config: Config) -> tuple[np.ndarray, int]:
    """Tokens allowed from a structural configuration, found by walking the sorted
    vocabulary as a trie: while few bytes may come next (keys, punctuation) each byte
    narrows the run of tokens with that prefix by bisection, through the automaton's
    cached byte steps; where many may (a value's start, a string body) the tokens left
    in the run are walked together, vectorized, from there on."""
    tokens, ids, positions = pda.info.layout.lexicographic()
    found: list[np.ndarray] = []
    lowest = len(config[0])
    todo = [(frozenset([config]), b"", 0, len(tokens))]
    while todo:
        state, prefix, lo, hi = todo.pop()
        closure = pda._closure(state)
        lowest = min(lowest, pda._depth(state))
        if prefix and tokens[lo] == prefix:  # the prefix itself is a token: it ends here
            found.append(ids[lo:lo + 1])
            lo += 1
        if lo >= hi:
            continue
        if hi - lo < _TRIE_MIN_RUN:  # a few tokens left: step each through the cache
            keep = []
            for i in range(lo, hi):
                alive, depth = pda._ends_alive(state, tokens[i][len(prefix):])
                lowest = min(lowest, depth)
                if alive:
                    keep.append(i)
            found.append(ids[keep])
            continue
        allowed = pda._next_bytes(state, closure)
        if len(allowed) == 1 and len(state) == 1:
            (stack, g), = state
            if not pda._branches[g]:  # a key's letters: followed in one go
                _key_run(pda, stack, g, prefix, lo, hi, tokens, ids, found, todo)
                continue
        if len(allowed) > _TRIE_BRANCHING:
            more, low = walk_tokens(pda, closure, positions[lo:hi],
                                    np.full(hi - lo, len(prefix), dtype=np.int64))
            found.append(more)
            lowest = min(lowest, low)
            continue
        for b in allowed:
            nxt = pda._step(state, b)
            if nxt is None:
                continue
            key = prefix + bytes([b])
            start = bisect_left(tokens, key, lo, hi)
            end = bisect_left(tokens, prefix + bytes([b + 1]), start, hi) if b < 255 else hi
            if start < end:
                todo.append((nxt, key, start, end))
    if not found:
        return np.zeros(0, dtype=np.int64), lowest
    return np.concatenate(found), lowest  # disjoint runs of the sorted vocabulary


def _key_run(pda: PushdownAutomaton, stack: tuple[int, ...], g: int, prefix: bytes, lo: int,
             hi: int, tokens: list[bytes], ids: np.ndarray, found: list, todo: list) -> None:
    """From one configuration at a position with one live byte and no calls or returns (a
    key's letters): the run of such positions read off the rule's table, one bisection per
    byte and no automaton states built. Tokens (of the sorted run [lo, hi) starting with
    ``prefix``) that end inside the run go to ``found``; those going past it to ``todo``, as
    the trie walk would have reached them one byte at a time. The stack is not read."""
    one, branch, trans = pda._one_byte, pda._branches, pda._trans
    limit = pda._max_token_len - len(prefix)
    run = bytearray()
    key = prefix
    while one[g] >= 0 and len(run) < limit:
        b = one[g]
        g = int(trans[g, b])
        run.append(b)
        key = prefix + bytes(run)
        lo = bisect_left(tokens, key, lo, hi)
        if lo >= hi or not tokens[lo].startswith(key):
            return  # no token goes this far
        if branch[g]:
            break
        if tokens[lo] == key and one[g] >= 0:
            found.append(ids[lo:lo + 1])  # a token ending inside the run
            lo += 1
    if not run:
        return
    above = successor(key)
    end = hi if above is None else bisect_left(tokens, above, lo, hi)
    if lo < end:
        todo.append((frozenset([(stack, g)]), key, lo, end))


def successor(prefix: bytes) -> bytes | None:
    """The least byte string above every string that starts with ``prefix`` (None: none)."""
    stripped = prefix.rstrip(b"\xff")
    return stripped[:-1] + bytes([stripped[-1] + 1]) if stripped else None
