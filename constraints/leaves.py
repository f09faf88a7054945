"""Leaves of a pushdown grammar: terminals (string bodies, numbers, formats, keys) as shared
DFAs, a length-counted string leaf, and each leaf state's walk of the vocabulary, computed
once per tokenizer and reused by every grammar that calls the leaf."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field

import numpy as np

from . import native
from .bitmask import pack_token_ids
from .fsm import ByteDFA
from .vocab import TokenizerInfo


@dataclass(frozen=True, slots=True)
class CountedLeaf:
    """A string leaf with minLength/maxLength kept as a count at run time: ``dfa`` is the
    unbounded quoted string (any text, or a pattern's one character class repeated: C* for
    ``^C{m,n}$``, json_leaves.counted_class_run), ``starts_char[q, b]`` says byte b in state
    q begins a character."""

    dfa: ByteDFA
    lo: int
    hi: int | None
    starts_char: np.ndarray = None  # [states, 256]: how much the byte raises the count (bool: 0/1)

    @classmethod
    def of_plain_string(cls, dfa: ByteDFA, lo: int, hi: int | None) -> CountedLeaf:
        return cls(dfa, lo, hi, _char_starts(dfa))

    def __hash__(self) -> int:
        return hash((id(self.dfa), self.lo, self.hi))

    def __eq__(self, other) -> bool:
        return (isinstance(other, CountedLeaf) and other.dfa is self.dfa
                and (other.lo, other.hi) == (self.lo, self.hi))


def _char_starts(dfa: ByteDFA) -> np.ndarray:
    """In a quoted plain string ``"chars*"``, a character starts wherever the closing quote
    could come instead (between characters), on any byte but the quote."""
    quote = dfa.trans[:, ord('"')]
    between = (quote >= 0) & dfa.accept[np.maximum(quote, 0)]
    starts = between[:, None] & (dfa.trans[:, :256] >= 0)
    starts[:, ord('"')] = False
    return starts


@dataclass(frozen=True, slots=True)
class LeafWalk:
    """One leaf state's walk of the whole vocabulary, valid in every grammar using the leaf."""

    inside: np.ndarray  # packed row: tokens whose bytes all stay inside the leaf
    exit_pos: np.ndarray  # layout positions of tokens that may leave it with bytes left...
    exit_col: np.ndarray  # ...and the byte each would continue from in the caller
    # Counted leaves only (empty in a walk without character counts, whose row is enough):
    inside_pos: np.ndarray  # layout positions of the tokens that stay inside...
    inside_count: np.ndarray  # ...and the characters each starts...
    inside_closes: np.ndarray  # ...and whether it ends the leaf (then the minimum applies)
    exit_count: np.ndarray  # characters started before each exit (0 without counts)
    max_inside_count: int  # (at least the most, until the inside tokens are listed or bucketed)
    _counted_rows: dict = field(default_factory=dict)  # (need, room) -> inside_row's row
    _exits_within: dict = field(default_factory=dict)  # (need, room) -> exits_within's mask
    _by_count: list = field(default_factory=list)  # _rows_by_count, once built
    # A counted walk made as a row: the inside tokens are listed with their counts only when
    # a row near the count's bounds needs them (most states of a string never come near).
    _unlisted: tuple | None = None  # (dfa, q, starts) to list them from
    _listed: list = field(default_factory=list)  # [inside_pos, inside_count, inside_closes, most]

    def _listing(self, info: TokenizerInfo) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        if self._unlisted is None:
            return self.inside_pos, self.inside_count, self.inside_closes, self.max_inside_count
        if not self._listed:
            members, count, closes, *_ = _walked(info, *self._unlisted)
            self._listed[:] = [members, count, closes, int(count.max()) if len(count) else 0]
        return tuple(self._listed)

    def inside_row(self, need: int, room: int, info: TokenizerInfo) -> np.ndarray:
        """Packed row of the tokens that stay inside a counted leaf with ``need`` characters
        still to come before it may close and ``room`` characters left (both clamped to one
        token's reach by the caller); cached, so every grammar using the leaf shares it."""
        most = self._by_count[2] if self._by_count else self._listed[3] if self._listed else self.max_inside_count
        if need == 0 and room >= most:
            return self.inside
        row = self._counted_rows.get((need, room))
        if row is None:
            by_count = None if room < 0 else self._rows_by_count(info)
            if room < 0:
                row = np.zeros_like(self.inside)
            elif by_count is not None:  # two or three word operations
                open_upto, closing_upto = by_count
                top = len(open_upto) - 1
                row = open_upto[min(room, top)] | closing_upto[min(room, top)]
                if need > 0:  # a token that closes the leaf needs at least ``need`` characters
                    row = row & ~closing_upto[min(need - 1, top)]
            else:
                inside_pos, inside_count, inside_closes, _ = self._listing(info)
                fits = (inside_count <= room) & (~inside_closes | (inside_count >= need))
                row = pack_token_ids(info.layout.token_ids[inside_pos[fits]], info.vocab_size)
            if len(self._counted_rows) >= _COUNTED_ROWS_MAX:
                self._counted_rows.clear()
            self._counted_rows[(need, room)] = row
        return row

    def exits_within(self, need: int, room: int) -> np.ndarray | None:
        """Which exits leave a counted leaf with between ``need`` and ``room`` characters
        started before them (a bool mask over exit_pos), None where none does; cached, as
        inside_row is (every count of a string meets its exits again)."""
        key = (need, room)
        found = self._exits_within.get(key, _NOT_KEPT)  # one lookup: fills on other threads clear it
        if found is not _NOT_KEPT:
            return found
        ok = (self.exit_count >= need) & (self.exit_count <= room)
        found = ok if ok.any() else None
        if len(self._exits_within) >= _COUNTED_ROWS_MAX:
            self._exits_within.clear()
        self._exits_within[key] = found
        return found

    def _rows_by_count(self, info: TokenizerInfo) -> tuple[np.ndarray, np.ndarray] | None:
        """Packed rows [max count + 1, words] of the inside tokens with at most c characters,
        those that leave the leaf open and those that close it, built once per leaf state in
        C (a pass over the ~48k inside tokens of a string state, then every (need, room) row
        is word operations); None without the extension (each row is then packed alone). A
        walk made as a row that keeps many tokens (a string's body) has a row walk write their
        counts and C bucket them, never listing them here: a fixed cost (~0.2 ms) that a
        listing of a few thousand tokens undercuts."""
        mod = native.module()
        if mod is None:
            return None
        if (not self._by_count and self._unlisted is not None and not self._listed
                and _bits(self.inside) >= _BUCKET_FROM):
            dfa, q, starts = self._unlisted
            found = native.leaf_rows_by_count(mod, dfa.trans, dfa.accept, starts, info.layout.lexicographic_arrays(),
                                              q, info.vocab_size)
            if found is not None:
                self._by_count[:] = found
        if not self._by_count:
            inside_pos, inside_count, inside_closes, most = self._listing(info)
            words = len(self.inside)
            found: list[np.ndarray] = []
            for closes in (False, True):
                pick = inside_closes == closes
                rows = np.zeros((most + 1, words), dtype=np.int32)
                mod.rows_by_count(np.ascontiguousarray(info.layout.token_ids[inside_pos[pick]], dtype=np.int64),
                                  np.ascontiguousarray(inside_count[pick], dtype=np.int64), rows, words)
                found.append(rows)
            self._by_count[:] = [*found, most]
        return self._by_count[0], self._by_count[1]


