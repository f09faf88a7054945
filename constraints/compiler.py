"""GrammarCompiler: regex / JSON Schema / EBNF / choices -> CompiledGrammar, cached per spec."""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from .automaton import DFAAutomaton, TokenAutomaton
from .budget import CompileBudget
from .errors import InvalidConstraintError
from .grammar import CompiledGrammar
from .limits import ConstraintLimits, check_ebnf, check_json_schema, check_regex
from .regex import regex_to_dfa
from .vocab import TokenizerInfo


class GrammarCompiler:
    """Compiles constraints for one tokenizer; thread-safe; LRU cache by (kind, spec, options)."""

    def __init__(self, info: TokenizerInfo, max_states: int = 20_000,
                 compile_timeout_s: float = 10.0, cache_size: int = 256,
                 limits: ConstraintLimits | None = None):
        self.info = info
        self.limits = limits or ConstraintLimits()
        self.max_states = max_states
        self.compile_timeout_s = compile_timeout_s
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple, CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()

    def compile_regex(self, pattern: str) -> CompiledGrammar:
        check_regex(pattern, self.limits)
        return self._cached(("regex", pattern), lambda b: DFAAutomaton(
            self.info, regex_to_dfa(pattern, b)))

    def compile_choices(self, choices: list[str]) -> CompiledGrammar:
        if not choices:
            raise InvalidConstraintError("choices must not be empty")
        pattern = "|".join(_escape_literal(c) for c in choices)
        spec = json.dumps(list(choices))
        return self._cached(("choices", spec), lambda b: DFAAutomaton(
            self.info, regex_to_dfa(pattern, b)))

    def compile_json_schema(self, schema: dict | str, *, whitespace: str = "compact",
                            lenient: bool = False) -> CompiledGrammar:
        from .json_schema import json_schema_to_automaton

        spec = schema if isinstance(schema, str) else json.dumps(schema)  # key order is output order
        root = check_json_schema(spec, self.limits)  # parsed once: the build goes on from it
        return self._cached(("json_schema", spec, whitespace, lenient),
                            lambda b: json_schema_to_automaton(self.info, root, whitespace, lenient, b))

    def compile_ebnf(self, grammar: str, start: str = "start") -> CompiledGrammar:
        from .ebnf import ebnf_to_automaton

        check_ebnf(grammar, self.limits)
        return self._cached(("ebnf", grammar, start),
                            lambda b: ebnf_to_automaton(self.info, grammar, start, b))

    def compile_after_think(self, grammar: CompiledGrammar, mode: str) -> CompiledGrammar:
        """``grammar`` after a reasoning block (``constraints.after_think``): ``mode`` is
        "optional" (the reply may open with <think> ... </think>) or "open" (the prompt opened
        the block; the reply closes it first)."""
        from .after_think import AfterThinkAutomaton

        return self._cached((f"after_think:{mode}:{grammar.kind}", grammar.spec),
                            lambda b: AfterThinkAutomaton(grammar.automaton, mode))

    def _cached(self, key: tuple, build: Callable[[CompileBudget], TokenAutomaton]) -> CompiledGrammar:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        t0 = time.perf_counter()
        automaton = build(CompileBudget(self.max_states, self.compile_timeout_s))
        automaton.mask_words(automaton.initial)  # the first fill reads it: computed here, off the scheduler
        grammar = CompiledGrammar(key[0], key[1], automaton, time.perf_counter() - t0)
        with self._lock:
            self._cache[key] = grammar
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return grammar

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()


def _escape_literal(text: str) -> str:
    # interegular knows fewer escapes than `re`: escape only regex metacharacters.
    return "".join("\\" + c if c in _REGEX_META else c for c in text)


_REGEX_META = set(".^$*+?{}[]\\|()/")
