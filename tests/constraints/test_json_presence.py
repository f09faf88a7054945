"""`required` under anyOf / oneOf / allOf / not: which names an object has, as one set
(json_presence.py), checked exactly against the validator over every pattern of names."""

from __future__ import annotations

import json
import random
from itertools import combinations

import jsonschema
import pytest
from schema_suite_runner import accepted_by_masks, byte_vocab_info

from constraints import GrammarCompiler

# SchemaStore's TSON scales: not both repeat names, at most one of the min names (exactly one,
# or a `not` of the oneOf of every one or two of them), and the same of the max names.
_AT_MOST_ONE = [{"required": ["min"]}, {"required": ["minimum"]}, {"required": ["min frequency"]},
                {"not": {"oneOf": [{"required": ["min"]}, {"required": ["minimum"]},
                                   {"required": ["min frequency"]}, {"required": ["min", "minimum"]},
                                   {"required": ["min", "min frequency"]},
                                   {"required": ["minimum", "min frequency"]}]}}]
SCALE = {"type": "object", "required": ["notes"], "additionalProperties": True,
         "properties": {"notes": {"type": "integer"}, "repeat": {"type": "integer"},
                        "repeat ratio": {"type": "integer"}, "min": {"type": "integer"},
                        "minimum": {"type": "integer"}, "min frequency": {"type": "integer"},
                        "max": {"type": "integer"}, "maximum": {"type": "integer"}},
         "allOf": [{"not": {"required": ["repeat", "repeat ratio"]}}, {"oneOf": _AT_MOST_ONE},
                   {"oneOf": [{"required": ["max"]}, {"required": ["maximum"]},
                              {"not": {"anyOf": [{"required": ["max"]}, {"required": ["maximum"]}]}}]}]}
# Names the properties do not declare (written as any value), no type: values that are not
# objects fail the `not` (each `required` holds for them).
NEITHER = {"not": {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}}
# Exactly one of two, or both but then c as well: an anyOf whose branch holds a oneOf.
ONE_OR_ALL = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                                               "c": {"type": "integer"}},
              "anyOf": [{"oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
                        {"required": ["a", "b", "c"]}]}


@pytest.fixture(scope="module")
def byte_compiler() -> GrammarCompiler:
    return GrammarCompiler(byte_vocab_info(), cache_size=0)


def _objects(names: list[str]):
    """One object per subset of ``names``, members in the schema's order."""
    for k in range(len(names) + 1):
        for chosen in combinations(names, k):
            yield "{" + ",".join(f'"{n}":1' for n in chosen) + "}"


@pytest.mark.parametrize("schema,names", [
    (SCALE, ["notes", "repeat", "repeat ratio", "min", "minimum", "min frequency", "max", "maximum"]),
    (ONE_OR_ALL, ["a", "b", "c"]),
    (NEITHER, ["a", "b"]),
], ids=["scale", "one_or_all", "neither"])
def test_every_pattern_of_names_as_the_validator_reads_it(byte_compiler, schema, names):
    """Every subset of the names the predicates read: the grammar takes exactly the objects the
    validator takes (a pattern dropped is over-constrained, one let through under-)."""
    _every_subset_as_the_validator(byte_compiler, schema, names)


def _every_subset_as_the_validator(byte_compiler, schema: dict, names: list[str]):
    """The grammar of ``schema`` takes an object of each subset of ``names`` exactly where the
    validator does, and both takes and refuses some; returns (grammar, validator)."""
    grammar = byte_compiler.compile_json_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    taken = seen = 0
    for text in _objects(names):
        valid = validator.is_valid(json.loads(text))
        assert accepted_by_masks(grammar, text.encode()) == valid, text
        taken += valid
        seen += 1
    assert 0 < taken < seen  # the predicates both take and refuse
    return grammar, validator


def test_extra_members_leave_the_pattern_alone(byte_compiler):
    """Members of other names (additionalProperties) after the ones the predicates read."""
    grammar = byte_compiler.compile_json_schema(SCALE)
    assert accepted_by_masks(grammar, b'{"notes":1,"min":1,"x":2,"y":[1]}')
    assert not accepted_by_masks(grammar, b'{"notes":1,"min":1,"minimum":2,"x":2}')


def test_values_that_are_not_objects_follow_the_predicate(byte_compiler):
    """`required` holds for any value that is not an object: under `not` those fail, under a
    oneOf whose other branch is `not` they pass."""
    neither = byte_compiler.compile_json_schema(NEITHER)
    for text in (b"5", b'"a"', b"[]", b"null"):
        assert not accepted_by_masks(neither, text)
    either = byte_compiler.compile_json_schema({"oneOf": [
        {"required": ["a"]}, {"not": {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}}]})
    # Not an object: the first branch holds, the second not; each object here holds one.
    for text in (b"5", b'"a"', b"[]", b"{}", b'{"a":1}', b'{"a":1,"b":2}'):
        assert accepted_by_masks(either, text)
    assert not accepted_by_masks(either, b'{"b":2}')