_BUCKET_FROM = 8192  # inside tokens from which a counted walk's rows by count are bucketed in C


def _bits(row: np.ndarray) -> int:
    """The tokens a packed row holds."""
    count = getattr(np, "bitwise_count", None)  # numpy 2
    return int(count(row.view(np.uint32)).sum()) if count is not None else int(np.unpackbits(row.view(np.uint8)).sum())


_LEAF_WALKS_MAX = 8192
_COUNTED_ROWS_MAX = 512  # per leaf state: rows of 6 KB each
_NOT_KEPT = object()  # exits_within's cache has no entry (None is one: no exit fits)
_SPELLINGS_MAX = 64  # leaf DFAs whose token grouping is kept (about 0.4 MB each)


def leaf_walk(info: TokenizerInfo, dfa: ByteDFA, q: int,
              starts_char: np.ndarray | None = None) -> LeafWalk:
    cache = info.leaf_walks
    key = (dfa, q, starts_char is not None)
    hit = cache.get(key)
    if hit is not None:
        return hit
    walk, language = _same_language_walk(info, dfa, q, starts_char)
    if walk is None:
        walk = _row_walk(info, dfa, q, starts_char)
    if walk is None:
        members, inside_count, inside_end, exit_members, exit_col, exit_count = _walked(info, dfa, q, starts_char)
        walk = LeafWalk(pack_token_ids(info.layout.token_ids[members], info.vocab_size),
                        exit_members, exit_col, members, inside_count, inside_end,
                        exit_count, int(inside_count.max()) if len(inside_count) else 0)
    if len(cache) >= _LEAF_WALKS_MAX:  # oldest first; admission threads fill it too
        try:
            cache.pop(next(iter(cache)), None)
        except (RuntimeError, StopIteration):
            pass
    cache[key] = walk
    if language is not None:
        languages = info.leaf_languages
        if len(languages) >= _LEAF_WALKS_MAX:
            languages.clear()
        languages[language[0]] = (dfa, (*language[1], q))
    return walk


