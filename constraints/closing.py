"""Budget-aware closing: how many tokens a grammar state still needs to finish, and which tokens
keep a request able to finish within the tokens it has left.

Termination. A matcher is done when it is terminated (accepting, and no token may follow:
0 more tokens) or when it is accepting and then samples EOS (1 token).

Bound. ``bound(s)`` is an upper bound on the fewest tokens from state ``s`` to termination,
computed lazily and cached per state, and every cached value has a witness: ``s`` terminates
at that cost, or some allowed token leads from ``s`` to a state whose cached bound is at most
``bound(s) - 1``. It is found from a shortest byte string (of bytes that are tokens by
themselves) from ``s`` to an accepting state: where the automaton knows its fewest bytes to
finish (``min_bytes_to_accept``, the grammar's distances, completion.py) the string is the
automaton's ``shortest_completion`` or a descent along those distances, checked by walking
it; elsewhere a breadth-first search over bytes finds it. The fewest vocabulary tokens that spell that string
(a small dynamic program) plus the termination cost is the bound, and every state at a token
boundary of that spelling is given the count left from there (its witness is the next token
of the spelling). When a state's tokens are walked (see budget rows) its bound also drops to
``1 + the smallest bound after one token``. Cached values only ever go down, so a witness
stays one. The bound is exact when a fewest-byte completion is also a fewest-token one
(typical for JSON, whose shortest completions are closing punctuation and empty values);
otherwise it is above the true minimum, never below.

Budget rows. With ``r`` tokens left in state ``s``, the budget row keeps the allowed tokens
``t`` with ``bound(advance(s, t)) <= r - 1``, and EOS where ``s`` accepts (EOS costs the one
token it is). When every allowed token fits, there is no budget row: the plain mask applies.

No slack. With ``r == bound(s)`` only tokens on a fewest-token completion fit. The search
that gave the bound kept its way (bytes to an accepting end, and the fewest tokens that spell
each suffix of it), and every state along it knows where it stands on it; the row is then the
tokens that begin a fewest-token spelling of the rest of the way (EOS too where ``s``
accepts), each entered on the way with its bound, without walking the vocabulary. It is a
subset of the budget row (one fewest completion rather than all of them: a request at its
last tokens closes along the one the search found); where the way gives no token the budget
rows are built. A request that reaches its max_tokens spends its last tokens here.

Guarantee. Let a request start in the initial state with a budget ``B >= bound(initial)``
and sample from the budget row at every step. Then ``bound(s) <= r`` holds before every step:
it holds at the start, and the sampled token leads to a state whose bound is at most
``r - 1``, the next step's budget. So the row is never empty (it holds the witness token,
or EOS), and the output reaches termination within ``B`` tokens: complete and valid. Text
appended without sampling (jump-forward) keeps the invariant only if the bound after it is
at most the budget left after its tokens; the engine checks that and otherwise appends none.

Margin. Building a state's budget rows walks the vocabulary and bounds every state one token
away, so it is done only where the budget may bind: with ``r - 1 < bound(s) + margin``. Further
from the budget every allowed token is kept. The guarantee then rests on no single token
raising the bound by more than the margin (64 tokens, and twice the largest rise seen in any
state whose rows were built, for the rest of the automaton's life); a token that commits to a
branch needing more than that many tokens more, met far from the budget, could leave a
request short. The tokens of JSON schemas rise the bound by a few tokens.

Far from the budget no search runs at all: the fewest bytes to finish plus EOS is at least
the bound a search would find (every byte of the way is a token), so a state with
``r - 1 >= that + margin`` keeps every token, as it would with the searched bound; the
answer is kept per state and read without the lock on later fills. Where bytes say too
little (a schema whose shortest instance is hundreds of bytes), a pushdown's shortest
completion cut where its frames return (``completion_segments``) gives a tighter value
without a search: each segment spelled in its fewest tokens on its own (cached by its
bytes: a deep structure's callers recur from state to state) plus EOS, at least what the
search finds spelling the same bytes whole.

Near the budget, before any budget row is built, one vocabulary walk with no search proves
the common case: if every end state's cached bound, or else its fewest bytes plus EOS, or
else its segmented bound, is at most ``r - 1``, every token fits (exact, no margin), and that
is kept for the state. The walk records only the distinct end states (not which token ends
where), and where the state's own segmented bound is below ``r`` (slack: no tight row can be
needed) the check runs before the state's search, which it then spares; an end state's
segmented bound is kept for the fill that meets it next. The ends a token along the state's
way reaches take their bounds from the way (no search) when the budget rows are built. A
way's spellings are continued from the last way spelled where the two share a suffix (the
closing of one structure seen from the next state), so consecutive searches cost their new
bytes.

Cost. States are interned into a byte-transition table filled on demand (one ``advance``
per group of bytes that lead alike (``byte_classes``) the first time a state is met, the automaton's own
caches behind them), so the search is a walk over table rows and the vocabulary walk behind a budget row is one numpy
gather per byte column, as for a DFA. Budget rows are packed once per (state, distinct
threshold) and reused by every request.

Everything goes through the ``TokenAutomaton`` interface: ``initial``, ``advance``,
``is_accepting``, ``can_continue``, ``mask_row`` and ``min_bytes_to_accept`` (and a pushdown's
``shortest_completion`` and ``completion_segments`` where it has them).
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass

import numpy as np
import torch

from . import native
from .automaton import State, TokenAutomaton
from .bitmask import pack_token_ids
from .token_ends import TokenEnds

_UNKNOWN = -2  # a table entry not computed yet
_DEAD = -1
# A search that meets more states gives up, and so do all later ones of the automaton (their
# bounds are infinite: no budget rows, the plain mask applies), so a grammar too wide to
# search costs one search, not one per step.
MAX_SEARCH_STATES = 20_000
_SEGMENTS_MAX = 4096
MARGIN = 64  # tokens of slack above a state's bound below which its budget rows are built


class ClosingDistance:
    """Bounds and budget rows of one automaton; thread-safe (intake and mask threads share it)."""

    def __init__(self, automaton: TokenAutomaton):
        # Weakly: closing_for keeps this in a WeakKeyDictionary keyed by the automaton, so a
        # strong reference back would keep every automaton ever budgeted alive for good.
        self._automaton = weakref.ref(automaton)
        self._graph = _ByteGraph(automaton)
        self._vocab = automaton.info.ids_by_bytes
        self._prefixes = automaton.info.layout.prefix_starts()  # read for membership only
        self._max_token_len = automaton.info.layout.max_len
        self._single_bytes = automaton.info.single_byte_tokens
        self._fewest: dict[int, int | None] = {}  # interned state -> min_bytes_to_accept
        # state -> (value, plus margin): no budget row while remaining - 1 >= value (+ margin);
        # a value only ever stands above the one the full check would use (bounds only drop).
        self._fits: dict[State, tuple[float, bool]] = {}
        self._eos = np.array(automaton.info.eos_token_ids, dtype=np.int64)
        self._bounds: dict[int, float] = {}  # interned state -> bound
        self._levels: dict[int, _Levels] = {}
        self._ways: dict[int, tuple[_Way, int]] = {}  # interned state -> the way it is on, where
        self._segment_tokens: dict[bytes, float] = {}  # completion segment -> fewest tokens
        self._segmented: dict[State, float] = {}  # state -> _segmented_tokens
        self._last_spelled: tuple[bytes, np.ndarray, np.ndarray] = (
            b"", np.zeros(1), np.zeros(1, dtype=np.int64))
        self._last_ends: tuple[int, tuple] = (-1, ())  # the last state's _token_ends
        self._lock = threading.RLock()
        self._margin = MARGIN  # grows to twice the largest one-token rise seen (see Margin)
        self._exhausted = False  # a search met MAX_SEARCH_STATES: no more searches (bound inf)
        self._most_bytes: int | None | bool = False  # automaton.max_bytes_to_accept, once read
        # _every_state_fits once found (inf before): a caller may skip budget_row whenever
        # remaining - 1 >= far and the automaton is not pruned (what budget_row checks first),
        # a number read per fill instead of a call, a state hash and two lookups.
        self.far = math.inf

    @property
    def automaton(self) -> TokenAutomaton:
        return self._automaton()  # alive while a matcher of it asks (matchers hold it)

    def bound(self, state: State) -> float:
        """Tokens (EOS included) that suffice to terminate from ``state``, looking one token
        ahead (its budget rows are built on the way); inf if no completion was found."""
        with self._lock:
            sid = self._graph.intern(state)
            self._levels_of(sid, state)
            return self._bound(sid)

    def finishes_within(self, state: State, tokens: int) -> bool:
        """Whether ``tokens`` suffice to terminate from ``state`` (``bound(state) <= tokens``),
        or no bound is known (inf). Searched only where the search-free bound, the fewest bytes
        that are tokens by themselves plus EOS (at least ``bound``), is above ``tokens``: a
        request's budget is checked at admission without walking the vocabulary, and the
        search runs, if ever, on the fill that comes near the budget. The grammar's
        far-from-budget threshold (_every_state_fits) is found here too, at admission, so
        no fill of the scheduler's pays for it."""
        self._every_state_fits()
        most = self._first_fits(state)  # also what the first fill from state reads
        if most is not None and tokens >= most[0]:
            return True
        bound = self.bound(state)
        return math.isinf(bound) or tokens >= bound

    def budget_row(self, state: State, remaining: int) -> torch.Tensor | None:
        """The packed row [ceil(V/32)] of tokens after which the output can still terminate
        within ``remaining`` tokens counting them; None when every allowed token fits. If
        none fits (the budget was already short), the tokens closest to terminating."""
        fits = self._fits.get(state)  # read without the lock: one dict lookup
        if fits is None:
            if remaining - 1 >= self._every_state_fits() and not self.automaton.pruned:
                return None  # no state of the grammar is that far from its end: nothing to check
            fits = self._first_fits(state)
        if fits is not None and remaining - 1 >= fits[0] + (self._margin if fits[1] else 0):
            return None
        with self._lock:
            sid = self._graph.intern(state)
            if sid not in self._levels:
                checked = False  # whether the search-free check below ran (and failed)
                if sid not in self._bounds:
                    most = self._most_tokens(sid)  # an upper bound on the search's bound
                    if most is not None and remaining - 1 < most + self._margin:
                        most = min(most, self._segmented_tokens(state))
                    if most is not None:
                        self._fits[state] = (most, True)
                        if remaining - 1 >= most + self._margin:
                            return None  # far from the budget: every token fits (Margin)
                        if remaining > most:  # slack above the bound: no tight row, and
                            checked = True  # every token fitting spares the search too
                            if self._every_token_fits(sid, state, remaining):
                                return None
                bound = self._bound(sid)
                if remaining - 1 >= bound + self._margin:
                    self._fits[state] = (bound, True)
                    return None  # far from the budget (or no bound found): every token fits
                if remaining == bound:  # no slack: only tokens on a fewest-token completion
                    row = self._tight_row(sid, remaining)
                    if row is not None:
                        return row
                if not checked and self._every_token_fits(sid, state, remaining):
                    return None
            levels = self._levels_of(sid, state)
            if not len(levels.thresholds):
                return None  # no bound found after any token (the search gave up): plain mask
            top = levels.thresholds[-1]
            if levels.complete:  # else a token with no way to finish after it stays out
                self._fits[state] = (top, False)
                if remaining - 1 >= top:
                    return None
            k = int(np.searchsorted(levels.thresholds, remaining - 1, side="right")) - 1
            return levels.row(max(k, 0))

    def _every_token_fits(self, sid: int, state: State, remaining: int) -> bool:
        """Whether every allowed token fits ``remaining``, proved without searching (from the
        end states' search-free bounds, ``_most_after``); kept for the state where it holds."""
        most = self._most_after(sid, remaining - 1)  # None where an end is above it
        if most is None:
            return False
        self._fits[state] = (most, False)
        return True

    def _first_fits(self, state: State) -> tuple[float, bool] | None:
        """A state met for the first time: the search-free bound (``_most_tokens``) read
        straight from the automaton, without the lock or interning the state, so the many
        states far from the budget cost one distance lookup each. Writing it unlocked is
        safe: any entry another thread leaves is also a valid bound, (most, True) included."""
        if not len(self._eos):
            return None
        fewest = self.automaton.min_bytes_to_accept(state, self._single_bytes)
        if fewest is None:
            return None
        fits = self._fits[state] = (fewest + 1, True)
        return fits

    def _every_state_fits(self) -> float:
        """The tokens left (less this one) from which the search-free bound of every state
        the automaton can reach, what _first_fits would read (its fewest bytes, each a token
        by itself, plus EOS), fits with the margin. inf where that maximum is unknown
        (recursion, unreachable distances, no EOS)."""
        most = self._most_bytes
        if most is False:
            most = self._most_bytes = (self.automaton.max_bytes_to_accept(self._single_bytes)
                                       if len(self._eos) else None)
        self.far = math.inf if most is None else most + 1 + self._margin
        return self.far

    # -- bounds ---------------------------------------------------------------------------
    def _bound(self, sid: int) -> float:
        found = self._bounds.get(sid)
        if found is None:
            found = self._search(sid)
        return found

    def _termination_cost(self, sid: int) -> float:
        if not self._graph.accepting[sid]:
            return math.inf
        if not self.automaton.can_continue(self._graph.states[sid]):
            return 0
        return 1 if len(self._eos) else math.inf

    def _lower(self, sid: int, value: float) -> None:
        if value < self._bounds.get(sid, math.inf):
            self._bounds[sid] = value

    def _most_tokens(self, sid: int) -> float | None:
        """At least the bound a search would find, without searching: the search spells its
        way in bytes that are tokens by themselves, so it costs at most the grammar's fewest
        such bytes plus EOS (None where the automaton cannot tell them)."""
        if not len(self._eos):
            return None
        fewest = self._fewest_bytes(sid)
        return None if fewest is None else fewest + 1

    def _segmented_tokens(self, state: State) -> float:
        """At least the bound a search would find, cheaper than one: the automaton's shortest
        completion cut at its frames' returns (``completion_segments``), each segment spelled
        in its fewest tokens on its own (cached by its bytes: the callers' segments recur from
        state to state), plus EOS. The search spells the same bytes whole, in no more
        tokens. inf where the automaton cannot cut its completion."""
        found = self._segmented.get(state)
        if found is not None:  # an end state's, met again as the state of the next fill
            return found
        if len(self._segmented) >= _SEGMENTS_MAX:
            self._segmented.clear()
        segments = getattr(self.automaton, "completion_segments", None)
        segments = None if segments is None else segments(state, self._single_bytes)
        if segments is None or not len(self._eos):
            self._segmented[state] = math.inf
            return math.inf
        total = 1.0
        for data in segments:
            tokens = self._segment_tokens.get(data)
            if tokens is None:
                if len(self._segment_tokens) >= _SEGMENTS_MAX:
                    self._segment_tokens.clear()
                tokens = self._segment_tokens[data] = float(self._suffix_spellings(data)[0][0])
            total += tokens
        self._segmented[state] = total
        return total

    def _search(self, start: int) -> float:
        """Breadth-first over bytes to the nearest state that terminates, then the fewest
        tokens that spell the way there plus its termination cost;
        caches the bound of every token boundary on it. The search first moves only by bytes
        that are tokens themselves (so the way is spelled), then, if that finds nothing, by
        any byte (and the way may not be spelled: no bound)."""
        path = self._guided_path(start)
        if path is None and not self._exhausted:
            path = self._shortest_bytes(start, self._single_bytes)
        if path is None and not self._exhausted:
            path = self._shortest_bytes(start, np.ones(256, dtype=bool))
        way = None if path is None else self._spelled(*path)
        if way is None or math.isinf(way.cost[0]):
            self._bounds[start] = math.inf
            return math.inf
        self._enter(way, 0, start)
        return self._bounds[start]

    def _enter(self, way: _Way, pos: int, sid: int) -> None:
        """``sid`` is the state at ``pos`` of ``way``: it and the states at the cuts of the
        fewest-token spelling from there get their bound (each one's witness is the next
        token of the spelling), and remember the way for their tight rows. It stops at a
        state already entered on a way at least as cheap (the closing of the same structure
        seen from a state a token earlier): that one has its bound and a witness already, and
        so, from it, has every state after it."""
        first = True
        while pos not in way.states:
            cost = float(way.cost[pos]) + way.end_cost
            if not first and sid in self._ways and self._bounds.get(sid, math.inf) <= cost:
                return
            first = False
            way.states[pos] = sid
            self._lower(sid, cost)
            self._ways.setdefault(sid, (way, pos))
            if pos == len(way.data):
                return
            nxt = int(way.step[pos])
            sid, pos = self._graph.advance(sid, way.data[pos:nxt]), nxt

    def _shortest_bytes(self, start: int, alphabet: np.ndarray) -> tuple[bytes, int] | None:
        """Breadth-first by levels, each level one array step: every frontier state's row of
        the byte table, its live bytes in ``alphabet``, the targets not seen before in the
        order a state-by-state, byte-by-byte search would meet them (so the same tree)."""
        g = self._graph
        byte_ids = np.nonzero(alphabet)[0]
        parent_state = np.full(len(g.states), -1, dtype=np.int64)
        parent_byte = np.zeros(len(g.states), dtype=np.int64)
        seen = np.zeros(len(g.states), dtype=bool)
        seen[start] = True
        num_seen = 1
        frontier = np.array([start], dtype=np.int64)
        while len(frontier) and num_seen <= MAX_SEARCH_STATES:
            end = self._cheapest_end(frontier)
            if end is not None:
                out = bytearray()
                s = end
                while s != start:
                    out.append(int(parent_byte[s]))
                    s = int(parent_state[s])
                return bytes(reversed(out)), end
            g.expand(frontier)
            if len(g.states) > len(seen):  # expanding interned new states
                grow = len(g.states) - len(seen)
                seen = np.concatenate([seen, np.zeros(grow, dtype=bool)])
                parent_state = np.concatenate([parent_state, np.full(grow, -1, dtype=np.int64)])
                parent_byte = np.concatenate([parent_byte, np.zeros(grow, dtype=np.int64)])
            rows = g.trans[frontier][:, byte_ids]
            src, col = np.nonzero(rows >= 0)  # by state, then by byte: the order of discovery
            targets = rows[src, col].astype(np.int64)
            _, first = np.unique(targets, return_index=True)
            first = np.sort(first)
            first = first[~seen[targets[first]]]
            new = targets[first]
            seen[new] = True
            parent_state[new] = frontier[src[first]]
            parent_byte[new] = byte_ids[col[first]]
            num_seen += len(new)
            frontier = new
        if len(frontier):  # the state cap, not a dead end: later searches would meet it too
            self._exhausted = True
        return None

    def _guided_path(self, start: int) -> tuple[bytes, int] | None:
        """A shortest way in single-byte tokens to an accepting state, found by descending
        the automaton's fewest-bytes-to-finish (min_bytes_to_accept): from each state a byte
        whose next state is one byte closer. The distance is a lower bound, so a way of that
        length is a shortest one, as the breadth-first search would find; the last byte
        prefers an end that terminates (EOS costs a token). None where the automaton gives
        no distance or the descent meets a state further away than it says (the
        breadth-first search runs instead)."""
        g = self._graph
        fewest = self._fewest_bytes(start)
        if fewest is None:
            return None
        spelled = self._spelled_path(start, fewest)
        if spelled is not None:
            return spelled
        out = bytearray()
        sid = start
        for left in range(fewest, 0, -1):
            g.expand([sid])
            row = g.trans[sid]
            live = np.nonzero((row >= 0) & self._single_bytes)[0]
            targets, first = np.unique(row[live], return_index=True)
            closer = sorted((int(live[i]), t) for t, i in zip(targets.tolist(), first.tolist())
                            if self._fewest_bytes(t) == left - 1)
            if not closer:
                return None
            if left == 1:
                closer = [(b, t) for b, t in closer if g.accepting[t]]
                if not closer:
                    return None
                closer.sort(key=lambda c: self._termination_cost(c[1]))
            b, sid = closer[0]
            out.append(b)
        return (bytes(out), sid) if g.accepting[sid] else None

    def _spelled_path(self, start: int, fewest: int) -> tuple[bytes, int] | None:
        """The automaton's own shortest completion (where it can name one), checked by
        walking it: it must end accepting after exactly ``fewest`` bytes."""
        data = self.automaton.shortest_completion(self._graph.states[start], self._single_bytes)
        if data is None or len(data) != fewest:
            return None
        end = self.automaton.advance(self._graph.states[start], data)
        if end is None or not self.automaton.is_accepting(end):
            return None
        return data, self._graph.intern(end)

    def _fewest_bytes(self, sid: int) -> int | None:
        out = self._fewest.get(sid, _UNKNOWN)
        if out == _UNKNOWN:
            out = self._fewest[sid] = self.automaton.min_bytes_to_accept(
                self._graph.states[sid], self._single_bytes)
        return out

    def _cheapest_end(self, frontier: np.ndarray) -> int | None:
        """The first state of ``frontier`` with the lowest finite termination cost, if any."""
        best, best_cost = None, math.inf
        for s in frontier[self._graph.accepting[frontier]].tolist():
            cost = self._termination_cost(s)
            if cost < best_cost:
                best, best_cost = s, cost
        return best

    def _spelled(self, data: bytes, end: int) -> _Way:
        cost, step = self._suffix_spellings(data)
        return _Way(data, cost, step, self._termination_cost(end), {})

    def _suffix_spellings(self, data: bytes) -> tuple[np.ndarray, np.ndarray]:
        """The fewest tokens that spell each suffix of ``data`` and where the first token of
        such a spelling ends (a backward dynamic program: the tokens starting at i, longer
        while still a prefix of some token), as arrays of ``len(data) + 1``."""
        n = len(data)
        # A suffix shared with the last way spelled (the closing of the same structure, from
        # a state a token later) has the same spellings: only the rest is computed.
        last, last_cost, last_step = self._last_spelled
        mod = native.module()
        if mod is not None:  # in C: the shared suffix, its copy and the rest's program
            cost, step = np.empty(n + 1), np.empty(n + 1, dtype=np.int64)
            native.spell_after(mod, self.automaton.info.layout.lexicographic_arrays(), data, cost, step,
                               last, last_cost, last_step)
            self._last_spelled = (data, cost, step)
            return cost, step
        cost = np.full(n + 1, math.inf)
        cost[n] = 0
        step = np.full(n + 1, n, dtype=np.int64)
        shared = _common_suffix(data, last)
        if shared:
            cost[n - shared:] = last_cost[len(last) - shared:]
            step[n - shared:] = last_step[len(last) - shared:] - (len(last) - n)
        prefixes, vocab = self._prefixes, self._vocab
        for i in range(n - shared - 1, -1, -1):
            for j in range(i + 1, min(n, i + self._max_token_len) + 1):
                piece = data[i:j]
                if piece not in prefixes:
                    break
                if cost[j] + 1 < cost[i] and piece in vocab:
                    cost[i], step[i] = cost[j] + 1, j
        self._last_spelled = (data, cost, step)
        return cost, step

    def _tight_row(self, sid: int, remaining: int) -> torch.Tensor | None:
        """With no slack (``remaining == bound``): the tokens that start a fewest-token
        spelling of the way the state's bound came from, each leading to a state whose
        bound is ``remaining - 1`` (EOS too where the state accepts). A subset of the tokens
        the budget rows would keep, found without walking the vocabulary; None where the way
        gives none (the budget rows are built instead). Each of them is allowed, as its bytes
        begin the way (a live path from the state), so the state's own mask is not read: at
        a request's last tokens most states are new, and their masks would cost a walk."""
        ids = [token for token, _ in self._way_tokens(sid, remaining - 1)]
        if self._graph.accepting[sid]:
            ids += self._eos.tolist()  # EOS is the one token it costs
        if not ids:
            return None
        vocab_size = self.automaton.info.vocab_size
        return torch.from_numpy(pack_token_ids(np.array(ids, dtype=np.int64), vocab_size))

    def _way_tokens(self, sid: int, limit: float = math.inf) -> list[tuple[int, float]]:
        """The tokens that spell the next piece of the way ``sid`` is on (from where it stands
        on it), with the bound after each (the way's fewest tokens from there plus its end's
        cost): each state after one that fits ``limit`` is entered on the way (its bound and
        witness from the way's spelling, no search)."""
        found = self._ways.get(sid)
        if found is None:
            return []
        way, pos = found
        data, out = way.data, []
        for j in range(pos + 1, min(len(data), pos + self._max_token_len) + 1):
            piece = data[pos:j]
            if piece not in self._prefixes:
                break
            token = self._vocab.get(piece)
            cost = float(way.cost[j]) + way.end_cost
            if token is not None and cost <= limit and math.isfinite(cost):
                known = way.states.get(j)
                self._enter(way, j, self._graph.advance(sid, piece) if known is None else known)
                out.append((token, cost))
        return out

    # -- budget rows ----------------------------------------------------------------------
    def _most_after(self, sid: int, limit: float = math.inf) -> float | None:
        """At least the largest bound after any allowed token, without searching: each end
        state's cached bound, else its fewest bytes plus EOS, and where that is above
        ``limit`` its segmented bound (``_segmented_tokens``); None where an end has none of
        them, or (the check gives up at the first) where one is above ``limit``. End states
        are read as they are, not interned: most are never met again, and interning one asks
        the automaton whether it accepts."""
        if not len(self._eos):
            return None
        most = 0.0
        known, bounds, fewest = self._graph.known, self._bounds, self.automaton.min_bytes_to_accept
        for end in self._end_states(sid):
            value = bounds.get(known(end), None)
            if value is None:
                value = fewest(end, self._single_bytes)
                value = None if value is None else value + 1
                if value is None or value > limit:
                    value = min(math.inf if value is None else value, self._segmented_tokens(end))
                    if math.isinf(value):
                        return None
            if value > limit:
                return None
            most = max(most, value)
        return most

    def _end_states(self, sid: int) -> list[State]:
        """The distinct states the tokens allowed from ``sid`` end in: from a walk that does
        not record which token ends where (the automaton's ``end_states``), else from
        ``_token_ends``."""
        if self._last_ends[0] == sid:
            return [self._graph.states[e] for e in self._last_ends[1][1]]
        walk = getattr(self.automaton, "end_states", None)
        found = None if walk is None else walk(self._graph.states[sid])
        if found is None:
            return [self._graph.states[e] for e in self._token_ends(sid)[1]]
        return found

    def _token_ends(self, sid: int) -> tuple[TokenEnds, list[int]]:
        """The tokens allowed from ``sid`` grouped by the state each leads to, and those end
        states interned: in one walk where the automaton has it (``token_ends``), else
        through the byte graph."""
        if self._last_ends[0] == sid:
            return self._last_ends[1]
        walk = getattr(self.automaton, "token_ends", None)
        found = None if walk is None else walk(self._graph.states[sid])
        if found is None:
            token_ids, ends = self._graph.walk_vocab(sid)
            uniq, index = np.unique(ends, return_inverse=True)
            interned = uniq.tolist()  # the byte graph's states are interned already
            out = TokenEnds(interned, token_ids, index.reshape(-1).astype(np.int32)), interned
        else:
            out = found, [self._graph.intern(s) for s in found.ends]
        self._last_ends = (sid, out)
        return out

    def _levels_of(self, sid: int, state: State) -> _Levels:
        levels = self._levels.get(sid)
        if levels is None:
            levels = self._levels[sid] = self._build_levels(sid, state)
        return levels

    def _build_levels(self, sid: int, state: State) -> _Levels:
        """Every allowed token's bound after it, as one packed row per distinct value (a
        handful: the tokens from one state reach few distinct states), read off the walk's
        end states without listing its tokens."""
        walk, ends = self._token_ends(sid)
        self._way_tokens(sid)  # the ends on the way get their bounds without a search
        after = np.array([self._bound(e) for e in ends], dtype=np.float64)
        accepting = bool(self.automaton.is_accepting(state))
        if len(after):
            self._lower(sid, 1 + after.min())
        levels = _Levels.of(walk, after, self._eos if accepting else self._eos[:0],
                            self.automaton.mask_row(state), self.automaton.info.vocab_size)
        finite = levels.thresholds[levels.thresholds >= 0]
        if len(finite):
            self._margin = max(self._margin, 2 * int(finite[-1] + 1 - self._bound(sid)))
            if self._most_bytes is not False:
                self._every_state_fits()  # far rises with the margin
        return levels


