"""Differential fuzz: random schemas of the keywords that combine (not, oneOf, anyOf, allOf,
if/then/else over typed leaves, objects and arrays), random JSON values, and jsonschema as the
judge. Whatever the grammar accepts must be valid (never under-constrained); a schema it
refuses is fine. Seeded, so a failure reproduces; each case it once found is also a named test
in test_json_schema_keywords.py.
"""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
from schema_suite_runner import accepted_by_masks, byte_vocab_info

from constraints import ConstraintError, GrammarCompiler

NAMES = ["a", "b", "c"]
_BOUNDS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")


@pytest.fixture(scope="module")
def byte_compiler() -> GrammarCompiler:
    return GrammarCompiler(byte_vocab_info(), max_states=20_000, compile_timeout_s=5.0)


def _leaf(rng: random.Random, depth: int) -> dict:
    schema: dict = {}
    kind = rng.choice(["string", "integer", "number", "object", "array", "null", "boolean", None])
    if kind:
        schema["type"] = kind if rng.random() < 0.7 else [kind, rng.choice(["null", "string", "integer"])]
    for _ in range(rng.randint(0, 3)):
        key = rng.choice([*_BOUNDS, "minimum", "maximum", "exclusiveMinimum", "required", "properties",
                          "additionalProperties", "items", "enum", "const", "pattern", "propertyNames"])
        if key in _BOUNDS:
            schema[key] = rng.randint(0, 3)
        elif key in ("minimum", "maximum", "exclusiveMinimum"):
            schema[key] = rng.randint(-2, 3)
        elif key == "required":
            schema[key] = rng.sample(NAMES, rng.randint(1, 2))
        elif key == "properties" and depth < 2:
            schema[key] = {n: _schema(rng, depth + 1) for n in rng.sample(NAMES, rng.randint(1, 2))}
        elif key == "additionalProperties":
            schema[key] = rng.choice([False, True, {"type": "integer"}]) if depth < 2 else False
        elif key == "items" and depth < 2:
            schema[key] = _schema(rng, depth + 1)
        elif key == "enum":
            schema[key] = rng.sample(["x", "yy", 1, 2, None, True, [], {}, {"a": 1}, {"a": 1, "b": "x"}],
                                     rng.randint(1, 3))
        elif key == "const":
            schema[key] = rng.choice(["x", 1, None, 0])
        elif key == "pattern":
            schema[key] = rng.choice(["^x", "y$", "^[a-c]*$"])
        elif key == "propertyNames":
            schema[key] = rng.choice([{"enum": ["a", "b"]}, {"const": "c"}, {"pattern": "^[ab]$"}])
    return schema


def _schema(rng: random.Random, depth: int = 0) -> dict:
    r = rng.random()
    if depth < 3 and r < 0.25:
        return {"not": _schema(rng, depth + 1), **(_leaf(rng, depth) if rng.random() < 0.7 else {})}
    if depth < 3 and r < 0.45:
        branches = [_schema(rng, depth + 1) for _ in range(rng.randint(2, 3))]
        return {rng.choice(["oneOf", "anyOf"]): branches, **(_leaf(rng, depth) if rng.random() < 0.5 else {})}
    if depth < 2 and r < 0.52:
        return {"allOf": [_schema(rng, depth + 1) for _ in range(2)]}
    if depth < 2 and r < 0.58:
        out = {"if": _schema(rng, depth + 1), "then": _schema(rng, depth + 1)}
        return {**out, "else": _schema(rng, depth + 1)} if rng.random() < 0.6 else out
    return _leaf(rng, depth)


def _value(rng: random.Random, depth: int = 0):
    r = rng.random()
    if r < 0.15:
        return rng.choice(["", "x", "yy", "xy", "abc", "abcd", "a"])
    if r < 0.35:
        return rng.choice([0, 1, 2, -1, 3, 5, 1.5, -2.5])
    if r < 0.45:
        return rng.choice([None, True, False])
    if r < 0.72 and depth < 2:
        return {n: _value(rng, depth + 1) for n in rng.sample(NAMES, rng.randint(0, 3))}
    if depth < 2:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return 1


@pytest.mark.parametrize("seed", range(4))
def test_random_schemas_accept_only_valid_values(byte_compiler, seed):
    rng = random.Random(seed)
    compiled = accepted = 0
    for _ in range(200):
        schema = _schema(rng)
        try:
            grammar = byte_compiler.compile_json_schema(schema)
        except ConstraintError:
            continue
        compiled += 1
        validator = jsonschema.Draft202012Validator(schema)
        for _ in range(40):
            value = _value(rng)
            text = json.dumps(value, separators=(",", ":"))
            if accepted_by_masks(grammar, text.encode()):
                accepted += 1
                assert validator.is_valid(value), f"schema {json.dumps(schema)} accepted invalid {text}"
    # Not vacuous: most schemas compile and many values are accepted (and so checked).
    assert compiled >= 150 and accepted >= 1200, (compiled, accepted)