# Leaf states looked up by their language: those that reach at most this many states (hashing
# costs what they hold), with at least this many bytes going on (a string's body: its walk
# keeps most of the vocabulary, ~150 us; a narrower state walks the few tokens its bytes begin,
# fewer microseconds than the lookup would cost).
_SHARED_LANGUAGE_STATES = 64
_SHARED_LIVE_BYTES = 128


def _same_language_walk(info: TokenizerInfo, dfa: ByteDFA, q: int, starts_char: np.ndarray | None):
    """The walk of a state of another leaf that accepts the same language from there (its
    reachable automaton the same up to renaming, counts included): every walk of the
    vocabulary from the two is the same. A string's body recurs in many leaves (a plain
    string, a string that is not one of a few values, a format's free part), each a new
    ByteDFA whose body state was walked anew (~150-250 us of a fill each). Returns (the walk
    or None, the key to file this state's walk under where none was found, or None where the
    state reaches too many states to be looked up: hashing costs what they hold)."""
    mod = native.module()
    if mod is None or walked_whole(dfa) or int(np.count_nonzero(dfa.trans[q, :256] >= 0)) < _SHARED_LIVE_BYTES:
        return None, None
    tables = (np.ascontiguousarray(dfa.trans, dtype=np.int32), np.ascontiguousarray(dfa.accept, dtype=bool),
              None if starts_char is None else np.ascontiguousarray(starts_char, dtype=np.uint8))
    found = mod.right_hash(*tables, q, _SHARED_LANGUAGE_STATES)
    if found is None:
        return None, None
    language = (found[0], starts_char is not None)
    twin = info.leaf_languages.get(language)
    if twin is not None:
        walk = info.leaf_walks.get((twin[0], twin[1][-1], starts_char is not None))
        if walk is not None and mod.same_right(*tables, q, *twin[1]):
            return walk, None
    return None, (language, tables)


_WALKED_WHOLE: list[ByteDFA] = []  # leaves whose every state is walked at their first grammar


def walk_whole(dfa: ByteDFA) -> ByteDFA:
    """Mark ``dfa``, a shared leaf whose states outputs wander all over (any JSON value: 621
    states, one per place in three levels of nesting), to have every state's walk computed
    when a grammar of a tokenizer first calls it (``walk_marked_leaves``, at compile: ~0.1 s
    once), instead of one walk of the vocabulary at each state's first visit in a fill."""
    if not any(d is dfa for d in _WALKED_WHOLE):
        _WALKED_WHOLE.append(dfa)
    return dfa


