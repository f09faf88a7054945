"""uniqueItems over strings and numbers, checked in the matcher at the token that decides it.

A grammar cannot say "no item twice" over an infinite item language, so the compiler emits
such an array as a rule of its own (pushdown.py marks its states with the item kind) and the
matcher follows the output with a small JSON lexer: the items of every open unique array are
kept as the values a validator reads (``json.loads``: decoded strings; numbers as Python int or
float, so 1, 1.0 and 1e0 are one value, as JSON Schema's equality has it, and numbers that
differ only past double precision count as equal, as validators reading floats see them). A token that would finish an item equal to an
earlier one is taken out of the mask and refused by ``accept_token``.

Exact, not a subset: item schemas are restricted (json_compound.unique_item_kind) to
languages where every prefix of an item has infinitely many completions (a string without
maxLength, pattern, format or enum; a number without an upper bound or multipleOf), so a
banned token never leaves the output without a way to go on, except where a number's prefix
can only become 0 (the integer ``0``, a zero mantissa with an exponent begun): those prefixes
are refused as soon as they are written, once 0 is an item.

Tracker states are immutable tuples, one per accepted step, so rollback is popping them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import torch

from .bitmask import unpack_bitmask

_WS = frozenset(b" \t\n\r")
_NUMBER_BYTES = frozenset(b"0123456789+-.eE")
_ZEROS = (b"0", b"-0")


@dataclass(frozen=True, slots=True)
class _Array:
    """One open unique array: its container depth, the kind of its items, the canonical
    values of its finished items, and the raw bytes of the item being written (None between
    items)."""

    depth: int
    kind: str  # "string" | "number" | "integer"
    seen: frozenset
    item: bytes | None = None


@dataclass(frozen=True, slots=True)
class Tracker:
    """The lexer's position (string, escape, container depth) and the open unique arrays,
    innermost last."""

    in_string: bool = False
    escaped: bool = False
    depth: int = 0
    arrays: tuple[_Array, ...] = ()


class Duplicate(Exception):
    """The bytes finish an item equal to an earlier one of its array."""


def canonical(raw: bytes):
    """The value a finished item's text stands for, as uniqueness compares them."""
    return json.loads(raw)


