"""uniqueItems over strings, numbers and open values, checked in the matcher at the token that
decides it.

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

Open values (kind "value", or "value:integer" / "value:number" where numbers are items too):
items that are objects taking any further member, arrays taking any further item, strings
whose every prefix goes on in infinitely many ways, or numbers as above
(json_compound.unique_item_kind decides). Every prefix of such an item has infinitely many
completions, all different values, so refusing the few that equal earlier items never leaves
a dead end. The item's raw bytes are kept (nested containers and strings included) and its
value compared when it closes, as validators compare: objects unordered, arrays in order,
true never equal to 1.

Bounded items (kind "value+texts", ":string" where strings are items): strings with maxLength
or a pattern, and closed objects of strings, string enums, booleans and null (CloudFormation's
Tags with maxLength), of closed objects and arrays of those, and of a oneOf of them with one
container per branch (Travis's webhooks; json_compound.canonical). Our grammar spells each such
value one way (no whitespace, members in schema order, one escape per character), so two items
are equal exactly where their texts are,
and a prefix no finished item's text starts with has a new completion. Where the item written
so far is such a prefix, a search along the finished texts (the automaton's next bytes, off
them at the first chance) decides whether a new completion is left; the token that leaves none
is refused. json_compound also requires an alternative of over a million values (an array
never runs out of new items within any context), or strings alone of at least minItems values
(the kind names a lower bound on their number, ``value+texts#n``): once n items are written,
a comma is refused where the same search finds no new item after it.

Tracker states are immutable tuples, one per accepted step, so rollback is popping them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from .bitmask import unpack_bitmask

_WS = frozenset(b" \t\n\r")
_NUMBER_BYTES = frozenset(b"0123456789+-.eE")
_ZEROS = (b"0", b"-0")
_LITERALS = (b"true", b"false", b"null")
_MAX_CACHED = 4096
_SEARCH_NODES = 50_000
TEXTS = "value+texts"  # bounded strings, closed objects of them: compared by their one spelling


@dataclass(frozen=True, slots=True)
class _Array:
    """One open unique array: its container depth, the kind of its items, the canonical
    values of its finished items, and the raw bytes of the item being written (None between
    items)."""

    depth: int
    kind: str  # "string" | "number" | "integer" | "value" | "value:integer" | "value:number"
    seen: frozenset
    item: bytes | None = None
    texts: frozenset = frozenset()  # kind "value+texts": the finished items' texts
    opened: object = None  # the automaton's state after the array's "[" (which array it is)

    @property
    def number_kind(self) -> str:
        """How a number item's zero prefixes are read: "integer" or "number"."""
        return self.kind.rpartition(":")[2] if self.kind.startswith("value") else self.kind

    @property
    def in_container(self) -> bool:
        """Whether the item being written is an object or array (open values only)."""
        return self.item is not None and self.item[:1] in (b"{", b"[")

    @property
    def in_string_item(self) -> bool:
        return self.kind == "string" or self.item is not None and self.item[:1] == b'"'


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


def _token_features(tokens: list[bytes]) -> tuple[np.ndarray, ...]:
    """Per token: may open and close a string item (two quotes), has a quote, has a digit,
    how many closers, whether it opens a container, has a comma, may begin a literal (t, f,
    n). Built once per tokenizer, by counts over the tokens' bytes laid end to end (a loop
    over 49k tokens took 0.2 s)."""
    lens = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    flat = np.frombuffer(b"".join(tokens), dtype=np.uint8)
    ends = np.cumsum(lens)
    starts = ends - lens

    def count(mask: np.ndarray) -> np.ndarray:  # per token, its bytes where mask holds
        running = np.concatenate(([0], np.cumsum(mask, dtype=np.int64)))
        return running[ends] - running[starts]

    quotes = count(flat == ord('"'))
    return (quotes >= 2, quotes >= 1, count((flat >= ord("0")) & (flat <= ord("9"))) > 0,
            count((flat == ord("}")) | (flat == ord("]"))),
            count((flat == ord("{")) | (flat == ord("["))) > 0, count(flat == ord(",")) > 0,
            count((flat == ord("t")) | (flat == ord("f")) | (flat == ord("n"))) > 0)


def canonical(raw: bytes):
    """The value a finished item's text stands for, as uniqueness compares them."""
    return json.loads(raw)


def canonical_value(raw: bytes):
    """Any JSON value as JSON Schema's equality sees it: hashable, objects unordered, arrays
    in order, numbers by value (1 and 1.0 alike), booleans apart from numbers."""
    return _canon(json.loads(raw))


