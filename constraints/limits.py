"""Size limits checked before any compile work: a hostile spec is refused in microseconds
with the limit it broke, instead of spending seconds reaching the compile budget.

Each check reads the spec text once and raises ``ConstraintLimitError`` naming the limit. A
schema is walked iteratively once parsed, and a text nesting deeper than the parser should
go is refused before it is parsed, so its depth cannot exhaust the stack.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np

from .errors import ConstraintLimitError, InvalidConstraintError


@dataclass(frozen=True, slots=True)
class ConstraintLimits:
    max_spec_bytes: int = 1024 * 1024  # a regex, schema or grammar's text, UTF-8 (Azure Pipelines: 619 KB)
    max_schema_depth: int = 64  # JSON nesting of a schema document
    max_enum_values: int = 4096  # one enum's values (GitHub issue forms list 1,772 languages)
    max_regex_chars: int = 8192  # one pattern (a regex, or a schema's pattern keyword)
    max_repetition: int = 1024  # a {n,m} bound in a pattern (AWS writes {0,1024} for its 1,024-character names)
    max_grammar_rules: int = 1024  # EBNF rule definitions
    max_grammar_alternatives: int = 2048  # EBNF `|` alternatives, all rules together


# A JSON string, or an unterminated one to the end of the text (its backslash escapes any char)
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
# Brackets a text may hold and still be parsed before its depth is known: json.loads nests no
# deeper than the brackets (and refuses past the recursion limit, wherever that was set)
_PARSE_FIRST_BRACKETS = 1000
_REPEAT = re.compile(r"(?<!\\)\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")
_EBNF_SKIP = re.compile(r'"(?:\\.|[^"\\])*"|/(?:\\.|[^/\\\n])+/[imslux]*|//[^\n]*|#[^\n]*')
_EBNF_REGEX = re.compile(r'(?<![\w"])/((?:\\.|[^/\\\n])+)/[imslux]*')
_LARK_REPEAT = re.compile(r"~\s*(\d+)(?:\s*\.\.\s*(\d+))?")
_EBNF_RULE = re.compile(r"^\s*[?!]?[A-Za-z_][\w.]*(?:\.\d+)?\s*(?::|::=)", re.MULTILINE)


def check_spec(kind: str, spec: str, limits: ConstraintLimits) -> None:
    """Every size limit of a ``kind`` (regex | json_schema | ebnf | choices) spec."""
    if kind == "regex":
        check_regex(spec, limits)
    elif kind == "json_schema":
        check_json_schema(spec, limits)
    elif kind == "ebnf":
        check_ebnf(spec, limits)
    elif kind == "choices":
        check_choices(spec, limits)


def check_choices(choices: list[str], limits: ConstraintLimits) -> None:
    """A choices list counts as one enum, and its strings as a spec's text."""
    if len(choices) > limits.max_enum_values:
        raise ConstraintLimitError(f"choices has {len(choices)} strings; the limit is "
                                   f"{limits.max_enum_values} (max_enum_values)", "max_enum_values")
    check_spec_bytes("choices", "".join(choices), limits)


def check_spec_bytes(kind: str, spec: str, limits: ConstraintLimits) -> None:
    n = len(spec.encode("utf-8", "surrogatepass"))
    if n > limits.max_spec_bytes:
        raise ConstraintLimitError(f"{kind} is {n} bytes; the limit is {limits.max_spec_bytes} "
                                   "(max_spec_bytes)", "max_spec_bytes")


def check_regex(pattern: str, limits: ConstraintLimits, where: str = "regex") -> None:
    if len(pattern) > limits.max_regex_chars:
        raise ConstraintLimitError(f"{where} has {len(pattern)} characters; the limit is "
                                   f"{limits.max_regex_chars} (max_regex_chars)", "max_regex_chars")
    for m in _REPEAT.finditer(pattern):
        bound = max(int(m.group(1)), int(m.group(2) or 0))
        if bound > limits.max_repetition:
            raise ConstraintLimitError(f"{where} repeats {bound} times ({m.group(0)}); the limit is "
                                       f"{limits.max_repetition} (max_repetition)", "max_repetition")


