"""Compile limits: a hostile regex or schema gets a typed error quickly, never a hung server."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .errors import CompileTimeoutError, GrammarTooComplexError


@dataclass(slots=True)
class CompileBudget:
    """Caps shared by every stage of one compilation (NFA size, DFA states, wall time)."""

    max_states: int = 20_000
    timeout_s: float = 10.0
    deadline: float = field(default=0.0)
    discarded: int = 0  # NFA states emitted and rolled back (NFA.rollback), over the compile

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.timeout_s

    @property
    def max_nfa_states(self) -> int:
        # NFAs carry many epsilon and UTF-8 helper states per DFA state.
        return self.max_states * 16

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise CompileTimeoutError(f"constraint compilation exceeded {self.timeout_s:.1f} s")

    def check_dfa_states(self, n: int) -> None:
        if n > self.max_states:
            raise GrammarTooComplexError(
                f"automaton exceeds {self.max_states} states; simplify the constraint"
            )

    def check_nfa_states(self, n: int) -> None:
        if n > self.max_nfa_states:
            raise GrammarTooComplexError(
                f"constraint expands to more than {self.max_nfa_states} NFA states "
                "(nested or large repetitions?); simplify it"
            )

    def discard_nfa_states(self, n: int) -> None:
        """``n`` NFA states were emitted and rolled back: the work counts against the NFA cap
        across the whole compile, so trying values inline first (json_compound._Members)
        costs at most one more cap's worth of emission, not one per value tried."""
        self.discarded += n
        if self.discarded > self.max_nfa_states:
            raise GrammarTooComplexError(
                f"constraint expands to more than {self.max_nfa_states} NFA states, counting "
                "values tried inline and emitted again as rules of their own; simplify it"
            )
