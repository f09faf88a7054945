"""One automaton for a reasoning model's constrained reply: a ``<think> ... </think>`` block,
then the constraint (a JSON schema, say) from the first byte after the block's whitespace.

``optional``: the reply may open with the block or go straight to the constraint (Qwen3 with
thinking on or off). ``open``: the prompt already opened the block (DeepSeek-R1), so the reply
starts inside it and must close it. Inside the block any bytes are allowed except the closing
tag itself; the constraint starts at the first byte that cannot continue the prefix (a body
that starts with whitespace or ``<`` would be ambiguous and is not supported; JSON never does).

States are ``("p", prefix DFA state)`` or ``("b", body state)``; the prefix is a small byte
DFA (the opening tag, a KMP matcher of the closing tag, then whitespace), the body is any
``TokenAutomaton``. A token may cross from the prefix into the body (``"</think>\\n{"``).
"""

from __future__ import annotations

import numpy as np
import torch

from .automaton import DFAAutomaton, State, TokenAutomaton
from .fsm import DEAD, ByteDFA

OPEN_TAG, CLOSE_TAG = b"<think>", b"</think>"
_WHITESPACE = b" \t\r\n"


def think_prefix_dfa(mode: str) -> ByteDFA:
    """``optional``: (OPEN body CLOSE ws*)?; ``open``: body CLOSE ws* (body: no CLOSE in it)."""
    if mode not in ("optional", "open"):
        raise ValueError(f"reasoning prefix: unknown mode {mode!r} (optional, open)")
    opening = len(OPEN_TAG) if mode == "optional" else 0  # states 0 .. len(OPEN) - 1 match the tag
    body0 = opening  # KMP states body0 + k: k bytes of CLOSE matched
    done = body0 + len(CLOSE_TAG)
    trans = np.full((done + 1, 256), DEAD, dtype=np.int32)
    accept = np.zeros(done + 1, dtype=bool)
    for i in range(opening):
        trans[i, OPEN_TAG[i]] = i + 1
    if opening:
        accept[0] = True  # no block at all
    fail = _kmp_failure(CLOSE_TAG)
    for k in range(len(CLOSE_TAG)):
        for byte in range(256):
            j = k
            while j and CLOSE_TAG[j] != byte:
                j = fail[j - 1]
            trans[body0 + k, byte] = body0 + (j + 1 if CLOSE_TAG[j] == byte else 0)
    for byte in _WHITESPACE:
        trans[done, byte] = done
    accept[done] = True
    return ByteDFA(trans, accept)


def _kmp_failure(pattern: bytes) -> list[int]:
    fail, k = [0] * len(pattern), 0
    for i in range(1, len(pattern)):
        while k and pattern[i] != pattern[k]:
            k = fail[k - 1]
        if pattern[i] == pattern[k]:
            k += 1
        fail[i] = k
    return fail


class AfterThinkAutomaton(TokenAutomaton):
    """``prefix`` bytes, then ``body``'s language (see the module docstring)."""

    def __init__(self, body: TokenAutomaton, mode: str):
        super().__init__(body.info)
        self.body = body
        self.prefix = DFAAutomaton(body.info, think_prefix_dfa(mode))
        layout = body.info.layout
        self._position = np.zeros(body.info.vocab_size, dtype=np.int64)  # token id -> layout position
        self._position[layout.token_ids] = np.arange(len(layout.token_ids))
        self._body_first = np.array([body.advance(body.initial, bytes([b])) is not None for b in range(256)])

    @property
    def initial(self) -> State:
        return ("p", 0)

    def advance(self, state: State, data: bytes) -> State | None:
        kind, s = state
        if kind == "b":
            nxt = self.body.advance(s, data)
            return None if nxt is None else ("b", nxt)
        trans, accept = self.prefix.dfa.trans, self.prefix.dfa.accept
        for i, byte in enumerate(data):
            nxt = int(trans[s, byte])
            if nxt == DEAD:
                if not accept[s]:
                    return None
                body = self.body.advance(self.body.initial, data[i:])
                return None if body is None else ("b", body)
            s = nxt
        return ("p", s)

    def is_accepting(self, state: State) -> bool:
        kind, s = state
        return self.body.is_accepting(s) if kind == "b" else False

    def can_continue(self, state: State) -> bool:
        kind, s = state
        return self.body.can_continue(s) if kind == "b" else super().can_continue(state)

    def mask_row(self, state: State) -> torch.Tensor:
        kind, s = state
        return self.body.mask_row(s) if kind == "b" else super().mask_row(state)

    def forced_bytes(self, state: State) -> bytes:
        kind, s = state
        if kind == "b":
            return self.body.forced_bytes(s)
        return b"" if self.prefix.dfa.accept[s] else self.prefix.forced_bytes(s)

    def allowed_token_ids(self, state: State) -> np.ndarray:
        kind, s = state
        if kind == "b":
            return self.body.allowed_token_ids(s)
        inside = self.prefix.allowed_token_ids(s)  # tokens that stay in the prefix
        return np.union1d(inside, self._crossing_tokens(s)).astype(np.int64)

    def _crossing_tokens(self, s: int) -> np.ndarray:
        """Tokens that finish the prefix and go on into the body: the prefix walk meets a byte
        it cannot take while in an accepting state, and the body takes the rest."""
        layout, trans, accept = self.info.layout, self.prefix.dfa.trans, self.prefix.dfa.accept
        found: list[np.ndarray] = []
        if accept[s]:  # the token starts the body at its first byte
            starts = self.body.allowed_token_ids(self.body.initial)
            first = layout.columns[0, self._position[starts]]
            found.append(starts[trans[s, first] == DEAD])
        alive = np.arange(len(layout.token_ids))
        cur = np.full(len(alive), s, dtype=np.int64)
        for j in range(layout.columns.shape[0]):
            longer = layout.lengths[alive] > j
            alive, cur = alive[longer], cur[longer]
            if not len(alive):
                break
            byte = layout.columns[j, alive]
            nxt = trans[cur, byte]
            dead = nxt == DEAD
            if j:  # crossing after j bytes of prefix: few tokens (the body's first byte), checked one by one
                for pos in alive[dead & accept[cur] & self._body_first[byte]]:
                    data = layout.columns[j : int(layout.lengths[pos]), pos].tobytes()
                    if self.body.advance(self.body.initial, data) is not None:
                        found.append(layout.token_ids[pos : pos + 1])
            alive, cur = alive[~dead], nxt[~dead]
        return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