def check_json_schema(spec: str, limits: ConstraintLimits):
    """The schema's limits; returns it parsed (compile_json_schema goes on from it). Its
    nesting depth is read in the same walk (json.loads refuses a nesting past the recursion
    limit: then the depth limit is the one broken); a text with more brackets than
    _PARSE_FIRST_BRACKETS has its depth read from the text first, so a hostile nesting never
    reaches the parser however high a process set its recursion limit."""
    check_spec_bytes("json_schema", spec, limits)
    if spec.count("[") + spec.count("{") > _PARSE_FIRST_BRACKETS:
        _check_json_depth(spec, limits.max_schema_depth)  # before json.loads recurses that deep
    try:
        schema = json.loads(spec)
    except RecursionError:
        raise _too_deep(limits.max_schema_depth) from None
    except ValueError as e:
        raise InvalidConstraintError(f"json_schema is not valid JSON: {e}") from None
    # Each entry: a node, where it sits ((parent's, key) links turned into a JSON pointer only
    # for a message), its depth, and whether it is a schema (values of enum, const, default
    # and examples are read for depth alone); scalars are never pushed.
    max_depth = limits.max_schema_depth
    stack: list = [(schema, None, 1, True)] if isinstance(schema, (dict, list)) else []
    while stack:
        node, at, depth, is_schema = stack.pop()
        if depth > max_depth:
            raise _too_deep(max_depth)
        if isinstance(node, list):
            stack.extend((v, (at, i), depth + 1, is_schema) for i, v in enumerate(node)
                         if isinstance(v, (dict, list)))
            continue
        if not is_schema:
            stack.extend((v, at, depth + 1, False) for v in node.values() if isinstance(v, (dict, list)))
            continue
        enum = node.get("enum")
        if isinstance(enum, list) and len(enum) > limits.max_enum_values:
            raise ConstraintLimitError(f"enum at {_pointer(at)} has {len(enum)} values; the limit is "
                                       f"{limits.max_enum_values} (max_enum_values)", "max_enum_values")
        if isinstance(node.get("pattern"), str):
            check_regex(node["pattern"], limits, f"pattern at {_pointer(at)}")
        for key, value in node.items():
            if not isinstance(value, (dict, list)):
                continue
            if key == "patternProperties" and isinstance(value, dict):
                for p in value:
                    check_regex(p, limits, f"patternProperties key at {_pointer(at)}")
            stack.append((value, (at, key), depth + 1, key not in _VALUE_KEYWORDS))
    return schema


def _too_deep(max_depth: int) -> ConstraintLimitError:
    return ConstraintLimitError(f"json_schema nests deeper than {max_depth} levels "
                                "(max_schema_depth)", "max_schema_depth")


_VALUE_KEYWORDS = frozenset(("enum", "const", "default", "examples"))  # values, not schemas


def _pointer(at) -> str:
    """The JSON pointer of a (parent's, key) chain ('/' for the root)."""
    parts = []
    while at is not None:
        at, key = at
        parts.append(str(key))
    return "/" + "/".join(reversed(parts)) if parts else "/"


def check_ebnf(grammar: str, limits: ConstraintLimits) -> None:
    check_spec_bytes("ebnf", grammar, limits)
    rules = len(_EBNF_RULE.findall(grammar))
    if rules > limits.max_grammar_rules:
        raise ConstraintLimitError(f"ebnf has {rules} rules; the limit is {limits.max_grammar_rules} "
                                   "(max_grammar_rules)", "max_grammar_rules")
    for m in _EBNF_REGEX.finditer(grammar):
        check_regex(m.group(1), limits, "ebnf terminal pattern")
    bare = _EBNF_SKIP.sub(" ", grammar)
    alternatives = bare.count("|")
    if alternatives > limits.max_grammar_alternatives:
        raise ConstraintLimitError(f"ebnf has {alternatives} alternatives; the limit is "
                                   f"{limits.max_grammar_alternatives} (max_grammar_alternatives)",
                                   "max_grammar_alternatives")
    for m in _LARK_REPEAT.finditer(bare):
        bound = max(int(m.group(1)), int(m.group(2) or 0))
        if bound > limits.max_repetition:
            raise ConstraintLimitError(f"ebnf repeats {bound} times ({m.group(0).strip()}); the limit is "
                                       f"{limits.max_repetition} (max_repetition)", "max_repetition")


def _check_json_depth(text: str, max_depth: int) -> None:
    """Nesting depth of a JSON text, brackets inside strings skipped, without parsing it:
    strings cut out by one regex (an unterminated one runs to the end), then the brackets'
    running sum."""
    brackets = _JSON_STRING.sub("", text).encode()
    if b"[" not in brackets and b"{" not in brackets:
        return
    b = np.frombuffer(brackets, dtype=np.uint8)
    steps = ((b == ord("[")) | (b == ord("{"))).astype(np.int32) - ((b == ord("]")) | (b == ord("}")))
    if int(np.cumsum(steps).max()) > max_depth:
        raise _too_deep(max_depth)
