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

# SGLang's constants (``from sglang.lang.ir import REGEX_INT``), same values, for gen(regex=...).
# The number patterns allow trailing blanks: pair them with ``stop=[" ", "\n"]`` as SGLang does.
REGEX_INT = r"[-+]?[0-9]+[ \n]*"
REGEX_FLOAT = r"[-+]?[0-9]*\.?[0-9]+[ \n]*"
REGEX_BOOL = r"(True|False)"
REGEX_STR = r"\"[\w\d\s]*\""

# gen() keyword -> SGLang sampling_params key
_SAMPLING_KEYS = {
    "max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens", "n": "n", "stop": "stop",
    "stop_token_ids": "stop_token_ids", "stop_regex": "stop_regex", "temperature": "temperature",
    "top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty", "repetition_penalty": "repetition_penalty",
    "ignore_eos": "ignore_eos", "seed": "seed", "regex": "regex", "json_schema": "json_schema",
    "ebnf": "ebnf",
}
# Request options (not sampling): what the variable's meta info carries.
REQUEST_KEYS = ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs")


# gen(dtype=...): the literal each type's text must be (Python's syntax for each), so that
# ``int(s["n"])`` always works; stricter than REGEX_* (no trailing blanks, no newline in str).
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
    """Generate text into variable ``name``; ``sampling`` holds only what the call set,
    ``request`` the logprob options (``return_logprob``, ``top_logprobs_num``, ...)."""

    name: str | None
    sampling: dict[str, Any]
    where: str | None = None
    request: dict[str, Any] = field(default_factory=dict)


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


@dataclass(slots=True)
class RoleBegin(_Concatenable):
    """``user_begin()``: opens a turn that a later ``user_end()`` closes."""

    role: str


@dataclass(slots=True)
class RoleEnd(_Concatenable):
    role: str


@dataclass(slots=True)
class VarScopeBegin:
    """``with s.var_scope(name):`` -- everything appended inside becomes variable ``name``."""

    name: str


@dataclass(slots=True)
class VarScopeEnd:
    name: str


@dataclass(slots=True)
class SeparateReasoning(_Concatenable):
    """``separate_reasoning(gen("x"))``: after ``expr`` runs, a ``<think>...</think>`` block at
    the start of variable ``x`` moves to ``x_reasoning_content`` (SGLang's naming)."""

    expr: Any
    model_type: str | None = None


def separate_reasoning(expr: Any = None, model_type: str | None = None) -> SeparateReasoning:
    return SeparateReasoning(expr, model_type)


def image(expr: Any) -> None:
    raise NotImplementedError("image(): the engine serves text-only models")


def video(path: str, num_frames: int) -> None:
    raise NotImplementedError("video(): the engine serves text-only models")


