"""Constraints as a pushdown automaton over byte DFAs (a recursive transition network).

Rules: the main pattern, each nested object and recursive `$ref` of a JSON schema (DFAs over
the 256 bytes plus one call symbol per rule, column CALL_BASE + k), and leaves: terminals
shared by every grammar of a tokenizer (leaves.py), among them length-counted strings whose
count is a stack frame. All rule DFAs are laid out in one global state table. A
configuration is (stack of return states, current state); a call pushes the state after the
call edge and jumps to the callee's start, and an accepting callee state may pop back. Calls
and returns consume nothing, so one automaton state is the frozenset of configurations
reachable after the bytes read so far (ambiguity keeps several alive).

Masks: inside a leaf, the tokens that stay in it come from the leaf's shared walk and only
the ones that leave it are walked on (pda_walk.py); in a structural rule, the sorted
vocabulary is walked as a trie. Rows are cached per state and the stack suffix they read.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import accumulate

import numpy as np
import torch

from . import native
from .automaton import SPARSE_WORDS, TokenAutomaton, group_bytes, write_kept
from .bitmask import pack_token_ids, unpack_bitmask
from .budget import CompileBudget
from .completion import UNREACHABLE, GrammarDistances, rule_distances
from .errors import GrammarTooComplexError, UnsupportedSchemaError
from .fsm import ALL_BYTES, DEAD, ByteDFA, determinize, equivalent_within, trim_and_minimize
from .leaves import CountedLeaf, leaf_walk, walk_marked_leaves
from .nfa import CALL_BASE
from .pda_trie import trie_walk
from .pda_walk import walk_tokens
from .token_ends import TokenEnds
from .unique_items import UniqueItems
from .vocab import TokenizerInfo

Config = tuple[tuple[int, ...], int]  # (return states, bottom first; current global state)
State = frozenset  # of Config
# Rules above this many states are trimmed, not minimized: refinement costs seconds there (one
# pass over every state per round, hundreds of rounds), and the language is the same.
MINIMIZE_MAX_STATES = 4096
MAX_CONFIGS = 64  # parses of one prefix kept alive (see _step)
SHARED_WALK_STATES = 256  # leaves of this many states have their positions' walks shared


_FRAME_WAYS_MAX = 1 << 16  # descents' ways kept per grammar and alphabet
_FEWEST_MAX = 1 << 16  # states whose fewest bytes to finish are kept per grammar and alphabet
# Longer byte strings are stepped in C (a closing's completion checked by walking it): shorter
# ones (a token) step through _step's cache, cheaper than a call that builds its result.
_NATIVE_ADVANCE_FROM = 16


class PushdownAutomaton(TokenAutomaton):
    """dfas[0] is the main pattern, dfas[1 + k] rule k; all trimmed, none accepts ''."""

    def __init__(self, info: TokenizerInfo, rules: list, unique: dict[int, str] | None = None):
        """``unique``: rule index -> item kind of the arrays with uniqueItems that are rules
        of their own (their duplicate check runs in the matcher: unique_items.py)."""
        super().__init__(info)
        counted = [r if isinstance(r, CountedLeaf) else None for r in rules]
        dfas = [r.dfa if isinstance(r, CountedLeaf) else r for r in rules]
        self.rules = tuple(dfas)
        sizes = [d.num_states for d in dfas]
        starts = [0, *accumulate(sizes)]
        offsets = np.array(starts, dtype=np.int64)
        self._trans, one, one_next = _global_table(dfas, starts)
        accept = np.concatenate([d.accept for d in dfas])
        self._final = np.zeros_like(accept)  # main accepts, stack empty
        self._final[:sizes[0]] = accept[:sizes[0]]
        self._returns = accept & ~self._final
        # calling position -> its calls (rule start, return position, counted): only the
        # positions with calls, so no table of every position to walk (see below)
        self._calls: dict[int, tuple[tuple[int, int, bool], ...]] = {}
        self._return_to: set[int] = set()  # positions calls return to
        calling = np.zeros(len(accept), dtype=bool)
        # rule -> [(rule it calls, the position that call returns to)]: the call graph that
        # GrammarDistances and _most_bytes read (rules without calls have no entry)
        self._rule_calls: dict[int, list[tuple[int, int]]] = {}
        for rule, (d, off) in enumerate(zip(dfas, starts)):
            if not _has_calls(d):
                continue
            src, k = np.nonzero(d.trans[:, CALL_BASE:] >= 0)
            calls: dict[int, list] = {}
            edges = self._rule_calls[rule] = []
            for q, c, ret in zip(src.tolist(), k.tolist(), d.trans[src, CALL_BASE + k].tolist()):
                calls.setdefault(q, []).append((starts[1 + c], off + ret, counted[1 + c] is not None))
                edges.append((1 + c, off + ret))
            for q, c in calls.items():
                self._calls[off + q] = tuple(c)
                self._return_to.update(ret for _, ret, _ in c)
            calling[off + src] = True
        # The per-position tables read one position at a time in Python are bytes and
        # tuples, not lists: the garbage collector walks a list's every entry at each
        # collection that reaches it, and every cached grammar kept ten of them (with the
        # 240 dev grammars cached a full collection took 29 ms; 5 ms with these and the
        # distances' table as below); it walks a tuple of ints once (the first collection
        # untracks it) and bytes never.
        self._branch = self._returns | calling
        self._calling = np.nonzero(calling)[0].tolist()  # positions with calls
        # Each position's one live byte, -1 where none or several (the trie walk's runs).
        self._one_byte = _int_table(one)
        self._one_next = _int_table(one_next)  # where one >= 0
        self._branches = _flag_table(self._branch)
        self._closures: dict[State, frozenset[Config]] = {}
        self._accepting: dict[State, bool] = {}
        self._steps: dict[tuple[State, int], State | None] = {}
        self._forced: dict[State, bytes] = {}
        self._max_token_len = info.layout.max_len
        self._bytes_after: dict[State, list[int]] = {}
        self._live: dict[int, list[int]] = {}  # position -> its live bytes
        self._byte_groups: dict[frozenset[int], list[list[int]]] = {}  # positions -> byte_classes
        self._depths: dict[State, int] = {}
        self._eos_row = info.eos_row
        # g -> [(stack suffix the walk read, packed row or fill_words' form of it)]: a deeper
        # stack with the same suffix has the same tokens, so masks do not go cold with every
        # level of nesting. Live words (native.sparse_row) where _fill_walked kept the row, a
        # leaf's shared inside row and the live words of the tokens leaving it where
        # _fill_leaf did, until a row ORs it in (_config_row keeps it whole then).
        self._config_rows: dict[int, list[tuple[tuple[int, ...], np.ndarray | bytes | tuple]]] = {}
        self._offsets = offsets
        self._exits: dict[tuple[int, Config], tuple[np.ndarray, int]] = {}  # _counted_exits
        # Counted leaves (a string body with minLength/maxLength) keep their character count
        # in a stack frame -(count + 1) above the return state: the leaf stays one small
        # shared DFA instead of one copy of it per count.
        self._counted = counted
        self._inc = _no_rises(len(accept)) if all(c is None for c in counted) else np.zeros(
            (len(accept), 256), dtype=np.uint8)  # (state, byte) -> count's rise
        self._count_lo = np.zeros(len(accept), dtype=np.int64)
        self._count_cap = np.zeros(len(accept), dtype=np.int64)  # hi, or lo when unbounded
        for k, c in enumerate(counted):
            if c is not None:
                sl = slice(offsets[k], offsets[k + 1])
                self._inc[sl] = c.starts_char
                self._count_lo[sl] = c.lo
                self._count_cap[sl] = c.lo if c.hi is None else c.hi
        self._is_counted = np.array([c is not None for c in counted], dtype=bool)
        self._count_rise = [1 if c is None else max(int(c.starts_char.max(initial=1)), 1) for c in counted]
        self._counted_any = bool(self._is_counted.any())
        # global state -> its leaf rule (-1 outside leaves), expanded from one entry a rule
        leaf_rule = [k if k and not _has_calls(d) else -1 for k, d in enumerate(dfas)]
        self._leaf_of = np.repeat(np.array(leaf_rule, dtype=np.int64), sizes)
        in_counted = np.repeat(np.array([k >= 0 and c is not None for k, c in zip(leaf_rule, counted)],
                                        dtype=bool), sizes)
        # Accepting states of counted leaves: entered only with at least the minimum count.
        self._closes_counted = accept & in_counted
        # Positions a byte leaves with one configuration and the same stack (no call, no
        # return, no character count): the trie walk steps them straight through the table.
        self._plain = _flag_table(~self._branch & ~in_counted)
        # The per-position flags read one position at a time (an index into bytes or a
        # tuple costs a fraction of a numpy scalar read).
        self._in_counted_mask = in_counted
        self._in_counted_of = _flag_table(in_counted)
        self._returns_of, self._final_of = _flag_table(self._returns), _flag_table(self._final)
        self._count_lo_of = _int_table(self._count_lo)
        self._leaf_of_g = _int_table(self._leaf_of)
        # Leaf positions that walk the vocabulary alike share one row (the key of their
        # config rows): a long leaf (a pattern under a maxLength) has few walks of its own.
        row_key = np.arange(len(accept), dtype=np.int64)
        reach = info.layout.max_len
        for k, d in enumerate(dfas):
            if k and counted[k] is None and not _has_calls(d) and d.num_states >= SHARED_WALK_STATES:
                row_key[offsets[k]:offsets[k + 1]] = offsets[k] + equivalent_within(d, reach)
        self._row_key = _int_table(row_key)
        self._unique = dict(unique or {})
        self.unique_items = UniqueItems(self) if self._unique else None
        self._distances: dict[bytes, GrammarDistances] = {}  # alphabet -> completion distances
        self._last_distances: tuple[np.ndarray, GrammarDistances] | None = None
        self.pruned = False  # _step has dropped configurations (MAX_CONFIGS)
        self._walker = False  # native.PdaWalker, built on the first mask (None: not available)

    def __getstate__(self) -> dict:
        # A compile worker sends the automaton back pickled: the walker holds the extension
        # and C tables (not picklable, and per process); the receiver builds its own.
        state = self.__dict__.copy()
        state["_walker"] = False
        return state

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
            nxt = [(stack + ((ret, -1) if counted else (ret,)), start)
                   for start, ret, counted in self._calls.get(g, ())]
            if self._returns_of[g]:
                if self._in_counted_of[g]:
                    if -stack[-1] - 1 >= self._count_lo[g]:
                        nxt.append((stack[:-2], stack[-2]))
                else:
                    nxt.append((stack[:-1], stack[-1]))
            for c in nxt:
                if c not in seen:
                    seen.add(c)
                    todo.append(c)
        return seen

    def _closure(self, state: State) -> frozenset[Config]:
        out = self._closures.get(state)
        if out is None:
            if len(state) == 1 and not self._branches[next(iter(state))[1]]:
                out = state  # no call or return here: the closure is the state itself
            else:
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
                rise = self._inc[g, byte]
                if rise:
                    stack = self._counted_up(stack, g, int(rise))
                    if stack is None:
                        continue
                if self._closes_counted[t] and -stack[-1] - 1 < self._count_lo[t]:
                    continue
                nxt.add((stack, t))
        if len(nxt) > MAX_CONFIGS:
            # Pathological ambiguity: keep the shallowest parses. Every kept one is live, so
            # this can only over-constrain, and matchers never raise mid-generation.
            nxt = sorted(nxt, key=lambda c: (len(c[0]), c))[:MAX_CONFIGS]
            self.pruned = True
        out = self._steps[key] = frozenset(nxt) or None
        return out

    def _in_counted(self, g: int) -> bool:
        return self._in_counted_of[g]

    def _counted_up(self, stack: tuple[int, ...], g: int, rise: int = 1) -> tuple[int, ...] | None:
        """The stack after the count of the counted leaf at ``g`` rises by ``rise`` (one more
        character; more in a pattern leaf's detour, json_leaves.counted_pattern); None past its
        maximum (an unbounded one stops counting at its minimum)."""
        count = -stack[-1] - 1 + rise
        cap = int(self._count_cap[g])
        if count > cap:
            if self._counted[self._leaf_of[g]].hi is not None:
                return None
            count = cap
        return stack[:-1] + (-(count + 1),)

    # -- TokenAutomaton ---------------------------------------------------------------------
    def advance(self, state: State, data: bytes) -> State | None:
        if len(data) >= _NATIVE_ADVANCE_FROM and not self.pruned:
            walker = self._native_walker()
            found = False if walker is None else walker.advance(list(state), data)
            if found is not False:
                return found or None
        for b in data:
            state = self._step(state, b)
            if state is None:
                return None
        return state

    def byte_classes(self, state: State) -> list[list[int]]:
        """A step depends on each configuration's next state and whether the byte starts a
        counted character: bytes alike in both lead to the same state. Depends only on the
        set of grammar positions, which states with different stacks share: cached by it."""
        gs = frozenset(g for _, g in self._closure(state))
        groups = self._byte_groups.get(gs)
        if groups is None:
            rows = list(gs)
            groups = self._byte_groups[gs] = group_bytes(np.concatenate([self._trans[rows], self._inc[rows]]))
        return groups

    def min_bytes_to_accept(self, state: State, alphabet: np.ndarray) -> int | None:
        """The grammar's fewest bytes to finish (completion.py): each configuration's rule
        position, the characters a counted leaf still needs, and the callers on its stack.
        Exact while no configuration was ever dropped (MAX_CONFIGS); None after that."""
        if self.pruned:
            return None
        best = self._fewest_config(state, self._grammar_distances(alphabet))[0]
        return None if best >= UNREACHABLE else best

    def _fewest_config(self, state: State, dist: GrammarDistances) -> tuple[int, Config]:
        """(fewest bytes to finish, a configuration that needs that few), kept per state: the
        closing asks again for a state and its ends, and its completion starts there."""
        found = dist.fewest.get(state)
        if found is None:
            if len(dist.fewest) >= _FEWEST_MAX:
                dist.fewest.clear()
            if len(state) == 1:
                config = next(iter(state))
                found = (self._config_bytes(config, dist), config)
            else:
                found = min((self._config_bytes(c, dist), c) for c in state)
            dist.fewest[state] = found
        return found

    def max_bytes_to_accept(self, alphabet: np.ndarray) -> int | None:
        """The most min_bytes_to_accept can be over every configuration the grammar can
        reach: a position's distance plus the characters a counted leaf may still need, plus
        the most its callers' return positions can add (the longest way down the call graph
        from the main rule). None where calls recurse (stacks are unbounded), a distance is
        unreachable, or configurations were ever dropped (then min_bytes_to_accept is None)."""
        if self.pruned:
            return None
        dist = self._grammar_distances(alphabet)
        if dist.most is False:
            dist.most = self._most_bytes(dist)
        return dist.most

    def _most_bytes(self, dist: GrammarDistances) -> int | None:
        offsets = self._offsets
        dist_of = dist.dist_of
        # rule -> (callee rule, the cost of the position that call returns to)
        down = {a: [(b, dist_of[ret]) for b, ret in edges] for a, edges in self._rule_calls.items()}
        # Rules reachable from the main one, callees after callers (depth first, without
        # recursion in Python: the call graph can be as deep as the rules are many).
        order: list[int] = []
        state = {0: 1}  # 1 on the depth-first path, 2 done
        path = [(0, iter(down.get(0, ())))]
        while path:
            a, callees_of = path[-1]
            for b, _ in callees_of:
                if state.get(b) == 1:
                    return None  # a call recurses: stacks are unbounded
                if b not in state:
                    state[b] = 1
                    path.append((b, iter(down.get(b, ()))))
                    break
            else:
                state[a] = 2
                order.append(a)
                path.pop()
        above = {0: 0}  # rule -> the most its callers' returns cost (longest way from main)
        for a in reversed(order):  # callers before callees
            for b, cost in down.get(a, ()):
                above[b] = max(above.get(b, 0), above[a] + cost)
        # Each rule's costliest position: its distance plus a counted leaf's missing characters.
        here = dist.dist + np.where(self._in_counted_mask, self._count_lo, 0)
        top = np.maximum.reduceat(here, offsets[:-1]).tolist()  # no rule is empty
        most = 0
        for k, extra in above.items():
            if top[k] >= UNREACHABLE or extra >= UNREACHABLE:
                return None
            most = max(most, top[k] + extra)
        return most

    def token_ends(self, state: State) -> TokenEnds | None:
        """Every token allowed from ``state`` and the state ``advance`` gives after each, all
        found in one walk (C); None where that walk is not available (then step token by
        token)."""
        walker = self._native_walker()
        found = None if walker is None or self.pruned else walker.token_ends(list(state))
        return None if found is None else TokenEnds(*found)

    def end_states(self, state: State) -> list[State] | None:
        """The distinct states the tokens allowed from ``state`` end in (token_ends' ends,
        without which token ends where); None where the C walk is not available."""
        walker = self._native_walker()
        return None if walker is None or self.pruned else walker.end_states(list(state))

    def shortest_completion(self, state: State, alphabet: np.ndarray) -> bytes | None:
        """Bytes of ``alphabet`` of min_bytes_to_accept's length after which ``state``
        accepts, found by following the grammar's distances rule by rule (no automaton
        steps); None where that is not possible. Callers check the way with ``advance``."""
        segments = self.completion_segments(state, alphabet)
        return None if segments is None else b"".join(segments)

    def completion_segments(self, state: State, alphabet: np.ndarray) -> list[bytes] | None:
        """shortest_completion cut where each frame of the stack returns: the top frame's
        bytes, then each caller's from its return position (cached per position, so
        the states of one deep structure share all but the top segment)."""
        if self.pruned:
            return None
        dist = self._grammar_distances(alphabet)
        fewest, (stack, g) = self._fewest_config(state, dist)
        if fewest >= UNREACHABLE:
            return None
        top = self._segment(stack, g, dist, alphabet, 4 * fewest + 64)
        if top is None:
            return None
        out, stack, g = [top[0]], top[1], top[2]
        while stack or not self._final_of[g]:
            seg = dist.segments.get(g, False)
            if seg is False:
                found = self._segment(stack, g, dist, alphabet, 4 * fewest + 64)
                seg = dist.segments[g] = None if found is None else found[0]
            if seg is None:
                return None
            out.append(seg)
            if not stack:  # the main rule's way ends where it accepts
                break
            stack, g = stack[:-1], stack[-1]
        return out if sum(map(len, out)) == fewest else None

    def _segment(self, stack: tuple[int, ...], g: int, dist: GrammarDistances,
                 alphabet: np.ndarray, limit: int) -> tuple[bytes, tuple[int, ...], int] | None:
        """Descend from (stack, g) along the distances until its frame returns (or the main
        rule ends): the bytes, and the configuration returned to. Reads no frame below.
        In C where the extension loads: each position's next step is kept (``dist.steps``),
        so a descent costs a table read per byte. In Python: outside a counted leaf the way
        from a position of the starting frame depends on that position alone (and on whether
        the frame is the main rule's), so the ways from every such position met are kept
        (``dist.frame_ways``) and a later descent stops at the first it meets: the states of
        one structure share the way to its end."""
        walker = self._native_walker()
        if walker is not None:
            if dist.steps is None:
                dist.steps = np.full(2 * len(self._final_of), -2, dtype=np.int64)
            return walker.segment(stack, g, dist.dist, alphabet, self._final, dist.steps, limit)
        floor = len(stack) - (1 if self._in_counted_of[g] else 0)
        main = floor == 0
        out = bytearray()
        met: list[tuple[int, int]] = []  # frame positions on the way, and the bytes before each
        ways = dist.frame_ways
        for _ in range(limit):  # bytes, and calls and returns (which read none)
            if len(stack) == floor and not self._in_counted_of[g]:
                known = ways.get((g, main))
                if known is not None:
                    out += known[0]
                    g = known[1]
                    if not main:
                        stack, g = stack[:-1], stack[-1]
                    break
                met.append((g, len(out)))
            need = self._chars_needed(stack, g)
            final = self._final_of[g]
            if final and not stack:
                break
            if self._returns_of[g] and need == 0:
                stack, g = (stack[:-2], stack[-2]) if self._in_counted_of[g] else (stack[:-1], stack[-1])
                if len(stack) < floor:
                    break
                continue
            move = self._descent_move(g, need > 0, dist, alphabet)
            if move is None:
                return None
            if move[0] < 0:  # a call: (-1, callee start, return state, counted)
                _, start, ret, counted = move
                stack, g = stack + ((ret, -1) if counted else (ret,)), start
                continue
            b, t = move
            if self._inc[g, b]:
                stack = self._counted_up(stack, g, int(self._inc[g, b]))
                if stack is None:
                    return None
            out.append(b)
            g = t
        else:
            return None
        data = bytes(out)
        if len(ways) + len(met) > _FRAME_WAYS_MAX:
            ways.clear()
        for p, at in met:  # the main rule's way ends at its final position; a frame's returns
            ways[(p, main)] = (data[at:], g if main else -1)
        return data, stack, g

    def _config_bytes(self, config: Config, dist: GrammarDistances) -> int:
        stack, g = config
        d = dist.dist_of[g]
        return d + self._chars_needed(stack, g) + dist.stack_cost(stack) if d < UNREACHABLE else UNREACHABLE

    def _chars_needed(self, stack: tuple[int, ...], g: int) -> int:
        return max(self._count_lo_of[g] - (-stack[-1] - 1), 0) if self._in_counted_of[g] else 0

    def _descent_move(self, g: int, counting: bool, dist: GrammarDistances, alphabet: np.ndarray):
        """From rule position ``g``, one step that is one byte closer to the rule's end: the
        first such byte (byte, next position), else a call as close as ``g`` (-1, callee
        start, return, counted). ``counting``: a counted leaf still needs characters, so
        the byte must start one and keep the distance to the closing (cached per position)."""
        key = (g, counting)  # dist is this alphabet's: its moves are too
        move = dist.moves.get(key, False)
        if move is not False:
            return move
        row = self._trans[g]
        mod = native.module()
        if mod is not None:  # the same search in C, without five arrays of 256
            b = mod.descent_byte(self._trans, dist.dist, alphabet, self._inc, self._returns, g, counting)
            move = (b, int(row[b])) if b >= 0 else None
        else:
            live = (row >= 0) & alphabet
            d = np.where(live, dist.dist[np.maximum(row, 0)], UNREACHABLE)
            closer = live & (d == dist.dist[g] - 1)
            if counting:  # a character that keeps the distance, else progress that does not close
                ok = np.nonzero(live & (self._inc[g] > 0) & (d == dist.dist[g]))[0]
                if not len(ok):
                    ok = np.nonzero(closer & (self._inc[g] == 0) & ~self._returns[np.maximum(row, 0)])[0]
            else:
                ok = np.nonzero(closer)[0]
            move = (int(ok[0]), int(row[ok[0]])) if len(ok) else None
        if move is None and not counting:
            for start, ret, counted in self._calls.get(g, ()):
                k = int(np.searchsorted(self._offsets, start, side="right")) - 1
                lo = self._counted[k].lo if counted else 0
                if dist.dist[start] + lo + dist.dist[ret] == dist.dist[g]:
                    move = (-1, start, ret, counted)
                    break
        dist.moves[key] = move
        return move

    def _grammar_distances(self, alphabet: np.ndarray) -> GrammarDistances:
        last = self._last_distances
        if last is not None and last[0] is alphabet:  # callers pass the same array each time
            return last[1]
        key = alphabet.tobytes()
        out = self._distances.get(key)
        if out is None:
            leaf = [bool(k) and not _has_calls(d) for k, d in enumerate(self.rules)]
            chars = [0 if c is None else c.lo for c in self._counted]
            callees = {k: sorted({b for b, _ in edges}) for k, edges in self._rule_calls.items()}
            out = self._distances[key] = GrammarDistances(self.rules, leaf, chars, alphabet,
                                                          self.info.leaf_distances, callees)
        self._last_distances = (alphabet, out)
        return out

    def unique_kind(self, state: State) -> str | None:
        """The item kind where ``state`` (just after a ``[``) is inside a unique array's rule."""
        for _, g in state:
            kind = self._unique.get(int(np.searchsorted(self._offsets, g, side="right")) - 1)
            if kind is not None:
                return kind
        return None

    def is_accepting(self, state: State) -> bool:
        out = self._accepting.get(state)
        if out is None:
            final = self._final_of
            out = self._accepting[state] = any(final[g] for _, g in self._closure(state))
        return out

    def allowed_token_ids(self, state: State) -> np.ndarray:
        bits = unpack_bitmask(self._token_row(state), self.info.vocab_size)
        bits[list(self.info.eos_token_ids)] = False
        return np.nonzero(bits)[0]

    def mask_words(self, state: State) -> np.ndarray:
        """The packed row as numpy, the form masks are filled from (torch's only on demand)."""
        words = self._words.get(state)
        if words is None:
            words = self._token_row(state)
            if self.is_accepting(state) and self.info.eos_token_ids:
                words = words | self._eos_row  # a new array: config rows are shared
            self._words[state] = words
        return words

    def _fill_new(self, state: State, words: np.ndarray, row: int) -> None:
        if len(state) > 1 or not self._fill_walked(state, words, row):
            super()._fill_new(state, words, row)

    def _fill_walked(self, state: State, words: np.ndarray, r: int) -> bool:
        """A new state of one configuration (no counted character) whose row is kept for its
        stack already, or whose tokens are one trie walk (no call into a leaf to take rows
        from), or which is inside a leaf (_fill_leaf): written straight into ``words[r]``
        (from the kept row, or walked there in C), and kept only in fill_words' form (its
        live words, most often; a leaf's shared row and its own few live words), the walked
        row also in _config_rows, where mask_words finds it. The most common new states then
        make no row of their own: fresh memory is what a first visit paid most for. False
        where the state is not such or a C walk gave up (then fill_words writes all of the
        row)."""
        config = next(iter(state))
        stack, g = config
        if self._in_counted_of[g]:
            return False
        key = self._row_key[g]
        hit = self._cached_row(key, stack) if key in self._config_rows else None
        if hit is not None:  # a configuration's row kept before (under a shorter stack)
            kept = hit[0]
            write_kept(words, r, kept)
        elif self._leaf_of_g[g] >= 0:
            kept = self._fill_leaf(stack, key, words, r)
            if kept is None:
                return False
        else:
            if self._branches[g] and any(self._leaf_of_g[c[1]] >= 0 for c in self._closure(state)):
                return False
            walker = self._walker if self._walker is not False else self._native_walker()
            # a position leaves return to: their rows OR this one in, so it is kept whole
            whole = g in self._return_to
            found = -1 if walker is None else walker.trie_kept([config], True, words, r, 0 if whole else SPARSE_WORDS)
            if found == -1:
                return False
            lowest, kept = found
            if kept is None or whole:
                kept = words[r].copy()
            self._config_rows.setdefault(g, []).append((stack[min(lowest, len(stack)):], kept))
        # one configuration: accepting where its position is final (with no call or return
        # there, the state is its own closure)
        if (self.is_accepting(state) if self._branches[g] else self._final_of[g]) and self.info.eos_token_ids:
            out = words[r]
            np.bitwise_or(out, self._eos_row, out=out)
            eos = native.module().sparse_row(self._eos_row, SPARSE_WORDS) if type(kept) is tuple else None
            if eos is not None:  # fill_sparse ORs the pairs in: a word may come twice
                kept = (kept[0], kept[1] + eos)
            else:
                pairs = native.module().sparse_row(out, SPARSE_WORDS)
                kept = out.copy() if pairs is None else pairs
        self._sparse[state] = kept
        return True

    def _fill_leaf(self, stack: tuple[int, ...], g: int, words: np.ndarray, r: int):
        """_leaf_config_row of (stack, g), a position of an uncounted leaf, written into
        ``words[r]`` and kept in _config_rows as (the leaf's shared row of the tokens that stay
        inside, the live words of those that leave it): the row of a string's body is most of
        the vocabulary and the same in every grammar, the tokens leaving it a few words.
        Returns that kept form (a whole row where the leaving tokens are many), None without
        the extension."""
        mod = native.module()
        if mod is None:
            return None
        k = self._leaf_of_g[g]
        walk = leaf_walk(self.info, self.rules[k], int(g - self._offsets[k]))
        out = words[r]
        out.fill(0)
        lowest = self._leaf_leaving(walk, stack, g, out)
        pairs = mod.sparse_row(out, SPARSE_WORDS)
        np.bitwise_or(out, walk.inside, out=out)
        kept = out.copy() if pairs is None else (walk.inside, pairs)
        self._config_rows.setdefault(g, []).append((stack[lowest:], kept))
        return kept

    def _leaf_leaving(self, walk, stack: tuple[int, ...], g: int, out: np.ndarray) -> int:
        """ORs into ``out`` the tokens that leave leaf position (stack, g): those passing its
        exits, walked on in the caller, and the caller's own where g may return. Returns the
        shallowest stack depth read."""
        ret = (stack[:-1], stack[-1])
        lowest = len(stack) - 1
        if len(walk.exit_pos):
            lowest = min(lowest, self._exit_walk(ret, walk.exit_pos, walk.exit_col, out)[2])
        if self._returns_of[g]:
            after, low = self._config_row(ret)
            np.bitwise_or(out, after, out=out)
            lowest = min(lowest, low)
        return lowest

    def mask_row(self, state: State) -> torch.Tensor:
        row = self._rows.get(state)
        if row is None:
            row = self._rows[state] = torch.from_numpy(self.mask_words(state))
        return row

    def can_continue(self, state: State) -> bool:
        out = self._continues.get(state)
        if out is None:
            words = self.mask_words(state)
            if self.is_accepting(state):
                words = words & ~self._eos_row
            out = self._continues[state] = bool(np.count_nonzero(words))
        return out

    def _token_row(self, state: State) -> np.ndarray:
        if len(state) == 1:
            return self._config_row(next(iter(state)))[0]
        rows, counted, fresh = [], {}, []
        leaf_of = self._leaf_of_g
        for c in state:
            if self._in_counted_of[c[1]]:  # grouped by position and count (_counted_row)
                counted.setdefault((c[1], c[0][-1]), []).append(c[0])
            elif leaf_of[c[1]] < 0 and self._cached_row(c[1], c[0]) is None:
                fresh.append(c)
            else:
                rows.append(self._config_row(c)[0])
        if len(fresh) > 1:
            joint = self._joint_row(fresh)
            if joint is not None:
                rows.append(joint)
                fresh = []
        rows.extend(self._config_row(c)[0] for c in fresh)
        for (g, _), stacks in counted.items():
            rows.append(self._config_row((stacks[0], g))[0] if len(stacks) == 1
                        else self._counted_row(g, stacks, self._leaf_of_g[g])[0])
        return rows[0] if len(rows) == 1 else np.bitwise_or.reduce(rows)

    def _cached_row(self, key, below: tuple[int, ...]) -> tuple[np.ndarray, int] | None:
        """_config_row's cache: the row kept under ``key`` for a stack suffix ``below`` ends
        with, and the depth that suffix starts at; None where none matches."""
        for suffix, row in self._config_rows.get(key, ()):
            if len(below) >= len(suffix) and below[len(below) - len(suffix):] == suffix:
                return row, len(below) - len(suffix)
        return None

    def _joint_row(self, configs: list[Config]) -> np.ndarray | None:
        """The tokens several structural configurations of one state allow, as one trie walk
        in C of all their bytes together (each configuration's calls into leaves taken from
        the leaves' rows, as _structural_row does) instead of a walk per configuration: a
        state of many parses (an ``anyOf`` of objects told apart late) visits the vocabulary
        once. Exact: a set of configurations steps as the union of its members. The rows of
        the members are not cached one by one (the state's row is); None where the C walk
        is not available or gives up, and the members are walked one by one."""
        walker = self._native_walker()
        if walker is None:
            return None
        leaf_of, walked, leaves = self._leaf_of_g, set(), set()
        for c in configs:
            for member in (self._config_closure(c) if self._branches[c[1]] else (c,)):
                (leaves if leaf_of[member[1]] >= 0 else walked).add(member)
        found = walker.trie(list(walked), False)
        if found is None:
            return None
        return np.bitwise_or.reduce([found[0], *(self._config_row(c)[0] for c in leaves)])

    def _config_row(self, config: Config) -> tuple[np.ndarray, int]:
        """Packed row of the tokens allowed from one configuration, and the stack depth its
        computation read down to; cached per state by the stack suffix it read."""
        stack, g = config
        key, below = self._row_key[g], stack
        if self._in_counted(g):  # the count matters only as far as one token can reach
            key, below = (g, *self._count_buckets(stack, g)), stack[:-1]
        elif key != g:  # a leaf position that walks as the one it is keyed by
            config = (stack, key)
            g = key
        hit = self._cached_row(key, below)
        if hit is not None:
            if type(hit[0]) is not np.ndarray:  # kept in fill_words' form (_fill_walked): rows
                row = _unpacked(hit[0], self.info.vocab_size)  # are ORed here, so kept whole now
                entries = self._config_rows[key]
                at = next((i for i, e in enumerate(entries) if e[1] is hit[0]), None)
                if at is not None:  # (None: another thread's fill kept it whole first)
                    entries[at] = (below[hit[1]:], row)
                return row, hit[1]
            return hit
        k = self._leaf_of_g[g]
        if k >= 0:
            row, lowest = self._leaf_config_row(config, k)
        else:
            row, lowest = self._structural_row(config)
        self._config_rows.setdefault(key, []).append((below[min(lowest, len(below)):], row))
        return row, min(lowest, len(below))

    def _structural_row(self, config: Config) -> tuple[np.ndarray, int]:
        """From a rule position: where it calls leaves (a value's start), the tokens that
        begin inside a leaf are that leaf configuration's row (its shared walk, and only the
        tokens leaving it walked on here); the rule's own bytes are walked as a trie."""
        closure = self._config_closure(config) if self._branches[config[1]] else ()
        leaf_of = self._leaf_of_g
        leaves = [c for c in closure if leaf_of[c[1]] >= 0]
        row, lowest = self._trie_row(config, [c for c in closure if leaf_of[c[1]] < 0] if leaves else None)
        for c in leaves:
            more, low = self._config_row(c)
            row, lowest = row | more, min(lowest, low)
        return row, lowest

    def _trie_row(self, config: Config, rule_configs: list[Config] | None) -> tuple[np.ndarray, int]:
        """trie_walk's tokens as a packed row, walked in C where the library loads."""
        walker = self._native_walker()
        if walker is not None:
            found = walker.trie([config] if rule_configs is None else rule_configs, rule_configs is None)
            if found is not None:
                return found[0], min(found[1], len(config[0]))
        ids, lowest = trie_walk(self, config, rule_configs)
        return pack_token_ids(ids, self.info.vocab_size), lowest

    def _exit_walk(self, ret: Config, positions: np.ndarray, cols: np.ndarray, row: np.ndarray | None = None):
        """Tokens leaving a leaf at ``positions`` (layout), from byte ``cols``, walked on from
        the return configuration ``ret``: (packed row, which survive, shallowest depth). With
        ``row``, the survivors are ORed into it, and it is the row returned."""
        closure = self._config_closure(ret)
        walker = self._native_walker()
        if walker is not None:
            found = walker.tokens(list(closure), positions, cols, row)
            if found is not None:
                return found
        ids, low = walk_tokens(self, closure, positions, cols)
        alive = np.isin(self.info.layout.token_ids[positions], ids)
        packed = pack_token_ids(ids, self.info.vocab_size)
        return (packed if row is None else np.bitwise_or(row, packed, out=row)), alive, low

    def _native_walker(self) -> native.PdaWalker | None:
        if self._walker is False:
            mod = native.module()
            self._walker = None if mod is None else self._build_walker(mod)
        return self._walker

    def _build_walker(self, mod, max_configs: int = MAX_CONFIGS) -> native.PdaWalker:
        bounded = np.array([c is not None and c.hi is not None for c in self._counted], dtype=bool)
        in_counted = self._in_counted_mask
        flags = (self._returns * native.RETURNS + in_counted * native.IN_COUNTED
                 + self._closes_counted * native.CLOSES_COUNTED
                 + (in_counted & bounded[np.maximum(self._leaf_of, 0)]) * native.BOUNDED)
        counts = np.zeros(len(self._trans), dtype=np.int64)
        counts[self._calling] = [len(self._calls[g]) for g in self._calling]
        calls = [c for g in self._calling for c in self._calls[g]]
        return native.PdaWalker(mod, self._trans, counts, calls, flags, self._count_lo, self._count_cap,
                                self._inc, self.info.layout.lexicographic_arrays(),
                                self.info.vocab_size, max_configs)

    def _next_bytes(self, state: State, closure) -> list[int]:
        out = self._bytes_after.get(state)
        if out is None:
            gs = {g for _, g in closure}
            if len(gs) == 1:
                out = self._live_bytes(next(iter(gs)))
            else:
                rows = self._trans[sorted(gs)]
                out = np.nonzero((rows >= 0).any(axis=0))[0].tolist()
            self._bytes_after[state] = out
        return out

    def _live_bytes(self, g: int) -> list[int]:
        """The bytes with an edge out of position ``g`` (cached per position)."""
        out = self._live.get(g)
        if out is None:
            out = self._live[g] = np.nonzero(self._trans[g] >= 0)[0].tolist()
        return out

    def _ends_alive(self, state: State, rest: bytes) -> tuple[bool, int]:
        """Whether ``rest`` can follow ``state``, and the shallowest stack it looked at."""
        depth = self._depth(state)
        for b in rest:
            state = self._step(state, b)
            if state is None:
                return False, depth
            depth = min(depth, self._depth(state))
        return True, depth

    def _depth(self, state: State) -> int:
        out = self._depths.get(state)
        if out is None:
            out = self._depths[state] = min(len(c[0]) for c in self._closure(state))
        return out

    def _count_buckets(self, stack: tuple[int, ...], g: int) -> tuple[int, int]:
        """(characters still needed, characters still allowed), clamped to one token's reach
        (its bytes, times the most a byte raises the leaf's count)."""
        reach = (self.info.layout.columns.shape[0] + 1) * self._count_rise[self._leaf_of_g[g]]
        count = -stack[-1] - 1
        need = min(max(int(self._count_lo[g]) - count, 0), reach)
        hi = self._counted[self._leaf_of[g]].hi
        room = reach if hi is None else min(hi - count, reach)
        return need, room

    def _leaf_config_row(self, config: Config, k: int) -> tuple[np.ndarray, int]:
        """Inside a shared leaf: the tokens that stay inside come from the leaf's own walk
        (computed once per tokenizer); only those that leave it are walked on in the caller."""
        stack, g = config
        if self._counted[k] is not None:
            return self._counted_row(g, [stack], k)
        walk = leaf_walk(self.info, self.rules[k], int(g - self._offsets[k]))
        if not len(walk.exit_pos) and not self._returns_of[g]:
            return walk.inside, len(stack) - 1  # no token leaves: the leaf's own row, shared
        row = np.zeros_like(walk.inside)
        lowest = self._leaf_leaving(walk, stack, g, row)
        return np.bitwise_or(row, walk.inside, out=row), lowest

    def _counted_row(self, g: int, stacks: list[tuple[int, ...]], k: int) -> tuple[np.ndarray, int]:
        """Configurations at one position of counted leaf ``k``, all with one count (the top
        of each stack), differing only in their callers: the tokens that stay inside are the
        count's row for all of them, and the exits that survive in any caller are packed once.
        Every exit is walked in a caller once per (g, caller) and the count only filters
        them, so a string growing toward its maxLength walks its exits once, not once per
        count. Exact: a token leaves a quoted string at most once (at its closing quote), so
        surviving tokens and surviving exits are one."""
        walk = leaf_walk(self.info, self.rules[k], int(g - self._offsets[k]), self._counted[k].starts_char)
        need, room = self._count_buckets(stacks[0], g)
        row = walk.inside_row(need, room, self.info)
        ok = walk.exits_within(need, room)
        may_exit, may_return = ok is not None, bool(self._returns[g]) and need == 0
        lowest, survivors = min(len(s) for s in stacks), None
        for stack in stacks:
            back = stack[:-2]
            ret = (back, stack[len(back)])
            if may_exit:
                hit = self._exits.get((g, ret))
                if hit is None:
                    _, alive, low = self._exit_walk(ret, walk.exit_pos, walk.exit_col)
                    hit = self._exits[(g, ret)] = (alive, low)
                survivors = hit[0] if survivors is None else survivors | hit[0]
                lowest = min(lowest, hit[1])
            if may_return:
                after, low = self._config_row(ret)
                row, lowest = row | after, min(lowest, low)
            lowest = min(lowest, len(back))
        if survivors is not None:
            row = row | pack_token_ids(self.info.layout.token_ids[walk.exit_pos[ok & survivors]],
                                       self.info.vocab_size)
        return row, lowest

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


def _unpacked(kept: bytes | tuple, vocab_size: int) -> np.ndarray:
    """A packed row from native.sparse_row's pairs, or from a (shared row, pairs) pair (a new
    array: rows are ORed into others)."""
    row = np.empty((1, (vocab_size + 31) // 32), dtype=np.int32)
    write_kept(row, 0, kept)
    return row[0]


def build_pushdown(info: TokenizerInfo, fragments: list, pointers: list[str],
                   budget: CompileBudget, unique: dict[int, str] | None = None) -> PushdownAutomaton:
    """fragments[0] = main (nfa, start, end), fragments[1 + k] = rule k, found at pointers[k]:
    an NFA fragment like the main one, or a leaf's ByteDFA (trimmed, no calls) used as it is."""
    width = CALL_BASE + len(fragments) - 1
    dfas = [f.dfa if isinstance(f, CountedLeaf) else f if isinstance(f, ByteDFA)
            else _determinized(f, budget, width, "" if k == 0 else pointers[k - 1])
            for k, f in enumerate(fragments)]
    _check_not_left_recursive(dfas, pointers)
    dfas = _drop_empty_calls(dfas)
    walk_marked_leaves(info, dfas)
    return PushdownAutomaton(info, [f if isinstance(f, CountedLeaf) else d
                                    for f, d in zip(fragments, dfas)], unique)


def _determinized(fragment: tuple, budget: CompileBudget, width: int, pointer: str) -> ByteDFA:
    """A rule's DFA; past the state cap, the error names where the rule is in the schema."""
    try:
        return determinize(*fragment, budget, width=width)
    except GrammarTooComplexError as e:
        raise GrammarTooComplexError(f"the rule at {pointer or '/'} (the schema there with every "
                                     f"value it holds inline): {e}") from None


def _global_table(dfas: list[ByteDFA], offsets: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rules' byte columns stacked, each rule's states moved by its offset (DEAD stays),
    each position's only live byte (-1 where none or several) and where it leads (where
    none or several: byte 0's cell): one pass in C where built, else one lookup per rule
    through a shifted index (the cheapest numpy way measured). int32: shared leaves
    (formats, any value) are copied in whole, so bytes count."""
    out = np.empty((offsets[-1], 256), dtype=np.int32)
    mod = native.module()
    if mod is not None:
        one, one_next = np.empty(offsets[-1], dtype=np.int32), np.empty(offsets[-1], dtype=np.int32)
        mod.stack_rules([np.ascontiguousarray(d.trans, dtype=np.int32) for d in dfas], out, one, one_next)
        return out, one, one_next
    for d, lo, hi in zip(dfas, offsets, offsets[1:]):
        shifted = np.arange(lo - 1, hi, dtype=np.int32)
        shifted[0] = DEAD
        np.take(shifted, d.trans[:, :256] + 1, out=out[lo:hi])
    live = out >= 0
    one = np.where(live.sum(axis=1) == 1, live.argmax(axis=1), -1)
    return out, one, out[np.arange(len(one)), np.maximum(one, 0)]


def _flag_table(flags: np.ndarray) -> bytes:
    """Per-position flags as bytes, 0 or 1 at each index (not tracked by the collector)."""
    return flags.astype(np.uint8).tobytes()


def _int_table(values: np.ndarray) -> tuple[int, ...]:
    """Per-position ints as a tuple: indexed as fast as a list, and untracked by the
    collector from the first collection that sees it (a tuple of ints holds nothing to
    collect), where a list is walked again at every one."""
    return tuple(values.tolist())


_ZEROS = np.zeros(0, dtype=np.uint8)


def _no_rises(positions: int) -> np.ndarray:
    """A read-only all-zero rise table [positions, 256] for a grammar without counted leaves:
    a view of one zero buffer shared by every such grammar (grown as needed), so a cached
    grammar does not keep a table of zeros of its own."""
    global _ZEROS
    size = positions * 256
    if len(_ZEROS) < size:
        _ZEROS = np.zeros(max(size, 2 * len(_ZEROS)), dtype=np.uint8)
        _ZEROS.flags.writeable = False
    return _ZEROS[:size].reshape(positions, 256)


def _has_calls(dfa: ByteDFA) -> bool:
    return dfa.trans.shape[1] > CALL_BASE


def _drop_empty_calls(dfas: list[ByteDFA]) -> list[ByteDFA]:
    """Least fixpoint of 'rule k matches some string'; calls of empty rules become dead edges;
    rules with calls trimmed and minimized. A rule matches some string when acceptance is
    within finite reach of its start through bytes and calls of rules that do
    (completion.rule_distances, in C where built), read on the minimized rules; where every
    rule it calls is known to, its trimmed DFA not being empty says so. Leaves (no
    calls) are kept as they are: they are shared between automata. Rules are visited callees
    first (they are found after their callers), so a fixpoint without recursion takes one
    sweep and a confirming one over the rules still empty. A rule calling an empty one (rare)
    is minimized again from its own DFA with those calls cut."""
    def minimized(d: ByteDFA, live: set[int] | None = None) -> ByteDFA:
        return trim_and_minimize(d if live is None else _mask_calls(d, live),
                                 minimize=d.num_states <= MINIMIZE_MAX_STATES)

    out = [minimized(d) if _has_calls(d) else d for d in dfas]
    called = [_called(o) if _has_calls(d) else [] for d, o in zip(dfas, out)]
    live = {k for k, d in enumerate(dfas[1:]) if not _has_calls(d) and not _leaf_is_empty(d)}
    pending = [k for k, d in enumerate(dfas[1:]) if _has_calls(d)]
    costs = np.full(len(dfas) - 1, UNREACHABLE, dtype=np.int64)
    costs[list(live)] = 1  # only finite or not matters here
    changed = True
    while changed:
        changed = False
        for k in reversed(pending):
            if k in live:
                continue
            # The trim kept the start only if acceptance is within reach through bytes and
            # calls: where every rule called is known to match, that is the answer.
            if all(c in live for c in called[1 + k]):
                found = bool(out[1 + k].accept.any())
            else:
                found = rule_distances(out[1 + k], ALL_BYTES, costs)[0] < UNREACHABLE
            if found:
                live.add(k)
                costs[k] = 1
                changed = True
    # A call edge the trim already cut led to a dead end: cutting it too changes nothing, so
    # the minimized rule tells which rules to do again.
    return [minimized(d, live) if any(c not in live for c in cs) else o
            for d, o, cs in zip(dfas, out, called)]


def _called(dfa: ByteDFA) -> list[int]:
    """The rules ``dfa`` calls (its live call columns)."""
    return np.nonzero((dfa.trans[:, CALL_BASE:] >= 0).any(axis=0))[0].tolist()



@lru_cache(maxsize=4096)
def _leaf_is_empty(leaf: ByteDFA) -> bool:
    # Leaves are shared by every grammar of a tokenizer (by identity): checked once each.
    return leaf.is_empty()


def _mask_calls(dfa: ByteDFA, live: set[int]) -> ByteDFA:
    dead = [CALL_BASE + k for k in range(dfa.trans.shape[1] - CALL_BASE) if k not in live]
    if not dead or not (dfa.trans[:, dead] >= 0).any():
        return dfa
    trans = dfa.trans.copy()
    trans[:, dead] = DEAD
    return ByteDFA(trans, dfa.accept)


def _check_not_left_recursive(dfas: list[ByteDFA], pointers: list[str]) -> None:
    """A rule that can call itself before reading a byte would push forever."""
    first = {k: np.nonzero(dfas[1 + k].trans[0, CALL_BASE:] >= 0)[0].tolist()
             for k in range(len(dfas) - 1) if _has_calls(dfas[1 + k])}
    for k, dfa in enumerate(dfas[1:]):
        if dfa.accept[0]:
            raise UnsupportedSchemaError.at("$ref", pointers[k], "matches the empty string")
    state = dict.fromkeys(first, 0)  # 0 new, 1 on the DFS path, 2 done

    def visit(k: int) -> None:
        state[k] = 1
        for c in first[k]:
            if c not in state:  # a leaf: calls nothing
                continue
            if state[c] == 1:
                raise UnsupportedSchemaError.at(
                    "$ref", pointers[c], "is left-recursive (it reaches itself before any input)")
            if state[c] == 0:
                visit(c)
        state[k] = 2

    for k in first:
        if state[k] == 0:
            visit(k)
