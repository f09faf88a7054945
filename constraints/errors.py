"""Typed errors: a user's bad constraint gets a message naming what failed and where."""

from __future__ import annotations


class ConstraintError(ValueError):
    """Base of every error the constraint compiler raises."""


class InvalidConstraintError(ConstraintError):
    """The regex, schema or grammar text itself is malformed."""


class UnsupportedSchemaError(ConstraintError):
    """A JSON Schema keyword the compiler cannot enforce (never silently ignored)."""

    def __init__(self, message: str, keyword: str = "", pointer: str = ""):
        super().__init__(message)
        self.keyword = keyword
        self.pointer = pointer

    @classmethod
    def at(cls, keyword: str, pointer: str, why: str = "is not supported") -> UnsupportedSchemaError:
        where = pointer or "/"
        return cls(f"JSON Schema keyword '{keyword}' at {where} {why}", keyword, pointer)


class GrammarTooComplexError(ConstraintError):
    """The automaton would exceed the configured state cap."""


class CompileTimeoutError(ConstraintError):
    """Compilation ran past its time budget."""


class ConstraintLimitError(ConstraintError):
    """The spec is larger than a configured size limit (checked before any compile work)."""

    def __init__(self, message: str, limit: str = ""):
        super().__init__(message)
        self.limit = limit