def scalar_key(v) -> tuple | None:
    """A scalar's hashable key, equal exactly where JSON Schema's equality is: numbers by
    value (1 and 1.0 alike), booleans apart from them; None for an array or object."""
    if isinstance(v, bool) or v is None:
        return ("literal", v)
    if isinstance(v, (int, float)):
        return ("number", v)
    if isinstance(v, str):
        return ("string", v)
    return None


def _canon(v):
    key = scalar_key(v)
    if key is not None:
        return key
    if isinstance(v, list):
        return ("array", tuple(_canon(x) for x in v))
    return ("object", frozenset((k, _canon(x)) for k, x in v.items()))


class UniqueItems:
    """Follows one automaton's unique arrays through the output; shared by its matchers."""

    def __init__(self, automaton):
        self.automaton = automaton
        features = automaton.info.unique_item_features
        if features is None:
            features = automaton.info.unique_item_features = _token_features(automaton.info.token_bytes)
        (self._two_quotes, self._quote, self._digit, self._closers, self._opener, self._comma,
         self._letter) = features
        # Tokens that may begin or end an item compared as texts (a bracket), or ask at a comma
        # whether a new item is left; and those of them with a quote (inside a string).
        self._text_edges = self._opener | (self._closers > 0) | self._comma
        self._text_edges_quoted = self._text_edges & self._quote
        self._fresh: dict = {}  # (item prefix, finished texts) -> whether a new item goes on

    # -- following the output ---------------------------------------------------------------
    def rests_to_seen(self, tracker: Tracker) -> list[bytes]:
        """The bytes that would make the string item being written equal to a finished item
        of its array (each finished string spelled as the grammar spells it, json.dumps's one
        spelling, that begins with the item so far; the closing quote not included)."""
        a = tracker.arrays[-1] if tracker.arrays else None
        if a is None or a.item is None or a.depth != tracker.depth or not a.in_string_item or tracker.escaped:
            return []
        out = []
        for value in a.seen:  # a string's value: itself ("string" items) or ("string", it)
            text = value[1] if type(value) is tuple and value[:1] == ("string",) else value
            if not isinstance(text, str):
                continue
            spelled = json.dumps(text, ensure_ascii=False).encode()[:-1]
            if len(spelled) > len(a.item) and spelled.startswith(a.item):
                out.append(spelled[len(a.item):])
        return out

    def feed(self, tracker: Tracker, state, data: bytes) -> Tracker:
        """The tracker after ``data`` read from automaton ``state``; raises Duplicate, also
        where an item of closed objects has only its forced rest left and that rest finishes
        a duplicate (the token that leaves no other way is the one refused)."""
        t = tracker
        for i, b in enumerate(data):
            t = self._byte(t, b, state, data, i)
        if any(a.item is not None and a.kind.startswith("value+ahead") for a in t.arrays):
            after = self.automaton.advance(state, data)
            rest = b"" if after is None else self.automaton.forced_bytes(after)
            u = t
            for i, b in enumerate(rest):
                u = self._byte(u, b, after, rest, i)
        for a in t.arrays:
            if a.kind.startswith(TEXTS) and a.item is not None and _extends(a.texts, a.item):
                if not self._goes_on_new(state, data, a):
                    raise Duplicate
        return t

    def _goes_on_new(self, state, data: bytes, a: _Array) -> bool:
        """Whether the item written so far in ``a`` (a prefix of some finished item's text),
        ``data`` read from ``state``, has a completion no finished item has: a search along
        the finished texts only, since the first byte the automaton allows off them starts a
        text none has (one spelling per value, ``json_compound._closed_of_texts``). Cached by
        the array (two arrays of other items may hold the same texts), the prefix and the
        texts; the automaton is stepped only where the search runs."""
        key = (a.opened, a.item, a.texts)
        out = self._fresh.get(key)
        if out is None:
            if len(self._fresh) >= _MAX_CACHED:
                self._fresh.clear()
            out = self._fresh[key] = self._search_new(self.automaton.advance(state, data), a.item, a.texts)
        return out

    def _search_new(self, state, item: bytes, texts: frozenset) -> bool:
        """The search goes down only where every byte the automaton allows continues some
        finished text (an enum used up, a string at its maxLength), so it visits at most the
        finished texts' bytes; past _SEARCH_NODES (far more than any output's items hold in
        practice) it gives up and lets the token through."""
        todo = [(state, item)]
        visited = 0
        while todo:
            visited += 1
            if visited > _SEARCH_NODES:
                return True
            state, item = todo.pop()
            after = {s[len(item)] for s in texts if len(s) > len(item) and s.startswith(item)}
            for group in self.automaton.byte_classes(state):
                nxt = self.automaton.advance(state, bytes((group[0],)))
                if nxt is None:
                    continue
                for b in group:
                    if not item and b in _WS:  # before the item (flexible whitespace): bounded
                        todo.append((nxt, item))
                    elif b not in after:
                        return True  # off every finished text: a new item
                    longer = item + bytes((b,))
                    if longer not in texts:  # a finished text's prefix: search on
                        todo.append((nxt, longer))
        return False

    def _byte(self, t: Tracker, b: int, state, data: bytes, i: int) -> Tracker:
        t = _capture(t, b)
        if t.arrays and t.arrays[-1].depth == t.depth:
            t = self._in_array(t, t.arrays[-1], b, state, data, i)
        else:
            t = self._outside_items(t, b, state, data, i)
        a = t.arrays[-1] if t.arrays else None
        if a is not None and a.depth == t.depth and a.in_container:  # an open value closed
            return _finished(t, a, _value_of(a))
        return t

    def _outside_items(self, t: Tracker, b: int, state, data: bytes, i: int) -> Tracker:
        """A byte outside any item the tracker compares: strings and container depth."""
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
                opened = self.automaton.advance(state, data[:i + 1])
                kind = self.automaton.unique_kind(opened)
                if kind is not None:
                    t = _with(t, arrays=t.arrays + (_Array(t.depth, kind, frozenset(), opened=opened),))
            return t
        if b in b"]}":
            return _with(t, depth=t.depth - 1)
        return t

    def _in_array(self, t: Tracker, a: _Array, b: int, state, data: bytes, i: int) -> Tracker:
        if not a.item:  # between items; b"": a comma of an array compared as texts was read
            if b == 0x2C and a.kind.startswith(TEXTS) and len(a.seen) >= _least_values(a.kind):
                return _item(t, a, b"", in_string=False)  # an item is due: feed checks one is left
            if b in _WS or b == 0x2C:
                return t
            if b == 0x5D:
                return _with(t, depth=t.depth - 1, arrays=t.arrays[:-1])
            if a.kind == "string" or a.kind.startswith("value") and b == 0x22:
                return _item(t, a, b'"', True)
            if a.kind.startswith("value") and b in b"[{":
                # An open value's container: nested strings, depths and unique arrays are
                # followed as anywhere else, its bytes kept (_capture) until it closes.
                t = _item(t, a, bytes((b,)), in_string=False)
                return self._outside_items(t, b, state, data, i)
            if a.kind.startswith("value") and b in b"tfn":  # true, false, null
                return _item(t, a, bytes((b,)), in_string=False)
            return self._number_byte(t, a, b"", b)
        if a.in_string_item:
            item = a.item + bytes((b,))
            if t.escaped:
                return _item(t, a, item, in_string=True)
            if b == 0x5C:
                return _with(_item(t, a, item, in_string=True), escaped=True)
            if b != 0x22:
                return _item(t, a, item, in_string=True)
            return _finished(t, a, _value_of(a, item), item)
        if a.item[:1] in (b"t", b"f", b"n"):  # a literal is finished by its last letter
            item = a.item + bytes((b,))
            return _finished(t, a, _value_of(a, item), item) if item in _LITERALS else _item(t, a, item, False)
        if b in _NUMBER_BYTES:
            return self._number_byte(t, a, a.item, b)
        t = _finished(t, a, _value_of(a))
        return self._in_array(t, t.arrays[-1], b, state, data, i)

    @staticmethod
    def _number_byte(t: Tracker, a: _Array, written: bytes, b: int) -> Tracker:
        item = written + bytes((b,))
        zero = ("number", 0) if a.kind.startswith("value") else 0
        if zero in a.seen and _only_zero(a.number_kind, item):
            raise Duplicate
        return _item(t, a, item, in_string=False)

    # -- masks ----------------------------------------------------------------------------
    def ban(self, tracker: Tracker, state, row: torch.Tensor) -> torch.Tensor:
        """``row`` without the tokens that would finish a duplicate item (a new tensor when
        any is taken out)."""
        watched = [a for a in tracker.arrays if a.seen]
        if not watched:
            return row
        candidates = self._candidates(tracker, watched[0])
        for a in watched[1:]:
            candidates = candidates | self._candidates(tracker, a)
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
        if a.kind.startswith(TEXTS):
            return self._texts_candidates(t, a)
        if a.kind.startswith("value"):
            return self._value_candidates(t, a)
        if a.kind != "string":
            return np.ones(len(self._digit), dtype=bool) if a.item is not None else self._digit
        if a.item is None or t.escaped or not _prefix_of_seen(a):
            return self._two_quotes  # only a token with a whole item in it
        return self._quote

    def _texts_candidates(self, t: Tracker, a: _Array) -> np.ndarray:
        """Tokens after which the item may be a finished one's prefix (the only place a dead
        end can be): those that begin or end an item (a brace in them, or a quote where
        strings are items), and those that go on along a finished text from the item written
        so far."""
        if t.in_string:  # inside a string (an item or a member): it ends only at a quote
            out = self._quote if a.kind.endswith(":string") else self._text_edges_quoted
        else:  # string items begin and end at a quote
            out = self._text_edges | self._quote if a.kind.endswith(":string") else self._text_edges
        if a.item is None:  # a literal item (null beside strings) begins at its first letter
            return out if t.in_string else out | self._letter
        out = out.copy()
        info = self.automaton.info
        ids, longest = info.ids_by_bytes, info.layout.max_len
        n = len(a.item)
        for s in a.texts:
            if s.startswith(a.item):
                for k in range(n + 1, min(len(s), n + longest) + 1):
                    tok = ids.get(s[n:k])
                    if tok is not None:
                        out[tok] = True
        return out

    def _value_candidates(self, t: Tracker, a: _Array) -> np.ndarray:
        if a.kind.startswith("value+ahead"):
            # Closed objects: a token after which the rest is forced, which ends outside a
            # string (open members are endless: inside one, infinitely many ways go on).
            if a.item is None:  # a literal's first letter leaves its rest forced
                return self._two_quotes | self._opener | self._digit | self._letter
            return self._quote if t.in_string else ~(self._quote & ~self._two_quotes)
        if a.item is None:  # a token with a whole item in it
            return self._two_quotes | self._opener & (self._closers > 0) | self._digit
        if a.in_container:  # closing every container down to the array's (a string first)
            closing = self._closers >= t.depth - a.depth
            return closing & self._quote if t.in_string else closing
        if a.in_string_item:
            return self._quote
        return np.ones(len(self._digit), dtype=bool)