class UniqueItems:
    """Follows one automaton's unique arrays through the output; shared by its matchers."""

    def __init__(self, automaton):
        self.automaton = automaton
        tokens = automaton.info.token_bytes
        quotes = np.array([b.count(b'"') for b in tokens])
        self._two_quotes = quotes >= 2  # may open and close a string item
        self._quote = quotes >= 1
        self._digit = np.array([any(48 <= c <= 57 for c in b) for b in tokens])

    # -- following the output ---------------------------------------------------------------
    def feed(self, tracker: Tracker, state, data: bytes) -> Tracker:
        """The tracker after ``data`` read from automaton ``state``; raises Duplicate."""
        t = tracker
        for i, b in enumerate(data):
            t = self._byte(t, b, state, data, i)
        return t

    def _byte(self, t: Tracker, b: int, state, data: bytes, i: int) -> Tracker:
        if t.arrays and t.arrays[-1].depth == t.depth:
            return self._in_array(t, t.arrays[-1], b, state, data, i)
        if t.in_string:
            if t.escaped:
                return _with(t, escaped=False)
            if b == 0x5C:
                return _with(t, escaped=True)
            return _with(t, in_string=b != 0x22)
        if b == 0x22:
            return _with(t, in_string=True)
        if b in b"[{":
            t = _with(t, depth=t.depth + 1)
            if b == 0x5B:
                kind = self.automaton.unique_kind(self.automaton.advance(state, data[:i + 1]))
                if kind is not None:
                    t = _with(t, arrays=t.arrays + (_Array(t.depth, kind, frozenset()),))
            return t
        if b in b"]}":
            return _with(t, depth=t.depth - 1)
        return t

    def _in_array(self, t: Tracker, a: _Array, b: int, state, data: bytes, i: int) -> Tracker:
        if a.item is None:
            if b in _WS or b == 0x2C:
                return t
            if b == 0x5D:
                return _with(t, depth=t.depth - 1, arrays=t.arrays[:-1])
            return self._number_byte(t, a, b"", b) if a.kind != "string" else _item(t, a, b'"', True)
        if a.kind == "string":
            item = a.item + bytes((b,))
            if t.escaped:
                return _item(t, a, item, in_string=True)
            if b == 0x5C:
                return _with(_item(t, a, item, in_string=True), escaped=True)
            if b != 0x22:
                return _item(t, a, item, in_string=True)
            return _finished(t, a, canonical(item))
        if b in _NUMBER_BYTES:
            return self._number_byte(t, a, a.item, b)
        t = _finished(t, a, canonical(a.item))
        return self._in_array(t, t.arrays[-1], b, state, data, i)

    @staticmethod
    def _number_byte(t: Tracker, a: _Array, written: bytes, b: int) -> Tracker:
        item = written + bytes((b,))
        if 0 in a.seen and _only_zero(a.kind, item):
            raise Duplicate
        return _item(t, a, item, in_string=False)

    # -- masks ----------------------------------------------------------------------------
    def ban(self, tracker: Tracker, state, row: torch.Tensor) -> torch.Tensor:
        """``row`` without the tokens that would finish a duplicate item (a new tensor when
        any is taken out)."""
        if not tracker.arrays or tracker.arrays[-1].depth != tracker.depth:
            return row
        a = tracker.arrays[-1]
        if not a.seen and a.item is None:
            return row
        candidates = self._candidates(tracker, a)
        bits = unpack_bitmask(row.numpy(), self.automaton.info.vocab_size)
        ids = np.nonzero(bits & candidates)[0]
        tokens = self.automaton.info.token_bytes
        banned = []
        for tok in ids.tolist():
            try:
                self.feed(tracker, state, tokens[tok])
            except Duplicate:
                banned.append(tok)
        if not banned:
            return row
        out = row.clone()
        words = out.numpy().view(np.uint32)
        banned = np.array(banned, dtype=np.int64)
        np.bitwise_and.at(words, banned >> 5, ~(np.uint32(1) << (banned & 31).astype(np.uint32)))
        return out

    def _candidates(self, t: Tracker, a: _Array) -> np.ndarray:
        """Tokens that could finish an item equal to a seen one (a superset)."""
        if a.kind != "string":
            return np.ones(len(self._digit), dtype=bool) if a.item is not None else self._digit
        if a.item is None or t.escaped or not _prefix_of_seen(a):
            return self._two_quotes  # only a token with a whole item in it
        return self._quote


def _only_zero(kind: str, item: bytes) -> bool:
    """Whether every number that starts with ``item`` is 0: the integer "0" (no digit may
    follow a leading zero), or a zero mantissa once its exponent has begun."""
    if kind == "integer":
        return item in _ZEROS
    mantissa, e, _ = item.lower().partition(b"e")
    return bool(e) and not mantissa.strip(b"-0.")


def _prefix_of_seen(a: _Array) -> bool:
    try:
        written = json.loads(a.item + b'"')
    except ValueError:  # inside an escape: anything may follow
        return True
    return any(isinstance(v, str) and v.startswith(written) for v in a.seen)


def _with(t: Tracker, **changes) -> Tracker:
    fields = {"in_string": t.in_string, "escaped": t.escaped, "depth": t.depth, "arrays": t.arrays}
    fields.update(changes)
    return Tracker(**fields)


def _item(t: Tracker, a: _Array, item: bytes, in_string: bool) -> Tracker:
    return Tracker(in_string, False, t.depth, t.arrays[:-1] + (_Array(a.depth, a.kind, a.seen, item),))


def _finished(t: Tracker, a: _Array, value) -> Tracker:
    if value in a.seen:
        raise Duplicate
    return Tracker(False, False, t.depth, t.arrays[:-1] + (_Array(a.depth, a.kind, a.seen | {value}),))
