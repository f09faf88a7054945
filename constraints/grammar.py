"""CompiledGrammar: an immutable compiled constraint, handing out per-request matchers."""

from __future__ import annotations

from dataclasses import dataclass

from .automaton import TokenAutomaton
from .matcher import GrammarMatcher


@dataclass(frozen=True, slots=True, eq=False)
class CompiledGrammar:
    kind: str  # "regex" | "json_schema" | "ebnf" | "choices"
    spec: str
    automaton: TokenAutomaton
    compile_time_s: float

    def matcher(self) -> GrammarMatcher:
        return GrammarMatcher(self.automaton)

    @property
    def vocab_size(self) -> int:
        return self.automaton.info.vocab_size

    @property
    def admits_nothing(self) -> bool:
        """No output can even start (a schema of an object that must be a string, say): exact
        as a language, but a request under it can only stop at its first step."""
        automaton = self.automaton
        return not automaton.is_accepting(automaton.initial) and not automaton.mask_words(automaton.initial).any()