@lru_cache(maxsize=256)
def _least_values(kind: str) -> int:
    """How many values the items of a ``value+texts#n`` kind take at least (n): while fewer
    are written, a comma certainly has a new item after it, and no search runs (each search
    reads every finished text: quadratic over a long array)."""
    return int(kind.partition("#")[2].partition(":")[0] or 0)


def _capture(t: Tracker, b: int) -> Tracker:
    """``b`` appended to every open value being written that it lies inside."""
    if not any(a.in_container and t.depth > a.depth for a in t.arrays):
        return t
    arrays = tuple(_Array(a.depth, a.kind, a.seen, a.item + bytes((b,)), a.texts, a.opened)
                   if a.in_container and t.depth > a.depth else a for a in t.arrays)
    return Tracker(t.in_string, t.escaped, t.depth, arrays)


def _value_of(a: _Array, item: bytes | None = None):
    raw = a.item if item is None else item
    if not a.kind.startswith("value"):
        return canonical(raw)
    try:
        return canonical_value(raw)
    except ValueError:  # not one JSON value: never expected; compared by its bytes then
        return ("raw", raw)


def _only_zero(kind: str, item: bytes) -> bool:
    """Whether every number that starts with ``item`` is 0: the integer "0" (no digit may
    follow a leading zero), or a zero mantissa once its exponent has begun."""
    if kind == "integer":
        return item in _ZEROS
    mantissa, e, _ = item.lower().partition(b"e")
    return bool(e) and not mantissa.strip(b"-0.")


def _extends(texts: frozenset, item: bytes) -> bool:
    return any(s.startswith(item) for s in texts)


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
    return Tracker(in_string, False, t.depth, t.arrays[:-1] + (_Array(a.depth, a.kind, a.seen, item, a.texts, a.opened),))


def _finished(t: Tracker, a: _Array, value, raw: bytes | None = None) -> Tracker:
    if value in a.seen:
        raise Duplicate
    texts = a.texts | {a.item if raw is None else raw} if a.kind.startswith(TEXTS) else a.texts
    return Tracker(False, False, t.depth, t.arrays[:-1] + (_Array(a.depth, a.kind, a.seen | {value}, None, texts, a.opened),))
