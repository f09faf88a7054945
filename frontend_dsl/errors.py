"""Typed errors that say which program variable, and which program line, failed."""

from __future__ import annotations


class DSLError(Exception):
    """Base class of every error the frontend raises."""


class VariableNotFoundError(DSLError, KeyError):
    """``s["name"]`` read a variable the program never set."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0]


class ProgramError(DSLError):
    """A ``gen``/``select`` (or the program around it) failed.

    ``variable`` is the name the failed call was storing into, ``where`` the program line
    (``file:line``) that built it, ``cause`` the underlying exception.
    """

    def __init__(self, message: str, variable: str | None = None, where: str | None = None,
                 cause: BaseException | None = None):
        super().__init__(message)
        self.variable = variable
        self.where = where
        self.cause = cause


def describe(kind: str, name: str | None, where: str | None) -> str:
    """``gen("answer") at prog.py:12`` -- the prefix every per-call error message starts with."""
    label = f'{kind}("{name}")' if name else f"{kind}()"
    return f"{label} at {where}" if where else label
