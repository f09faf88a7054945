"""Lark grammars (LALR) as token automata: a byte lexer per parser context plus the parse table.

A state is (LALR state stack, lexer DFA state). The lexer DFA for a stack is the union of the
terminals the parser accepts there (plus %ignore terminals). Lexing is longest-match: when a
byte cannot extend the pending terminal, the terminal is finished (fed to the parser) and the
byte starts the next one, so one token may span several terminals.
"""

from __future__ import annotations

import numpy as np
from lark import Lark
from lark.exceptions import LarkError
from lark.lexer import PatternStr

from .automaton import TokenAutomaton
from .budget import CompileBudget
from .errors import InvalidConstraintError
from .fsm import ByteDFA, determinize, embed_dfa, trim_and_minimize
from .nfa import NFA, emit_bytes
from .regex import regex_to_dfa
from .token_walk import walk_positions
from .vocab import TokenizerInfo

END = "$END"
# lark's common.ESCAPED_STRING uses a lookbehind; this is the same language without one.
_LOOKBEHIND_FREE = {r'".*?(?<!\\)(\\\\)*?"': r'"(\\[^\n]|[^"\\\n])*"'}


class _Lexer:
    """Union DFA of a set of terminals; labels[q] = accepting terminals, best first."""

    def __init__(self, dfa: ByteDFA, labels: list[tuple[str, ...]]):
        self.trans = dfa.trans
        self.labels = labels


