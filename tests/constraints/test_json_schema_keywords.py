"""Keywords beyond the common core, each checked against an independent oracle on many
instances: decimal bounds and multipleOf (exact decimal arithmetic), property-name keywords
(patternProperties, propertyNames, min/maxProperties, dependentRequired), more formats."""

from __future__ import annotations

import json
import random
from decimal import Decimal

import pytest
from schema_suite_runner import accepted_by_masks, byte_vocab_info

from constraints import GrammarCompiler, UnsupportedSchemaError


@pytest.fixture(scope="module")
def byte_compiler() -> GrammarCompiler:
    return GrammarCompiler(byte_vocab_info(), max_states=20_000, compile_timeout_s=10.0)


def _accepts(grammar, text: str) -> bool:
    return accepted_by_masks(grammar, text.encode())


# ---- numbers ---------------------------------------------------------------------------------

def _number_ok(schema: dict, text: str) -> bool:
    """The schema's numeric keywords in exact decimal arithmetic (jsonschema uses floats)."""
    v = Decimal(text)
    if schema.get("type") == "integer" and v != v.to_integral_value():
        return False
    checks = {"minimum": v.__ge__, "maximum": v.__le__,
              "exclusiveMinimum": v.__gt__, "exclusiveMaximum": v.__lt__}
    for key, check in checks.items():
        if key in schema and not check(Decimal(repr(schema[key]))):
            return False
    steps = [schema["multipleOf"]] if "multipleOf" in schema else []
    steps += [part["multipleOf"] for part in schema.get("allOf", [])]
    return all(v % Decimal(repr(step)) == 0 for step in steps)


NUMBER_SCHEMAS = [
    {"type": "number", "minimum": 1.1},
    {"type": "number", "exclusiveMinimum": -0.5, "maximum": 2.05},
    {"type": "number", "exclusiveMaximum": -1.25},
    {"type": "number", "minimum": -10.09, "exclusiveMaximum": 0.001},
    {"type": "number", "multipleOf": 0.01},
    {"type": "number", "multipleOf": 1.5, "minimum": -3, "maximum": 10},
    {"type": "integer", "multipleOf": 7, "exclusiveMinimum": 0.5},
    {"type": "integer", "allOf": [{"multipleOf": 4}, {"multipleOf": 6}]},
    {"type": "number", "allOf": [{"multipleOf": 0.5}, {"multipleOf": 0.2}]},
]


def _number_texts(seed: int) -> list[str]:
    rng = random.Random(seed)
    texts = {"0", "-0", "0.0", "1.10", "2.050", "-1.250", "12", "-12", "0.001", "1.1", "-0.5"}
    for _ in range(400):
        v = Decimal(rng.randint(-3000, 3000)).scaleb(-rng.randint(0, 3))
        texts.add(format(v, "f"))
        texts.add(format(v, "f") + ("0" if "." in format(v, "f") else ".0"))  # trailing zero
    return sorted(texts)


@pytest.mark.parametrize("schema", NUMBER_SCHEMAS, ids=lambda s: json.dumps(s))
def test_decimal_bounds_and_multiple_of_match_exact_arithmetic(byte_compiler, schema):
    # Integers are generated without a fraction: 720.0 is valid but never spelled that way.
    grammar = byte_compiler.compile_json_schema(schema)
    spelled = [t for t in _number_texts(0) if schema["type"] == "number" or "." not in t]
    wrong = [t for t in spelled if _accepts(grammar, t) != _number_ok(schema, t)]
    assert not wrong, f"{len(wrong)} disagreements, e.g. {wrong[:5]}"
    assert not any(_accepts(grammar, t) for t in _number_texts(0) if t not in spelled)


def test_multiple_of_too_fine_for_an_automaton_is_a_clear_error(byte_compiler):
    with pytest.raises(UnsupportedSchemaError) as err:
        byte_compiler.compile_json_schema({"type": "integer", "multipleOf": 0.123456789})
    assert err.value.keyword == "multipleOf" and err.value.pointer == "/multipleOf"