_SAME: dict[tuple, ByteDFA] = {}  # the leaves same_leaf has made or met, by content
_SAME_MAX = 4096
_SAME_BYTES_MAX = 256 << 20  # their tables' bytes (a long pattern's leaf is megabytes)
_SAME_LOCK = threading.Lock()
_same_bytes = 0


def same_leaf(trans: np.ndarray, accept: np.ndarray, whole: bool = False) -> ByteDFA:
    """The process's one ByteDFA of this content, made on first sight, and marked to be
    walked whole where ``whole``: how a leaf pickled by a compile worker is unpickled
    (compile_worker.loads_grammar), so grammars loaded apart share their leaves' walks. The
    leaves marked whole outlive a full registry's clearing (else each clearing would mark a
    new copy of the any-value leaf)."""
    global _same_bytes
    digest = hashlib.blake2b(trans.tobytes(), digest_size=16)
    digest.update(accept.tobytes())
    key = (trans.shape, trans.dtype.str, digest.digest())
    with _SAME_LOCK:
        found = _SAME.get(key)
        if found is None:
            if len(_SAME) >= _SAME_MAX or _same_bytes + trans.nbytes > _SAME_BYTES_MAX:
                kept = {k: d for k, d in _SAME.items() if walked_whole(d)}
                _SAME.clear()
                _SAME.update(kept)
                _same_bytes = sum(d.trans.nbytes for d in kept.values())
            found = _SAME[key] = ByteDFA(trans, accept)
            _same_bytes += trans.nbytes
    return walk_whole(found) if whole else found


def walked_whole(dfa: ByteDFA) -> bool:
    """Whether ``dfa`` is marked by walk_whole."""
    return any(d is dfa for d in _WALKED_WHOLE)


def walk_marked_leaves(info: TokenizerInfo, rules: list) -> None:
    """The walks of every state of the marked leaves among ``rules`` (walk_whole), where not
    computed yet for this tokenizer. In C only: the vectorized walks would take seconds."""
    if not info.walks_leaves_whole or native.module() is None:
        return
    for dfa in _WALKED_WHOLE:
        if any(r is dfa for r in rules) and (dfa, dfa.num_states - 1, False) not in info.leaf_walks:
            for q in range(dfa.num_states):
                leaf_walk(info, dfa, q)


def _row_walk(info: TokenizerInfo, dfa: ByteDFA, q: int, starts: np.ndarray | None = None) -> LeafWalk | None:
    """A walk that needs no per-token lists: the C walk sets the inside tokens in the row
    itself (a string body's state keeps ~48k tokens: listing, indexing and packing them cost
    as much as the walk, ~0.9 ms). With character counts (``starts``) the exits carry theirs
    and the inside tokens are listed later, if ever a row near the count's bounds needs
    them. None without the extension."""
    mod = native.module()
    found = None if mod is None else native.leaf_row(mod, dfa.trans, dfa.accept, info.layout.lexicographic_arrays(),
                                                      q, info.vocab_size, starts)
    if found is None:
        return None
    row, (exit_pos, exit_col, exit_count) = found
    none = np.zeros(0, dtype=np.int64)
    if starts is None:
        return LeafWalk(row, exit_pos, exit_col, none, none, np.zeros(0, dtype=bool), exit_count, 0)
    most = info.layout.columns.shape[0] * max(int(starts.max(initial=1)), 1)  # a token's most
    return LeafWalk(row, exit_pos, exit_col, none, none, np.zeros(0, dtype=bool), exit_count,
                    most, _unlisted=(dfa, q, starts))


