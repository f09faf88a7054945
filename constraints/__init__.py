"""Constrained decoding: regex / JSON Schema / EBNF -> token automata, bitmasks, jump-forward.

Never imports sglang_lite; torch appears only where a mask becomes a tensor.
"""

from .bitmask import allocate_token_bitmask, apply_token_bitmask_inplace, bitmask_words
from .compiler import GrammarCompiler
from .errors import (
    CompileTimeoutError,
    ConstraintError,
    ConstraintLimitError,
    GrammarTooComplexError,
    InvalidConstraintError,
    UnsupportedSchemaError,
)
from .grammar import CompiledGrammar
from .limits import ConstraintLimits
from .matcher import GrammarMatcher
from .vocab import TokenizerInfo

__all__ = [
    "CompileTimeoutError",
    "CompiledGrammar",
    "ConstraintError",
    "ConstraintLimitError",
    "ConstraintLimits",
    "GrammarCompiler",
    "GrammarMatcher",
    "GrammarTooComplexError",
    "InvalidConstraintError",
    "TokenizerInfo",
    "UnsupportedSchemaError",
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "bitmask_words",
]