def _common_suffix(a: bytes, b: bytes) -> int:
    """Length of the longest common suffix of ``a`` and ``b`` (a binary search of slice
    comparisons, each one a memcmp)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid:] == b[len(b) - mid:]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(slots=True)
class _Way:
    """A way from some state to an accepting end in bytes that are tokens by themselves:
    ``cost[i]`` the fewest tokens that spell ``data[i:]`` (inf where none do), ``step[i]`` the
    end of the first token of one such spelling, ``end_cost`` the end's termination cost,
    ``states`` the interned states at the positions entered so far."""

    data: bytes
    cost: np.ndarray  # float64 [len(data) + 1]
    step: np.ndarray  # int64 [len(data) + 1]
    end_cost: float
    states: dict[int, int]


@dataclass(slots=True)
class _Levels:
    """thresholds: the distinct finite bounds after one token, ascending (and -1 first where
    the state accepts); row(k): the tokens whose bound after them is <= thresholds[k], and
    EOS where the state accepts, masked. The rows are packed together on first use, one pass
    over the walk's end indices (a state's budget mostly needs one or two of them)."""

    thresholds: np.ndarray
    walk: TokenEnds
    after: np.ndarray  # the bound after each of the walk's end states
    eos: np.ndarray  # the EOS ids kept in every row (none where the state does not accept)
    mask: torch.Tensor
    vocab_size: int
    complete: bool = True  # every token has a finite bound after it
    _rows: torch.Tensor | None = None  # [len(thresholds), words], cumulative

    @classmethod
    def of(cls, walk: TokenEnds, after: np.ndarray, eos: np.ndarray, mask: torch.Tensor,
           vocab_size: int) -> _Levels:
        thresholds = np.unique(after[np.isfinite(after)]).astype(np.int64)
        if len(eos):  # with one token left, EOS alone may fit: level -1 keeps no other token
            thresholds = np.concatenate([[-1], thresholds])
        return cls(thresholds, walk, after, eos, mask, vocab_size, bool(np.isfinite(after).all()))

    def row(self, k: int) -> torch.Tensor:
        if self._rows is None:
            # Each end state's level: the first threshold at or above its bound (-1: none).
            level = np.searchsorted(self.thresholds, self.after, side="left")
            level[~np.isfinite(self.after)] = -1
            rows = self.walk.rows(level, len(self.thresholds), self.vocab_size)
            rows = np.bitwise_or.accumulate(rows, axis=0)
            if len(self.eos):
                rows |= pack_token_ids(self.eos, self.vocab_size)
            self._rows = torch.from_numpy(rows) & self.mask
        return self._rows[k]


class _ByteGraph:
    """The automaton's byte transitions between the states met so far, as a table filled
    on demand (a lazily built DFA), so searches and vocabulary walks are array lookups."""

    def __init__(self, automaton: TokenAutomaton):
        self._automaton = weakref.ref(automaton)  # weakly, as ClosingDistance holds it
        self.states: list[State] = []
        self._index: dict[State, int] = {}
        # Eight rows to start (doubled as states are met): most grammars' admission check
        # meets a few states, and every cached grammar keeps its graph.
        self.trans = np.full((8, 256), _UNKNOWN, dtype=np.int32)
        self.accepting = np.zeros(8, dtype=bool)
        self._expanded = np.zeros(8, dtype=bool)

    def known(self, state: State) -> int | None:
        """The id of ``state`` where it was interned, else None (interning nothing)."""
        return self._index.get(state)

    @property
    def automaton(self) -> TokenAutomaton:
        return self._automaton()

    def intern(self, state: State) -> int:
        sid = self._index.get(state)
        if sid is None:
            sid = self._index[state] = len(self.states)
            self.states.append(state)
            if sid == len(self.accepting):
                self._grow()
            self.accepting[sid] = self.automaton.is_accepting(state)
        return sid

    def _grow(self) -> None:
        n = 2 * len(self.accepting)
        self.trans = np.concatenate([self.trans, np.full_like(self.trans, _UNKNOWN)])
        self.accepting = np.concatenate([self.accepting, np.zeros(n // 2, dtype=bool)])
        self._expanded = np.concatenate([self._expanded, np.zeros(n // 2, dtype=bool)])

    def expand(self, sids) -> None:
        """Fill the rows of ``sids`` (an array or a list of ids) not filled yet."""
        if isinstance(sids, np.ndarray):
            sids = np.unique(sids[~self._expanded[sids]]).tolist()
        for sid in sids:
            if self._expanded[sid]:
                continue
            state = self.states[sid]
            row = np.full(256, _DEAD, dtype=np.int32)
            for group in self.automaton.byte_classes(state):
                nxt = self.automaton.advance(state, bytes((group[0],)))
                if nxt is not None:
                    row[group] = self.intern(nxt)
            self.trans[sid] = row
            self._expanded[sid] = True

    def advance(self, sid: int, data: bytes) -> int:
        """The state after ``data`` (which must be allowed), stepped by the automaton itself:
        the same state the table would reach, without filling the rows on the way."""
        return self.intern(self.automaton.advance(self.states[sid], data)) if data else sid

    def walk_bytes(self, sid: int, data: bytes) -> int:
        for b in data:
            self.expand([sid])
            sid = int(self.trans[sid, b])
        return sid

    def walk_vocab(self, sid: int) -> tuple[np.ndarray, np.ndarray]:
        """Token ids whose bytes stay alive from ``sid``, and the state each ends in: the
        tokens whose first byte is live, one table gather per byte column (positions
        ascend, so lengths do: the tokens that end at a column are a prefix)."""
        layout = self.automaton.info.layout
        self.expand([sid])
        alive = layout.starting_with(np.nonzero(self.trans[sid] >= 0)[0])
        lens = layout.lengths[alive]
        cur = np.full(len(alive), sid, dtype=np.int64)
        done_pos, done_state = [], []
        for j in range(layout.columns.shape[0]):
            k = int(np.searchsorted(lens, j, side="right"))
            if k:
                done_pos.append(alive[:k])
                done_state.append(cur[:k])
                alive, cur, lens = alive[k:], cur[k:], lens[k:]
            if not len(alive):
                break
            fresh = cur[~self._expanded[cur]]
            if len(fresh):
                self.expand(fresh)
            cur = self.trans.reshape(-1)[cur * 256 + layout.columns[j, alive]].astype(np.int64)
            live = cur >= 0
            if not live.all():
                alive, cur, lens = alive[live], cur[live], lens[live]
        done_pos.append(alive)
        done_state.append(cur)
        return layout.token_ids[np.concatenate(done_pos)], np.concatenate(done_state)


_CLOSINGS: weakref.WeakKeyDictionary[TokenAutomaton, ClosingDistance] = weakref.WeakKeyDictionary()
_CLOSINGS_LOCK = threading.Lock()


def closing_for(automaton: TokenAutomaton) -> ClosingDistance:
    """The automaton's ClosingDistance, shared by every matcher of it (lives as long as it)."""
    with _CLOSINGS_LOCK:
        found = _CLOSINGS.get(automaton)
        if found is None:
            found = _CLOSINGS[automaton] = ClosingDistance(automaton)
        return found