def _walked(info: TokenizerInfo, dfa: ByteDFA, q: int, starts_char: np.ndarray | None) -> tuple:
    """The tokens whose first byte ``q`` allows, walked from it: (inside positions,
    characters, ends accepting, exit positions, columns, characters before). In C as a trie
    where the extension builds (native.py); else vectorized here, walking one token per
    group of tokens the leaf cannot tell apart once a leaf is walked widely."""
    layout = info.layout
    mod = native.module()
    if mod is not None:
        found = native.leaf_walk(mod, dfa.trans, dfa.accept, starts_char, layout.lexicographic_arrays(), q)
        if found is not None:
            return (*found[0], *found[1])
    first = layout.starting_with(np.nonzero(dfa.trans[q, :256] >= 0)[0])
    spellings = _spellings(info, dfa, starts_char) if len(first) > _GROUP_FROM else None
    if spellings is None:
        return _flat(_walk(layout, dfa, q, starts_char, first))
    reps = spellings.reps[(dfa.trans[q, :256] >= 0)[layout.columns[0, spellings.reps]]]
    inside, exits = _walk(layout, dfa, q, starts_char, reps)
    members, rec = spellings.members_of(inside[0])
    exit_members, exit_rec = spellings.members_of(exits[0])
    return (members, inside[1][rec], inside[2][rec], exit_members, exits[1][exit_rec], exits[2][exit_rec])


def _flat(walked: tuple) -> tuple:
    return (*walked[0], *walked[1])


def _walk(layout, dfa: ByteDFA, q: int, starts_char: np.ndarray | None, pos: np.ndarray):
    """Layout positions ``pos`` walked from ``q``, one byte column at a time: (positions
    that stay inside, characters each starts, whether it ends accepting) and (positions
    that may leave with bytes left, the column they would leave at, characters before)."""
    # Positions ascend, so lengths do: the tokens ending at a column are a prefix.
    lens = layout.lengths[pos]
    flat = dfa.trans[:, :256].reshape(-1)  # int32: a view for leaves (no call columns)
    cur = np.full(len(pos), q, dtype=flat.dtype)
    count = np.zeros(len(pos), dtype=np.int64)
    starts = None if starts_char is None else starts_char.reshape(-1)
    accept = dfa.accept
    inside, inside_n, inside_end, exit_pos, exit_col, exit_n = [], [], [], [], [], []
    width = layout.columns.shape[0]
    for j in range(width + 1):
        k = int(np.searchsorted(lens, j, side="right"))
        if k:
            inside.append(pos[:k])
            inside_n.append(count[:k])
            inside_end.append(accept[cur[:k]])
            pos, cur, count, lens = pos[k:], cur[k:], count[k:], lens[k:]
        if not len(pos) or j == width:
            break
        if j:
            out = accept[cur]
            if out.any():
                exit_pos.append(pos[out])
                exit_col.append(np.full(int(out.sum()), j, dtype=np.int64))
                exit_n.append(count[out])
        at = cur * 256 + layout.columns[j, pos]
        if starts is not None:
            count = count + starts[at]
        cur = flat[at]
        live = cur >= 0
        if not live.all():
            pos, cur, count, lens = pos[live], cur[live], count[live], lens[live]
    empty = np.zeros(0, dtype=np.int64)
    return ((np.concatenate(inside or [empty]), np.concatenate(inside_n or [empty]),
             np.concatenate(inside_end or [np.zeros(0, dtype=bool)])),
            (np.concatenate(exit_pos or [empty]), np.concatenate(exit_col or [empty]),
             np.concatenate(exit_n or [empty])))