def test_a_predicate_no_object_satisfies_admits_no_object(byte_compiler):
    """Where no pattern of names passes, no object is written; values of other types follow
    the predicate as if every name were present (here they fail it too)."""
    schema = {"type": ["object", "string"], "allOf": [{"required": ["a"]}, {"not": {"anyOf": [
        {"required": ["a"]}, {"required": ["b"]}]}}], "properties": {"a": {"type": "integer"}}}
    grammar = byte_compiler.compile_json_schema(schema)
    assert not accepted_by_masks(grammar, b'{"a":1}') and not accepted_by_masks(grammar, b"{}")
    assert not accepted_by_masks(grammar, b'"s"')  # `not` of a required: strings fail it too
    only_objects = byte_compiler.compile_json_schema({"type": "object", "required": ["a"], "not": {
        "anyOf": [{"required": ["a"], "not": {"required": ["b"]}}, {"required": ["b"]}]}})
    assert only_objects.admits_nothing  # with a, the anyOf holds whether b is there or not


def test_unique_open_items_with_conditions_and_an_empty_branch(byte_compiler):
    """uniqueItems over open objects (any further member) under if/then/else, or beside an
    anyOf branch no object satisfies (more required names than maxProperties): the
    conditions' branches are open values and the empty one adds no items, so the matcher's
    check applies (TSON's spectra); before, both were refused as not open."""
    conditional = {"type": "object", "required": ["kind"], "additionalProperties": True,
                   "properties": {"kind": {"enum": ["a", "b"]}, "x": {"type": "integer"}},
                   "if": {"properties": {"kind": {"const": "a"}}}, "then": {"required": ["x"]}}
    empty_branch = {"type": "object", "additionalProperties": True, "properties": {"c": {"type": "integer"}},
                    "anyOf": [{"required": ["a", "b"], "maxProperties": 1}, {"required": ["c"]}]}
    cases = [(conditional, '[{"kind":"a","x":1},{"kind":"b"},{"kind":"a","x":2}]'),
             (conditional, '[{"kind":"a","x":1},{"kind":"b"},{"kind":"a","x":1}]'),
             (conditional, '[{"kind":"a"}]'),
             (conditional, '[{"kind":"b","x":1},{"kind":"b","x":1.0}]'),
             (empty_branch, '[{"c":1},{"c":2},{"c":1,"d":1}]'),
             (empty_branch, '[{"c":1},{"c":2},{"c":1}]')]
    verdicts = []
    for items, text in cases:
        schema = {"type": "array", "uniqueItems": True, "items": items}
        valid = jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
        assert accepted_by_masks(byte_compiler.compile_json_schema(schema), text.encode()) == valid, text
        verdicts.append(valid)
    assert verdicts == [True, False, False, False, True, False]


_LISTED = [{"a": 1}, {"b": 1}, {"a": 1, "b": 1}, {}, {"c": 1}, "s", 5]