class EBNFAutomaton(TokenAutomaton):
    def __init__(self, info: TokenizerInfo, grammar: str, start: str, budget: CompileBudget):
        super().__init__(info)
        try:
            parser = Lark(grammar, parser="lalr", start=start)
        except LarkError as e:
            raise InvalidConstraintError(f"invalid EBNF grammar: {e}") from e
        table = parser.parser.parser.parser.parse_table
        self._states = table.states
        self._start_state = table.start_states[start]
        self._end_state = table.end_states[start]
        self._ignore = frozenset(parser.ignore_tokens)
        self._rank = {t.name: (-t.priority, not isinstance(t.pattern, PatternStr), i)
                      for i, t in enumerate(parser.terminals)}
        self._dfas = {t.name: _terminal_dfa(t, budget) for t in parser.terminals}
        self._lexers: dict[frozenset[str], _Lexer] = {}
        self._accepts: dict[tuple[int, ...], frozenset[str]] = {}
        self._feeds: dict[tuple[tuple[int, ...], str], tuple[int, ...] | None] = {}
        self._steps: dict[tuple, tuple | None] = {}
        self._forced: dict[tuple, bytes] = {}

    @property
    def initial(self) -> tuple:
        return ((self._start_state,), 0)

    # -- parser -----------------------------------------------------------------------------
    def _feed(self, stack: tuple[int, ...], term: str) -> tuple[int, ...] | None:
        key = (stack, term)
        if key not in self._feeds:
            self._feeds[key] = self._simulate(list(stack), term)
        return self._feeds[key]

    def _simulate(self, stack: list[int], term: str) -> tuple[int, ...] | None:
        while True:
            action = self._states[stack[-1]].get(term)
            if action is None:
                return None
            kind, arg = action
            if kind.name == "Shift":
                return tuple(stack + [arg])
            if arg.expansion:
                del stack[-len(arg.expansion):]
            stack.append(self._states[stack[-1]][arg.origin.name][1])
            if term == END and stack[-1] == self._end_state:
                return tuple(stack)

    def _lexer(self, stack: tuple[int, ...]) -> _Lexer:
        terms = self._accepts.get(stack)
        if terms is None:
            terms = frozenset(t for t in self._dfas if t in self._ignore
                              or self._feed(stack, t) is not None)
            self._accepts[stack] = terms
        lexer = self._lexers.get(terms)
        if lexer is None:
            lexer = self._lexers[terms] = self._build_lexer(terms)
        return lexer

    def _build_lexer(self, terms: frozenset[str]) -> _Lexer:
        budget = CompileBudget(max_states=100_000, timeout_s=60.0)
        nfa = NFA(budget)
        start = nfa.new_state()
        ends = {t: embed_dfa(nfa, start, self._dfas[t]) for t in sorted(terms, key=self._rank.get)}
        dfa, members = determinize(nfa, start, -1, budget, return_members=True)
        labels = [tuple(t for t, e in ends.items() if e in m) for m in members]
        return _Lexer(dfa, labels)

    # -- bytes ------------------------------------------------------------------------------
    def _finish(self, stack: tuple[int, ...], q: int) -> tuple[int, ...] | None:
        """Parser stack after the pending terminal at lexer state q ends (None if it can't)."""
        labels = self._lexer(stack).labels[q]
        if q == 0 or not labels:
            return None
        term = labels[0]
        return stack if term in self._ignore else self._feed(stack, term)

    def _step(self, state: tuple, byte: int) -> tuple | None:
        key = (state, byte)
        if key in self._steps:
            return self._steps[key]
        stack, q = state
        nq = int(self._lexer(stack).trans[q, byte])
        out = (stack, nq) if nq >= 0 else None
        if out is None:
            stack2 = self._finish(stack, q)
            if stack2 is not None:
                nq = int(self._lexer(stack2).trans[0, byte])
                out = (stack2, nq) if nq >= 0 else None
        self._steps[key] = out
        return out

    def advance(self, state: tuple, data: bytes) -> tuple | None:
        for b in data:
            state = self._step(state, b)
            if state is None:
                return None
        return state

    def is_accepting(self, state: tuple) -> bool:
        stack, q = state
        if q:
            stack = self._finish(stack, q)
            if stack is None:
                return False
        return self._feed(stack, END) is not None

    def allowed_token_ids(self, state: tuple) -> np.ndarray:
        layout = self.info.layout
        positions = np.arange(len(layout.token_ids))
        found = self._walk(state[0], state[1], positions, 0)
        return layout.token_ids[np.sort(np.concatenate(found))] if found else np.zeros(0, np.int64)

    def _walk(self, stack, q, positions, col) -> list[np.ndarray]:
        lexer = self._lexer(stack)
        done, dead, dead_col, dead_q = walk_positions(lexer.trans, q, self.info.layout,
                                                      positions, col)
        found = [done]
        if len(dead):
            keys = dead_col * (1 << 32) + dead_q
            for key in np.unique(keys).tolist():
                j, pq = divmod(key, 1 << 32)
                stack2 = self._finish(stack, pq)
                if stack2 is not None:
                    found += self._walk(stack2, 0, dead[keys == key], j)
        return found

    def forced_bytes(self, state: tuple) -> bytes:
        if state not in self._forced:
            out = bytearray()
            cur = state
            while len(out) < 256 and not self.is_accepting(cur):
                nxt = [b for b in range(256) if self._step(cur, b) is not None]
                if len(nxt) != 1:
                    break
                out.append(nxt[0])
                cur = self._step(cur, nxt[0])
            self._forced[state] = bytes(out)
        return self._forced[state]


def _terminal_dfa(term, budget: CompileBudget) -> ByteDFA:
    pattern = term.pattern
    if isinstance(pattern, PatternStr) and not pattern.flags:
        nfa = NFA(budget)
        start = nfa.new_state()
        end = emit_bytes(nfa, start, pattern.value.encode())
        return trim_and_minimize(determinize(nfa, start, end, budget))
    regex = pattern.to_regexp()
    try:
        return regex_to_dfa(_LOOKBEHIND_FREE.get(regex, regex), budget)
    except InvalidConstraintError as e:
        raise InvalidConstraintError(f"terminal {term.name}: {e}") from e


def ebnf_to_automaton(info: TokenizerInfo, grammar: str, start: str,
                      budget: CompileBudget) -> EBNFAutomaton:
    return EBNFAutomaton(info, grammar, start, budget)
