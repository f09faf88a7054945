"""GrammarMatcher: one request's position in a compiled constraint (a small history of states)."""

from __future__ import annotations

import numpy as np
import torch

from .automaton import State, TokenAutomaton
from .closing import closing_for
from .unique_items import Duplicate, Tracker


class GrammarMatcher:
    """Tracks accepted tokens; cheap to create (one per request), states shared via the automaton.

    The history holds one entry per accepted token (or accepted string), so rollback(k) pops k:
    the automaton state, whether EOS ended it, and where the automaton has unique arrays, the
    duplicate check's tracker (unique_items.py).
    """

    __slots__ = ("_automaton", "_history", "_terminated", "_unique", "_closing", "_bitmask",
                 "_words")

    def __init__(self, automaton: TokenAutomaton):
        self._automaton = automaton
        self._history: list[tuple[State, bool, Tracker | None]] = []
        self._terminated = False
        self._unique = automaton.unique_items
        self._closing = None  # closing_for(automaton), looked up on the first budgeted fill
        self._bitmask = None  # the last CPU bitmask filled, and its numpy view (_words)
        self._words = None

    @property
    def _state(self) -> State:
        return self._history[-1][0] if self._history else self._automaton.initial

    @property
    def _tracker(self) -> Tracker | None:
        if self._unique is None:
            return None
        return self._history[-1][2] if self._history else Tracker()

    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; False (state unchanged) if the token is not allowed here."""
        if self._terminated:
            return False
        info = self._automaton.info
        if token_id in info.eos_token_ids:
            if not self._automaton.is_accepting(self._state):
                return False
            self._push(self._state, True, self._tracker)
            return True
        if not 0 <= token_id < info.vocab_size or not info.token_bytes[token_id]:
            return False
        return self._advance(info.token_bytes[token_id])

    def accept_string(self, text: str | bytes) -> bool:
        """Advance by raw text (after jump-forward); counts as one step for rollback."""
        if self._terminated:
            return False
        return self._advance(text.encode() if isinstance(text, str) else text)

    def _advance(self, data: bytes) -> bool:
        nxt = self._automaton.advance(self._state, data)
        if nxt is None:
            return False
        tracker = self._tracker
        if tracker is not None:
            try:
                tracker = self._unique.feed(tracker, self._state, data)
            except Duplicate:
                return False
        self._push(nxt, False, tracker)
        return True

    def _push(self, state: State, terminated: bool, tracker: Tracker | None) -> None:
        self._history.append((state, terminated, tracker))
        self._terminated = terminated

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, row: int = 0,
                                max_tokens: int | None = None) -> None:
        """Write the allowed-token row into bitmask[row] ([rows, ceil(V/32)] int32). With
        ``max_tokens`` (the tokens left, this one included), only tokens after which the
        output can still finish within them (constraints.closing)."""
        if self._terminated:
            bitmask[row].zero_()
            return
        history = self._history
        state = history[-1][0] if history else self._automaton.initial
        narrowed = None
        if max_tokens is not None:
            closing = self._closing
            if closing is None:
                closing = self._closing = closing_for(self._automaton)
            if max_tokens - 1 < closing.far or self._automaton.pruned:  # else far from any row
                narrowed = closing.budget_row(state, max_tokens)
        if narrowed is None and self._unique is None:
            words = self._words if bitmask is self._bitmask else self._words_of(bitmask)
            if words is not None:  # the common case, without torch's per-call overhead
                self._automaton.fill_words(state, words, row)
                return
        allowed = narrowed if narrowed is not None else self._automaton.mask_row(state)
        if self._unique is not None:
            if narrowed is not None:
                allowed = self._without_traps(allowed, state, max_tokens)
            allowed = self._without_duplicates(allowed, narrowed is not None)
        bitmask[row].copy_(allowed)

    def _words_of(self, bitmask: torch.Tensor):
        """A numpy view of a CPU int32 bitmask (cached for the last one), else None."""
        if bitmask is self._bitmask:
            return self._words
        if bitmask.device.type != "cpu" or bitmask.dtype != torch.int32 or bitmask.dim() != 2:
            return None
        self._bitmask, self._words = bitmask, bitmask.numpy()
        return self._words

    def _without_duplicates(self, allowed: torch.Tensor, narrowed: bool) -> torch.Tensor:
        """The row less tokens that finish a duplicate array item. The closing bound does not
        know of duplicates: where they take every token of a budget row, the plain mask
        (less duplicates) applies, so the output goes on rather than stopping invalid."""
        out = self._unique.ban(self._tracker, self._state, allowed)
        if narrowed and not out.any():
            out = self._unique.ban(self._tracker, self._state, self._automaton.mask_row(self._state))
        return out

    def _without_traps(self, allowed: torch.Tensor, state: State, max_tokens: int) -> torch.Tensor:
        """A budget row less the tokens that make the string item being written equal to a
        finished one of its unique array where the state after them has no slack (its bound
        is all the tokens left): its fewest completion closes the string at once, which the
        duplicate check refuses, and nothing is left to write the item on. A model that
        repeats its items met this (SchemaStore's size-limit paths, cut off at max_tokens).
        Kept where it is the only token."""
        rests = self._unique.rests_to_seen(self._tracker)
        if not rests:
            return allowed
        ids, out = self._automaton.info.ids_by_bytes, None
        for rest in rests:
            tok = ids.get(rest)
            if tok is None or not (int(allowed[tok >> 5]) >> (tok & 31)) & 1:
                continue
            after = self._automaton.advance(state, rest)
            if after is None or self._closing.bound(after) < max_tokens - 1:
                continue  # room to write the item on
            if out is None:
                out = allowed.clone()
            words = out.numpy().view(np.uint32)
            words[tok >> 5] &= ~np.uint32(1 << (tok & 31))
        return allowed if out is None or not out.any() else out

    def min_tokens_to_finish(self) -> float:
        """Tokens (EOS included) that suffice to finish from here: an upper bound on the
        fewest, inf if none was found (constraints.closing)."""
        if self.is_terminated():
            return 0
        return closing_for(self._automaton).bound(self._state)

    def finishes_within(self, tokens: int) -> bool:
        """Whether ``tokens`` suffice to finish from here, as ``min_tokens_to_finish() <=
        tokens`` (or that is inf), but searching only where a search-free bound says no."""
        return self.is_terminated() or closing_for(self._automaton).finishes_within(self._state, tokens)

    def is_terminated(self) -> bool:
        """EOS accepted, or the text is complete and nothing more can follow."""
        if self._terminated:
            return True
        state = self._state
        return self._automaton.is_accepting(state) and not self._automaton.can_continue(state)

    def can_terminate(self) -> bool:
        return self._terminated or self._automaton.is_accepting(self._state)

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > len(self._history):
            raise ValueError(f"cannot roll back {num_tokens} of {len(self._history)} steps")
        if num_tokens:
            del self._history[-num_tokens:]
        self._terminated = bool(self._history) and self._history[-1][1]

    def find_jump_forward_string(self) -> str:
        """The text every continuation must start with ("" if not exactly one)."""
        if self._terminated:
            return ""
        data = self._automaton.forced_bytes(self._state)
        return data.decode("utf-8", errors="ignore") if _complete_utf8(data) else _trim(data)

    def reset(self) -> None:
        self._history.clear()
        self._terminated = False

    @property
    def num_accepted(self) -> int:
        return len(self._history)


def _complete_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _trim(data: bytes) -> str:
    # A forced run may stop inside a multi-byte character: return only whole characters.
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        if _complete_utf8(data[:cut]):
            return data[:cut].decode("utf-8")
    return ""