@pytest.mark.parametrize("schema", [
    {"enum": _LISTED, "not": {"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}},
    {"enum": _LISTED, "oneOf": [{"not": {"required": ["a"]}}, {"required": ["b"]}]},
    # lifted beside the anyOf, then merged into its enum branch
    {"anyOf": [{"enum": _LISTED}, {"type": "string", "maxLength": 0}], "not": {"required": ["a", "b"]},
     "oneOf": [{"required": ["a"]}, {"required": ["b"]}, {"required": ["c"]}]},
], ids=["not_oneof", "oneof_of_not", "merged_after_lift"])
def test_listed_values_meet_the_predicates(byte_compiler, schema):
    """Listed values (enum) are checked by the validator against the schema's other keywords:
    the predicates must reach it as combinators or be checked on the listed objects once folded
    into PRESENCE, which the validator does not read (before, every listed object passed)."""
    grammar = byte_compiler.compile_json_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    verdicts = []
    for value in _LISTED:
        text = json.dumps(value, separators=(",", ":"))
        verdicts.append(validator.is_valid(value))
        assert accepted_by_masks(grammar, text.encode()) == verdicts[-1], text
    assert any(verdicts) and not all(verdicts)


# SchemaStore's TSON partials: "not only frequency ratio and ratio, both" (an `if` of an
# enumerated propertyNames and a count, then false), else exactly one of the two; the same of
# the weights. Any other member is allowed.
_NUMBER = {"type": "integer"}
PARTIAL = {"type": "object", "additionalProperties": True,
           "properties": {"frequency ratio": _NUMBER, "ratio": _NUMBER, "amplitude weight": _NUMBER, "weight": _NUMBER},
           "allOf": [{"if": {"propertyNames": {"enum": ["frequency ratio", "ratio"]}, "minProperties": 2},
                      "then": False, "else": {"oneOf": [{"required": ["frequency ratio"]}, {"required": ["ratio"]}]}},
                     {"if": {"propertyNames": {"enum": ["amplitude weight", "weight"]}, "minProperties": 2},
                      "then": False, "else": {"oneOf": [{"required": ["amplitude weight"]}, {"required": ["weight"]}]}}]}
# A member named outside a list, alone: values that are not objects fail it.
SOME_OTHER = {"properties": {"a": _NUMBER, "b": _NUMBER}, "additionalProperties": True, "not": {"propertyNames": {"enum": ["a"]}}}
ONLY_LISTED = {"type": "object", "additionalProperties": True, "properties": {"a": _NUMBER, "b": _NUMBER},
               "anyOf": [{"propertyNames": {"const": "a"}}, {"required": ["b"], "maxProperties": 1,
                                                            "propertyNames": {"enum": ["a", "b"]}}]}


@pytest.mark.parametrize("schema,names", [
    (PARTIAL, ["frequency ratio", "ratio", "amplitude weight", "weight", "x"]),
    (SOME_OTHER, ["a", "b", "x", "y"]),
    (ONLY_LISTED, ["a", "b", "x"]),
], ids=["tson_partial", "some_other", "only_listed"])
def test_enumerated_names_and_counts_as_the_validator_reads_them(byte_compiler, schema, names):
    """propertyNames as an enum (with a count beside it) inside the predicates: each subset
    of the names, extra names ("x", "y") included, against the validator (before, the `not`
    of propertyNames was left out, a subset allowing one member: TSON's partials, which need
    a ratio and a weight, took no object)."""
    grammar, validator = _every_subset_as_the_validator(byte_compiler, schema, names)
    for text in ("5", '"a"', "[]", "null"):
        assert accepted_by_masks(grammar, text.encode()) == validator.is_valid(json.loads(text)), text


def test_listed_objects_meet_the_outside_atom(byte_compiler):
    schema = {"enum": [{"a": 1}, {"x": 1}, {"a": 1, "x": 1}, {}], "not": {"propertyNames": {"enum": ["a"]}}}
    grammar = byte_compiler.compile_json_schema(schema)
    verdicts = [accepted_by_masks(grammar, t) for t in (b'{"a":1}', b'{"x":1}', b'{"a":1,"x":1}', b"{}")]
    assert verdicts == [False, True, True, False]


_FUZZ_NAMES = ["a", "b", "c"]
_FUZZ_OBJECTS = [{k: 1 for k in chosen} for n in range(4) for chosen in combinations([*_FUZZ_NAMES, "d"], n)]


def _random_predicate(rng: random.Random, depth: int = 0) -> dict:
    r = rng.random()
    if depth < 2 and r < 0.5:
        key = rng.choice(["anyOf", "oneOf", "allOf", "not"])
        if key == "not":
            return {"not": _random_predicate(rng, depth + 1)}
        return {key: [_random_predicate(rng, depth + 1) for _ in range(rng.randint(2, 3))]}
    if r < 0.8:
        return {"required": rng.sample(_FUZZ_NAMES, rng.randint(1, 2))}
    out = {"propertyNames": rng.choice([{"enum": ["a", "b"]}, {"const": "a"}, {"enum": ["c", "b"]}])}
    if rng.random() < 0.6:
        out[rng.choice(["minProperties", "maxProperties"])] = rng.randint(0, 2)
    return out


@pytest.mark.parametrize("seed", range(2))
def test_random_predicates_match_the_validator(byte_compiler, seed):
    """Random predicates (required lists, enumerated propertyNames with counts, under
    anyOf / oneOf / allOf / not), beside listed objects or not, over objects of every subset
    of the names and one more: what the grammar takes is exactly what the validator takes.
    Listed objects beside folded predicates once passed them all (test_listed_values_...)."""
    rng = random.Random(seed)
    checked = taken = 0
    for _ in range(60):
        schema: dict = {}
        for _ in range(rng.randint(1, 3)):
            for key, value in _random_predicate(rng).items():
                schema.setdefault(key, value)
        if rng.random() < 0.4:
            schema["enum"] = rng.sample([*_FUZZ_OBJECTS, "x", 1], rng.randint(2, 8))
        if rng.random() < 0.5:
            schema["type"] = rng.choice(["object", ["object", "string"]])
        schema.setdefault("properties", {n: {"type": "integer"} for n in [*_FUZZ_NAMES, "d"]})
        schema["additionalProperties"] = True
        grammar = byte_compiler.compile_json_schema(schema)  # every such predicate compiles
        validator = jsonschema.Draft202012Validator(schema)
        for value in [*_FUZZ_OBJECTS, {"e": 1}, {"a": 1, "e": 1}, "x", 1]:
            text = json.dumps(value, separators=(",", ":"))
            valid = validator.is_valid(value)
            assert accepted_by_masks(grammar, text.encode()) == valid, (json.dumps(schema), text)
            checked += 1
            taken += valid
    assert 0 < taken < checked  # both verdicts came up, so both directions were checked