@dataclass(frozen=True, slots=True)
class _Spellings:
    """The vocabulary grouped by what one leaf DFA sees of a token: its length and the class
    of each byte (bytes whose columns, transitions and character starts, are the same in
    every state act alike). Tokens alike in both walk alike from every state of the leaf,
    so one representative per group is walked and the result copied to its members: a
    pattern's few classes leave a few hundred groups of the 49k tokens."""

    reps: np.ndarray  # [R] layout positions, one per group (its first member)
    group: np.ndarray  # [N] int32: layout position -> its group
    starts: np.ndarray  # [G + 1] int32: group g's members are members[starts[g]:starts[g + 1]]
    members: np.ndarray  # [N] int32 layout positions, grouped

    def members_of(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every member of the groups of ``pos`` (representatives), and which entry of
        ``pos`` each came from."""
        g = self.group[pos]
        lo = self.starts[g].astype(np.int64)
        sizes = self.starts[g + 1].astype(np.int64) - lo
        rec = np.repeat(np.arange(len(pos)), sizes)
        idx = np.arange(int(sizes.sum())) + np.repeat(lo - (np.cumsum(sizes) - sizes), sizes)
        return self.members[idx].astype(np.int64), rec


def _spellings(info: TokenizerInfo, dfa: ByteDFA, starts_char: np.ndarray | None) -> _Spellings | None:
    """The leaf's token groups, from its _GROUP_AFTER-th wide walk on (None before that, or
    where the groups would share little): grouping costs a few walks, so leaves walked from
    one or two states never pay for it."""
    cache = info.leaf_spellings
    key = (dfa, starts_char is not None)
    hit = cache.pop(key, 0)
    if isinstance(hit, int) and hit + 1 >= _GROUP_AFTER:
        hit = _group_tokens(info.layout, _byte_classes(dfa, starts_char))
    elif isinstance(hit, int):
        hit += 1
    while len(cache) >= _SPELLINGS_MAX:
        cache.pop(next(iter(cache)), None)
    cache[key] = hit  # most recently used last
    return hit if isinstance(hit, _Spellings) else None


def _byte_classes(dfa: ByteDFA, starts_char: np.ndarray | None) -> np.ndarray:
    """[256] class of each byte: bytes with equal columns share one (a hash of each column,
    checked against the class's first byte; a collision splits nothing wrongly: it falls
    back to one class per byte)."""
    cols = dfa.trans[:, :256].astype(np.int64)
    if starts_char is not None:
        cols = np.concatenate([cols, starts_char.astype(np.int64)])
    weights = np.random.default_rng(0).integers(1, 2**62, size=len(cols), dtype=np.int64)
    with np.errstate(over="ignore"):
        h = (cols.T.astype(np.uint64) * weights.astype(np.uint64)).sum(axis=1)
    _, first, cls = np.unique(h, return_index=True, return_inverse=True)
    cls = cls.reshape(-1)
    if not (cols.T == cols.T[first[cls]]).all():
        cls = np.arange(256)
    return cls.astype(np.uint64)


_HASH_STEP = np.uint64(0x100000001B3)
_MIN_SHARING = 8  # tokens per group on average below which tokens are walked one by one
_GROUP_FROM = 4096  # walks from fewer tokens than this go token by token
_GROUP_AFTER = 3  # wide walks of a leaf before its tokens are grouped


def _group_tokens(layout, cls: np.ndarray) -> _Spellings | None:
    """Groups by (length, class string): a hash over the columns (tokens are sorted by
    length, so column j touches only the tokens longer than j), then every member checked
    against its group's first; None on a collision or where groups share little."""
    n = len(layout.lengths)
    firsts = np.searchsorted(layout.lengths, np.arange(layout.columns.shape[0]), side="right")
    h = layout.lengths.astype(np.uint64)
    with np.errstate(over="ignore"):
        for j, a in enumerate(firsts.tolist()):
            h[a:] = h[a:] * _HASH_STEP + cls[layout.columns[j, a:]] + np.uint64(1)
    _, first, group = np.unique(h, return_index=True, return_inverse=True)
    group = group.reshape(-1)
    rep_of = first[group]
    same = bool((layout.lengths[rep_of] == layout.lengths).all())
    for j, a in enumerate(firsts.tolist()):
        if not same:
            break
        same = bool((cls[layout.columns[j, a:]] == cls[layout.columns[j, rep_of[a:]]]).all())
    if not same or len(first) > n // _MIN_SHARING:  # walking the groups would save little
        return None
    order = np.argsort(group, kind="stable")
    starts = np.searchsorted(group[order], np.arange(len(first) + 1))
    return _Spellings(np.sort(first), group.astype(np.int32), starts.astype(np.int32),
                      order.astype(np.int32))