def gen(name: str | None = None, max_tokens: int | None = None, min_tokens: int | None = None,
        n: int | None = None, stop: str | list[str] | None = None, stop_token_ids: list[int] | None = None,
        stop_regex: str | list[str] | None = None, temperature: float | None = None,
        top_p: float | None = None, top_k: int | None = None, min_p: float | None = None,
        frequency_penalty: float | None = None, presence_penalty: float | None = None,
        ignore_eos: bool | None = None, return_logprob: bool | None = None,
        logprob_start_len: int | None = None, top_logprobs_num: int | None = None,
        return_text_in_logprobs: bool | None = None, dtype: type | str | None = None,
        choices: list[str] | None = None, choices_method: str | None = None,
        regex: str | None = None, json_schema: str | dict | None = None, *,
        ebnf: str | None = None, **sampling: Any) -> Gen | Select:
    """``s += gen("answer", max_tokens=32, stop="\\n")``; with ``choices=`` it is a ``select``.

    The arguments are SGLang's, in SGLang's order (``gen("x", 16)`` is ``max_tokens=16``).
    ``dtype`` (``int``, ``float``, ``bool``, ``str`` or their names) constrains the text to that
    type's literal: ``int(s["n"])`` then always works. ``n > 1`` makes the variable a list (the
    first is appended). ``seed`` and ``repetition_penalty`` pass through as keywords.
    """
    where = _caller_line()
    label = f'gen("{name}")' if name else "gen()"
    if dtype is not None:
        regex = _dtype_regex(dtype, label, where, regex=regex, json_schema=json_schema, ebnf=ebnf,
                             choices=choices)
    if choices is not None:
        given = [k for k, v in (("regex", regex), ("json_schema", json_schema), ("ebnf", ebnf)) if v is not None]
        if given:
            raise ValueError(f"{label} at {where}: choices= cannot be combined with {given[0]}=")
        return _make_select(name, choices, choices_method or CHOICES_METHODS[0], where, label)
    constraints = [k for k, v in (("regex", regex), ("json_schema", json_schema), ("ebnf", ebnf)) if v is not None]
    if len(constraints) > 1:
        raise ValueError(f"{label} at {where}: conflicting constraints {' and '.join(constraints)}; "
                         "pass at most one of regex, json_schema, ebnf")
    unknown = sorted(set(sampling) - {"seed", "repetition_penalty"})
    if unknown:
        raise ValueError(f"{label} at {where}: unknown keyword {unknown[0]!r}")
    if isinstance(json_schema, dict):
        json_schema = json.dumps(json_schema)
    given_kwargs = dict(sampling, max_tokens=max_tokens, min_tokens=min_tokens, n=n, stop=stop,
                        stop_token_ids=stop_token_ids, stop_regex=stop_regex, temperature=temperature,
                        top_p=top_p, top_k=top_k, min_p=min_p, frequency_penalty=frequency_penalty,
                        presence_penalty=presence_penalty, ignore_eos=ignore_eos, regex=regex,
                        json_schema=json_schema, ebnf=ebnf)
    params = {_SAMPLING_KEYS[k]: v for k, v in given_kwargs.items() if v is not None}
    request = {k: v for k, v in zip(REQUEST_KEYS, (return_logprob, logprob_start_len, top_logprobs_num,
                                                   return_text_in_logprobs)) if v is not None}
    return Gen(name, params, where, request)


def _dtype_regex(dtype: type | str, label: str, where: str | None, **others: Any) -> str:
    kind = dtype if isinstance(dtype, str) else getattr(dtype, "__name__", repr(dtype))
    kind = "str" if kind == "string" else kind
    if kind not in DTYPE_REGEX:
        raise ValueError(f"{label} at {where}: dtype must be one of int, float, bool, str; got {dtype!r}")
    given = [k for k, v in others.items() if v is not None]
    if given:
        raise ValueError(f"{label} at {where}: dtype= cannot be combined with {given[0]}=")
    return DTYPE_REGEX[kind]


def gen_int(name: str | None = None, max_tokens: int | None = None, **kwargs: Any) -> Gen:
    """SGLang's ``gen_int``: ``gen(name, max_tokens, dtype=int, ...)``."""
    return _typed_gen(int, name, max_tokens, kwargs)


def gen_string(name: str | None = None, max_tokens: int | None = None, **kwargs: Any) -> Gen:
    """SGLang's ``gen_string``: a double-quoted string literal (``gen(..., dtype=str)``)."""
    return _typed_gen(str, name, max_tokens, kwargs)


def _typed_gen(dtype: type, name: str | None, max_tokens: int | None, kwargs: dict[str, Any]) -> Gen:
    for key in ("dtype", "choices", "regex", "json_schema", "ebnf"):
        if key in kwargs:
            raise ValueError(f"gen_{dtype.__name__}(): takes no {key}=")
    g = gen(name, max_tokens, dtype=dtype, **kwargs)
    g.where = _caller_line(3)
    return g


def select(name: str | None = None, choices: list[str] | None = None, temperature: float = 0.0,
           choices_method: str = "token_length_normalized") -> Select:
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


def system_begin() -> RoleBegin:
    return RoleBegin("system")


def system_end() -> RoleEnd:
    return RoleEnd("system")


def user_begin() -> RoleBegin:
    return RoleBegin("user")


def user_end() -> RoleEnd:
    return RoleEnd("user")


def assistant_begin() -> RoleBegin:
    return RoleBegin("assistant")


def assistant_end() -> RoleEnd:
    return RoleEnd("assistant")
