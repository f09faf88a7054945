"""Size limits, checked before any compile work: which specs each limit refuses and which
it lets through (no tokenizer needed: nothing is compiled)."""

from __future__ import annotations

import json

import pytest

from constraints import ConstraintLimitError, ConstraintLimits
from constraints.limits import check_spec

L = ConstraintLimits()


def _nested(depth: int) -> str:
    return '{"type": "array", "items": ' * depth + "{}" + "}" * depth


@pytest.mark.parametrize("kind,spec,limit", [
    ("regex", "[a-z0-8]{5000}", "max_repetition"),
    ("regex", "a{3,1001}", "max_repetition"),
    ("regex", "x" * 9000, "max_regex_chars"),
    ("json_schema", json.dumps({"enum": [str(i) for i in range(10_000)]}), "max_enum_values"),
    ("json_schema", json.dumps({"properties": {"a": {"enum": list(range(1025))}}}), "max_enum_values"),
    ("json_schema", json.dumps({"type": "string", "pattern": "a{2000}"}), "max_repetition"),
    ("json_schema", json.dumps({"patternProperties": {"^x{5000}$": {}}}), "max_repetition"),
    ("json_schema", _nested(300), "max_schema_depth"),
    ("json_schema", json.dumps({"description": "x" * 300_000}), "max_spec_bytes"),
    ("ebnf", "start: " + " | ".join(f'"w{i}"' for i in range(5000)), "max_grammar_alternatives"),
    ("ebnf", "\n".join(f'r{i}: "x"' for i in range(2000)), "max_grammar_rules"),
    ("ebnf", 'start: /x{2000}/', "max_repetition"),
    ("ebnf", 'start: "a" ~ 5000', "max_repetition"),
])
def test_refused_naming_the_limit(kind, spec, limit):
    with pytest.raises(ConstraintLimitError) as e:
        check_spec(kind, spec, L)
    assert e.value.limit == limit and limit in str(e.value)


@pytest.mark.parametrize("kind,spec", [
    ("regex", "[a-z]{3,8}@[a-z]+\\.com"),
    ("regex", "a\\{5000}"),  # an escaped brace is no repetition
    ("regex", "x" * 8000),
    ("json_schema", json.dumps({"enum": list(range(1024))})),
    ("json_schema", json.dumps({"const": [str(i) for i in range(5000)]})),  # const is one value
    ("json_schema", json.dumps({"type": "string", "description": "{[{[" * 100})),  # brackets in strings
    ("json_schema", _nested(60)),
    ("ebnf", 'start: "a|b|c" | /x{3}/ | "d" ~ 3..5'),  # a | inside a string is no alternative
])
def test_allowed(kind, spec):
    check_spec(kind, spec, L)
