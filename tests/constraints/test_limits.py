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
    ("regex", "a{3,1025}", "max_repetition"),
    ("regex", "x" * 9000, "max_regex_chars"),
    ("json_schema", json.dumps({"enum": [str(i) for i in range(10_000)]}), "max_enum_values"),
    ("json_schema", json.dumps({"properties": {"a": {"enum": list(range(4097))}}}), "max_enum_values"),
    ("json_schema", json.dumps({"type": "string", "pattern": "a{2000}"}), "max_repetition"),
    ("json_schema", json.dumps({"patternProperties": {"^x{5000}$": {}}}), "max_repetition"),
    ("json_schema", _nested(300), "max_schema_depth"),
    ("json_schema", json.dumps({"description": "x" * 1_100_000}), "max_spec_bytes"),
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
    ("json_schema", json.dumps({"enum": list(range(4096))})),
    ("json_schema", json.dumps({"const": [str(i) for i in range(5000)]})),  # const is one value
    ("json_schema", json.dumps({"type": "string", "description": "{[{[" * 100})),  # brackets in strings
    ("json_schema", _nested(60)),
    ("ebnf", 'start: "a|b|c" | /x{3}/ | "d" ~ 3..5'),  # a | inside a string is no alternative
])
def test_allowed(kind, spec):
    check_spec(kind, spec, L)


def _depth_by_characters(text: str) -> int:
    """The deepest bracket nesting outside strings, read one character at a time."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _random_document(rng, depth: int = 0):
    """A JSON value of nested objects and arrays, keys from schema keywords (values of enum,
    const, default and examples are walked apart from schemas) and strings with brackets."""
    if depth > 6 or rng.random() < 0.3:
        return rng.choice(["{[", "]}", 'a"[', 3, None, True, "\\{"])
    if rng.random() < 0.5:
        return [_random_document(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = ["enum", "const", "default", "examples", "properties", "items", "anyOf", "x{", "]"]
    return {rng.choice(keys): _random_document(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def test_the_depth_limit_counts_nesting_like_a_character_scan():
    """The schema's depth is read while its limits are walked (values of enum, const, default
    and examples included): on random documents it refuses exactly where a character scan
    of the text finds the nesting deeper than the limit, brackets inside strings skipped."""
    import random

    rng = random.Random(0)
    refused = 0
    for _ in range(3000):
        text = json.dumps(_random_document(rng))
        limit = rng.randint(1, 6)
        try:
            check_spec("json_schema", text, ConstraintLimits(max_schema_depth=limit))
            ok = True
        except ConstraintLimitError as e:
            assert e.limit == "max_schema_depth", text
            ok, refused = False, refused + 1
        assert ok == (_depth_by_characters(text) <= limit), (text, limit)
    assert 300 < refused < 2700


def test_the_text_depth_check_skips_brackets_in_strings_like_a_character_scan():
    """A text with many brackets has its depth read before it is parsed: strings cut out
    with a regex (escapes, an unterminated string to the end). On random texts of brackets,
    quotes and backslashes it refuses exactly where a character scan finds the nesting too
    deep."""
    import random

    from constraints.limits import _check_json_depth

    rng = random.Random(0)
    refused = 0
    for _ in range(20_000):
        text = "".join(rng.choice('[]{}"\\a :é') for _ in range(rng.randint(0, 16)))
        limit = rng.randint(0, 3)
        try:
            _check_json_depth(text, limit)
            ok = True
        except ConstraintLimitError:
            ok, refused = False, refused + 1
        assert ok == (_depth_by_characters(text) <= limit), (text, limit)
    assert refused > 1000


def test_a_deep_text_is_refused_before_it_is_parsed(monkeypatch):
    """However high a process set its recursion limit, json.loads never sees a nesting
    deeper than its brackets allow (a C stack's worth of recursion)."""
    import types

    import constraints.limits as limits

    def loads(text):
        raise AssertionError("parsed")

    monkeypatch.setattr(limits, "json", types.SimpleNamespace(loads=loads))
    with pytest.raises(ConstraintLimitError) as e:
        check_spec("json_schema", "[" * 2000 + "]" * 2000, L)
    assert e.value.limit == "max_schema_depth"
    with pytest.raises(AssertionError, match="parsed"):  # few brackets: parsed, depth walked after
        check_spec("json_schema", "[" * 900 + "]" * 900, L)


@pytest.mark.parametrize("spec", [
    "[" * 100_000 + "]" * 100_000,  # far past what json.loads takes: refused as the depth it is
    "[" * 990 + "]" * 990,  # parsed first (few brackets): json.loads refuses or the walk does
    json.dumps({"enum": [json.loads("[" * 70 + "]" * 70)]}),  # a value nests too
])
def test_deep_nesting_is_the_depth_limit(spec):
    with pytest.raises(ConstraintLimitError) as e:
        check_spec("json_schema", spec, L)
    assert e.value.limit == "max_schema_depth"
