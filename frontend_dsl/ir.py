"""The expressions a program appends to its state: ``s += gen(...)``, ``select``, role blocks.

They are plain values built in the program's own line (where that line is, is recorded for
error messages); the interpreter in ``state.py`` executes them against a backend.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

CHOICES_METHODS = ("token_length_normalized", "greedy_token_selection",
                   "unconditional_likelihood_normalized")

# gen() keyword -> SGLang sampling_params key
_SAMPLING_KEYS = {
    "max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens", "stop": "stop",
    "stop_token_ids": "stop_token_ids", "temperature": "temperature", "top_p": "top_p",
    "top_k": "top_k", "min_p": "min_p", "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty", "repetition_penalty": "repetition_penalty",
    "ignore_eos": "ignore_eos", "seed": "seed", "regex": "regex", "json_schema": "json_schema",
    "ebnf": "ebnf",
}


# gen(dtype=...): the literal each type's text must be (Python's syntax for each).
DTYPE_REGEX = {
    "int": r"[-+]?[0-9]+",
    "float": r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?",
    "bool": r"(True|False)",
    "str": r'"[^"\\\n]*"',
}


def _caller_line(depth: int = 2) -> str | None:
    """``file:line`` of the program line that called gen()/select()/..."""
    try:
        frame = sys._getframe(depth)
    except ValueError:  # pragma: no cover - called from the top of the stack
        return None
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


class _Concatenable:
    """``"Q: " + gen("a") + "\\n"``: SGLang's expression concatenation, a ``Seq`` of parts."""

    __slots__ = ()

    def __add__(self, other: Any) -> Seq:
        return Seq((self, *_parts(other))) if _is_part(other) else NotImplemented

    def __radd__(self, other: Any) -> Seq:
        return Seq((*_parts(other), self)) if _is_part(other) else NotImplemented


class Seq(tuple):
    """Parts appended in order (the state and the tracer run tuples part by part)."""

    __slots__ = ()

    def __add__(self, other: Any) -> Seq:
        return Seq((*self, *_parts(other))) if _is_part(other) else NotImplemented

    def __radd__(self, other: Any) -> Seq:
        return Seq((*_parts(other), *self)) if _is_part(other) else NotImplemented


def _is_part(x: Any) -> bool:
    return isinstance(x, (str, Seq, _Concatenable))


def _parts(x: Any) -> tuple:
    return tuple(x) if isinstance(x, Seq) else (x,)


@dataclass(slots=True)
class Gen(_Concatenable):
    """Generate text into variable ``name``; ``sampling`` holds only what the call set."""

    name: str | None
    sampling: dict[str, Any]
    where: str | None = None


@dataclass(slots=True)
class Select(_Concatenable):
    """Pick one of ``choices`` by the choices' token logprobs given the text so far."""

    name: str | None
    choices: list[str]
    choices_method: str = "token_length_normalized"
    where: str | None = None


@dataclass(slots=True)
class Role(_Concatenable):
    """A chat turn: ``content`` is a string, an expression, or a list of both."""

    role: str
    content: list[Any] = field(default_factory=list)


def gen(name: str | None = None, max_tokens: int | None = None, *, stop: str | list[str] | None = None,
        temperature: float | None = None, top_p: float | None = None, top_k: int | None = None,
        regex: str | None = None, json_schema: str | dict | None = None, ebnf: str | None = None,
        choices: list[str] | None = None, choices_method: str = "token_length_normalized",
        dtype: type | str | None = None, **sampling: Any) -> Gen | Select:
    """``s += gen("answer", max_tokens=32, stop="\\n")``; with ``choices=`` it is a ``select``.

    ``dtype`` (``int``, ``float``, ``bool``, ``str`` or their names) constrains the text to that
    type's literal, as SGLang does: ``int(s["n"])`` then always works. Other SGLang sampling
    options (``min_tokens``, ``min_p``, ``frequency_penalty``, ``seed``, ``ignore_eos``, ...)
    pass through as keywords.
    """
    where = _caller_line()
    label = f'gen("{name}")' if name else "gen()"
    if dtype is not None:
        kind = dtype if isinstance(dtype, str) else getattr(dtype, "__name__", repr(dtype))
        if kind not in DTYPE_REGEX:
            raise ValueError(f"{label} at {where}: dtype must be one of int, float, bool, str; got {dtype!r}")
        given = [k for k, v in (("regex", regex), ("json_schema", json_schema), ("ebnf", ebnf),
                                ("choices", choices)) if v is not None]
        if given:
            raise ValueError(f"{label} at {where}: dtype= cannot be combined with {given[0]}=")
        regex = DTYPE_REGEX[kind]
    if choices is not None:
        given = [k for k, v in (("regex", regex), ("json_schema", json_schema), ("ebnf", ebnf)) if v is not None]
        if given:
            raise ValueError(f"{label} at {where}: choices= cannot be combined with {given[0]}=")
        return _make_select(name, choices, choices_method, where, label)
    constraints = [k for k, v in (("regex", regex), ("json_schema", json_schema), ("ebnf", ebnf)) if v is not None]
    if len(constraints) > 1:
        raise ValueError(f"{label} at {where}: conflicting constraints {' and '.join(constraints)}; "
                         "pass at most one of regex, json_schema, ebnf")
    unknown = sorted(set(sampling) - set(_SAMPLING_KEYS))
    if unknown:
        raise ValueError(f"{label} at {where}: unknown keyword {unknown[0]!r}")
    if isinstance(json_schema, dict):
        json_schema = json.dumps(json_schema)
    given_kwargs = dict(sampling, max_tokens=max_tokens, stop=stop, temperature=temperature,
                        top_p=top_p, top_k=top_k, regex=regex, json_schema=json_schema, ebnf=ebnf)
    params = {_SAMPLING_KEYS[k]: v for k, v in given_kwargs.items() if v is not None}
    return Gen(name, params, where)


def select(name: str | None = None, choices: list[str] | None = None,
           choices_method: str = "token_length_normalized", temperature: float = 0.0) -> Select:
    """``s += select("label", choices=["positive", "negative"])``: the best-scoring choice."""
    del temperature  # accepted for SGLang compatibility: selection is always by score
    where = _caller_line()
    return _make_select(name, choices, choices_method, where, f'select("{name}")' if name else "select()")


def _make_select(name, choices, choices_method, where, label) -> Select:
    if not choices or not all(isinstance(c, str) for c in choices):
        raise ValueError(f"{label} at {where}: choices must be a non-empty list of strings")
    if choices_method not in CHOICES_METHODS:
        raise ValueError(f"{label} at {where}: choices_method must be one of {CHOICES_METHODS}, "
                         f"got {choices_method!r}")
    return Select(name, list(choices), choices_method, where)


def _role(role: str, content: Any) -> Role:
    parts = content if isinstance(content, (list, tuple)) else [content]
    return Role(role, [p for p in parts if p is not None])


def system(content: Any = None) -> Role:
    return _role("system", content)


def user(content: Any = None) -> Role:
    return _role("user", content)


def assistant(content: Any = None) -> Role:
    return _role("assistant", content)
