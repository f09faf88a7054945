"""Older drafts, in-document identifiers and the lowered keywords (dependentSchemas, contains,
unevaluated*, overlapping-looking oneOf): each schema is checked against jsonschema's own
validator for its draft (formats asserted) on fixed texts and on random walks through the
masks, so everything the grammar can generate is valid."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from schema_suite_runner import accepted_by_masks, byte_vocab_info
from test_json_schema_keywords import _random_outputs

from constraints import GrammarCompiler, InvalidConstraintError, UnsupportedSchemaError
from constraints.json_drafts import normalize_drafts

D4 = "http://json-schema.org/draft-04/schema#"
D7 = "http://json-schema.org/draft-07/schema#"
BENCH = Path(__file__).resolve().parents[3] / "shared/data/jsonschemabench-dev"


@pytest.fixture(scope="module")
def byte_compiler() -> GrammarCompiler:
    return GrammarCompiler(byte_vocab_info(), max_states=20_000, compile_timeout_s=10.0)


def _validator(schema: dict):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _check(grammar, schema: dict, valid: list, invalid: list, walks: int = 80) -> None:
    """Valid texts (by the draft's validator) are accepted, invalid ones refused, and every
    random walk through the masks is valid."""
    validator = _validator(schema)
    for text in valid:
        assert validator.is_valid(json.loads(text)) and accepted_by_masks(grammar, text.encode()), text
    for text in invalid:
        assert not validator.is_valid(json.loads(text)), text
        assert not accepted_by_masks(grammar, text.encode()), text
    outs = _random_outputs(grammar, seed=5, n=walks, max_len=300)
    assert len(outs) >= walks // 3
    for text in outs:
        assert validator.is_valid(json.loads(text)), text


CASES = [
    # draft 4: boolean exclusive bounds fold into the numeric ones
    ({"$schema": D4, "type": "number", "minimum": 1, "exclusiveMinimum": True, "maximum": 5,
      "exclusiveMaximum": False}, ["1.5", "5", "2"], ["1", "5.5", "0"]),
    # draft 4: dependencies, both forms
    ({"$schema": D4, "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                                                      "c": {"type": "boolean"}},
      "dependencies": {"a": ["b"], "c": {"required": ["a"]}}},
     ['{"a":1,"b":"x"}', '{"b":"x"}', '{"a":1,"b":"x","c":true}'], ['{"a":1}', '{"b":"x","c":true}']),
    # draft 4: array-form items with additionalItems
    ({"$schema": D4, "type": "array", "items": [{"type": "integer"}, {"type": "string"}],
      "additionalItems": False}, ["[1]", '[1,"a"]', "[]"], ['[1,"a",2]', '["a"]']),
    ({"$schema": D7, "type": "array", "items": [{"type": "integer"}], "additionalItems": {"type": "boolean"}},
     ["[1,true,false]", "[]"], ["[1,2]", "[true]"]),
    # draft 4 nested id: "#/definitions/b" inside a.json resolves against a.json
    ({"$schema": D4, "id": "http://example.com/root.json", "type": "object",
      "properties": {"p": {"$ref": "a.json"}, "q": {"$ref": "#/definitions/b"}}, "required": ["p", "q"],
      "definitions": {"b": {"type": "string"},
                      "a": {"id": "a.json", "type": "array", "items": {"$ref": "#/definitions/b"},
                            "maxItems": 2, "definitions": {"b": {"type": "integer"}}}}},
     ['{"p":[1,2],"q":"x"}'], ['{"p":["x"],"q":"x"}', '{"p":[1],"q":1}']),
    # draft 7 "$id": "#name" is an anchor; 2020-12 $anchor and a ref by absolute URI
    ({"$schema": D7, "type": "array", "items": {"$ref": "#item"},
      "definitions": {"i": {"$id": "#item", "type": "integer", "minimum": 3}}}, ["[3,4]"], ["[2]", '["a"]']),
    ({"$id": "https://example.com/s", "type": "object", "additionalProperties": False,
      "properties": {"n": {"$ref": "#num"}, "m": {"$ref": "https://example.com/t#/$defs/s"}},
      "$defs": {"num": {"$anchor": "num", "type": "integer", "maximum": 9},
                "t": {"$id": "t", "$defs": {"s": {"type": "string", "maxLength": 2}}}}},
     ['{"n":9,"m":"ab"}', "{}"], ['{"n":10}', '{"m":"abc"}']),
    # names and values that look like keywords are left alone
    ({"$schema": D4, "type": "object", "required": ["id", "items"], "additionalProperties": False,
      "properties": {"id": {"type": "string", "enum": ["x"]},
                     "items": {"enum": [{"id": "y", "items": [1], "dependencies": 2}]}}},
     ['{"id":"x","items":{"id":"y","items":[1],"dependencies":2}}'],
     ['{"id":"x","items":{"id":"y","items":[1],"dependencies":3}}']),
    # an unknown format is an annotation; a known one is enforced
    ({"type": "object", "required": ["t", "d"], "additionalProperties": False,
      "properties": {"t": {"type": "string", "format": "topic", "maxLength": 3},
                     "d": {"type": "string", "format": "date"}}},
     ['{"t":"a/b","d":"2024-02-29"}'], ['{"t":"a","d":"2023-02-29"}']),
    # allOf parts whose annotations differ (a draft-4 id left in a draft-7 schema) still merge
    ({"$schema": D7, "allOf": [{"id": "a", "type": "object", "properties": {"x": {"type": "integer"}},
                                "required": ["x"], "x-note": 1},
                               {"id": "b", "x-note": 2, "properties": {"x": {"maximum": 3}}}]},
     ['{"x":3}'], ['{"x":4}', "{}"]),
]


@pytest.mark.parametrize("schema,valid,invalid", CASES, ids=lambda s: json.dumps(s)[:60])
def test_draft_spellings_and_identifiers_match_their_draft(byte_compiler, schema, valid, invalid):
    _check(byte_compiler.compile_json_schema(schema), schema, valid, invalid)


LOWERED = [
    # dependentSchemas as in WashingtonPost's reference schemas
    ({"type": "object", "additionalProperties": False, "required": ["type"],
      "properties": {"type": {"type": "string", "enum": ["section", "story"]}, "website": {"type": "string"}},
      "dependentSchemas": {"website": {"properties": {"type": {"enum": ["section"]}}}}},
     ['{"type":"section","website":"w"}', '{"type":"story"}'], ['{"type":"story","website":"w"}']),
    # mutually exclusive names (Github-Hard o58639's dependencies), an open object
    ({"$schema": D4, "type": "object",
      "dependencies": {"page": {"not": {"required": ["script"]}}, "script": {"not": {"required": ["page"]}},
                       "x": {"not": {"required": ["x"]}}}},
     ['{"page":1}', '{"script":2,"other":3}', "{}"], ['{"page":1,"script":2}', '{"x":0}']),
    # contains / minContains / maxContains
    # (matching items anywhere, counted exactly)
    ({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}, "minContains": 2},
     ["[5,6]", "[7,5,1]", "[1,5,2,6]", "[5,5,5]"], ["[5]", "[5,1]", "[1,2,3]"]),
    ({"type": "array", "items": {"type": "integer"}, "contains": {"const": 1}, "maxContains": 2},
     ["[1]", "[1,1]", "[2,1,3,1,4]"], ["[1,1,1]", "[]", "[2,3]", "[1,2,1,1]"]),
    ({"contains": {"type": "string"}, "minItems": 3}, ['[1,"a",2]', '["a","b","c"]', "7", "{}"],
     ['[1,"a"]', "[1,2,3]"]),
    ({"contains": {"const": 1}, "minContains": 2, "maxContains": 1}, ["1", "{}"], ["[1,1]", "[1]", "[]"]),
    ({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "integer"},
      "contains": {"type": "string"}, "maxContains": 1}, ['["a",1,2,3]'], ['["a","b"]', "[1]"]),
    # unevaluatedProperties / unevaluatedItems through allOf and $ref
    ({"$defs": {"base": {"properties": {"a": {"type": "integer"}}, "required": ["a"]}},
      "type": "object", "allOf": [{"$ref": "#/$defs/base"}], "properties": {"b": {"type": "string"}},
      "unevaluatedProperties": False}, ['{"b":"x","a":1}', '{"a":1}'], ['{"a":1,"c":2}']),
    ({"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "anyOf": [
        {"properties": {"a": {"type": "integer"}}}, {"properties": {"a": {"type": "integer"}, "b": {}}}],
      "unevaluatedProperties": {"type": "boolean"}},
     ['{"a":1,"x-1":2}', '{"c":true}'], ['{"c":1}']),
    # not of a required name: non-objects satisfy required, so fail the not
    ({"type": ["object", "string"], "minLength": 1, "not": {"required": ["a"]}}, ['{"b":1}'], ['"x"', '{"a":1}']),
    ({"type": "array", "allOf": [{"prefixItems": [{"type": "integer"}, {"type": "integer"}]}],
      "unevaluatedItems": False}, ["[1,2]", "[1]"], ["[1,2,3]"]),
    # oneOf told apart by an enumerated discriminator (json-patch) or by required names the
    # other branch forbids (Snowplow sp_353)
    ({"type": "array", "items": {"oneOf": [
        {"additionalProperties": False, "required": ["op", "value"],
         "properties": {"op": {"enum": ["add", "test"]}, "value": {}}},
        {"additionalProperties": False, "required": ["op"], "properties": {"op": {"enum": ["remove"]}}}]}},
     ['[{"op":"add","value":1},{"op":"remove"}]'], ['[{"op":"remove","value":1}]']),
    # branches of object keywords alone leave every non-object to both: no non-object is valid
    ({"oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
     ['{"a":1}', '{"b":2}'], ['{"a":1,"b":2}', "{}", '"x"', "1", "null"]),
    ({"oneOf": [{"required": ["a"]}, {"type": "string"}]}, ['{"a":1}', "1", "[]", "null"], ['"x"', "{}"]),
    ({"type": "object", "additionalProperties": True, "oneOf": [
        {"additionalProperties": False, "required": ["pg"], "properties": {"pg": {"type": "integer"}}},
        {"required": ["my"], "properties": {"my": {"type": "string"}}}]},
     ['{"pg":1}', '{"my":"x"}', '{"my":"x","pg":1}'], ['{"pg":"x"}']),
]


@pytest.mark.parametrize("schema,valid,invalid", LOWERED, ids=lambda s: json.dumps(s)[:60])
def test_lowered_keywords_match_the_validator(byte_compiler, schema, valid, invalid):
    _check(byte_compiler.compile_json_schema(schema), schema, valid, invalid)


@pytest.mark.parametrize("schema,keyword,pointer", [
    ({"properties": {"a": {"$ref": "other.json#/x"}}}, "$ref", "/properties/a/$ref"),
    ({"$id": "https://e.com/s", "items": {"$ref": "#missing"}}, "$ref", "/items/$ref"),
    # without $schema an id could be either; here the two readings resolve differently
    ({"definitions": {"b": {"type": "string"}},
      "properties": {"p": {"id": "http://e.com/a.json", "definitions": {"b": {"type": "integer"}},
                           "items": {"$ref": "#/definitions/b"}}}}, "id", "/properties/p/id"),
    # overlapping branches whose difference is not expressible (a format's complement)
    ({"type": "string", "oneOf": [{"minLength": 2}, {"format": "date"}]}, "oneOf", "/oneOf"),
    ({"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
      "dependentSchemas": {"a": {"required": ["c"]}, "c": {"minProperties": 3}}},
     "dependentSchemas", "/dependentSchemas"),
    ({"$schema": "http://json-schema.org/draft-03/schema#"}, "$schema", "/$schema"),
])
def test_what_cannot_be_resolved_locally_is_a_clear_error(byte_compiler, schema, keyword, pointer):
    with pytest.raises(UnsupportedSchemaError) as err:
        byte_compiler.compile_json_schema(schema)
    assert (err.value.keyword, err.value.pointer) == (keyword, pointer), str(err.value)


def test_normalization_never_touches_the_input_and_keeps_values():
    schema = {"$schema": D4, "id": "http://e.com/r", "properties": {"dependencies": {"enum": [{"id": 1}]}},
              "dependencies": {"a": ["b"]}, "items": [{"$ref": "#/definitions/x"}],
              "definitions": {"x": {"exclusiveMinimum": True, "minimum": 0}}}
    before = json.dumps(schema)
    out = normalize_drafts(schema)
    assert json.dumps(schema) == before
    assert out["properties"]["dependencies"] == {"enum": [{"id": 1}]}
    assert out["dependentRequired"] == {"a": ["b"]} and out["prefixItems"] == [{"$ref": "#/definitions/x"}]
    assert out["definitions"]["x"] == {"exclusiveMinimum": 0} and "id" not in out


def test_a_ref_into_array_form_items_follows_the_rewrite(byte_compiler):
    schema = {"$schema": D4, "type": "array", "items": [{"type": "string", "maxLength": 1}],
              "additionalItems": {"$ref": "#/items/0"}}
    assert normalize_drafts(schema)["items"] == {"$ref": "#/prefixItems/0"}
    _check(byte_compiler.compile_json_schema(schema), schema, ['["a","b"]'], ['["a","bc"]'], walks=30)


def test_dependencies_must_be_an_object(byte_compiler):
    with pytest.raises(InvalidConstraintError, match="dependencies at /dependencies must"):
        byte_compiler.compile_json_schema({"$schema": D4, "dependencies": ["a"]})
    with pytest.raises(InvalidConstraintError, match="at /properties/a~1b/dependencies must"):
        byte_compiler.compile_json_schema({"$schema": D4, "properties": {"a/b": {"dependencies": 3}}})


@pytest.mark.skipif(not BENCH.is_dir(), reason=f"{BENCH} not present")
@pytest.mark.parametrize("name", ["JsonSchemaStore/json-patch.json", "Snowplow/sp_210_Normalized.json",
                                  "Snowplow/sp_353_Normalized.json", "Github-Hard/o9361.json"])
def test_real_schemas_refused_before_now_generate_valid_values(byte_compiler, name):
    schema = json.loads((BENCH / name).read_text())
    grammar = byte_compiler.compile_json_schema(schema)
    validator = _validator(schema)
    outs = _random_outputs(grammar, seed=7, n=30, max_len=1500)
    assert outs
    for text in outs:
        assert validator.is_valid(json.loads(text)), text


def _subschemas_by_lookup(node: dict):
    """The reference: every subschema keyword looked up in turn (ONE, MANY, MAP order)."""
    from constraints.json_drafts import MANY, MAP, ONE

    for key in ONE:
        if isinstance(node.get(key), (dict, bool)):
            yield key, None, node[key]
    for key in MANY:
        if isinstance(node.get(key), list):
            yield from ((key, i, sub) for i, sub in enumerate(node[key]))
    for key in MAP:
        if isinstance(node.get(key), dict):
            yield from ((key, k, sub) for k, sub in node[key].items() if isinstance(sub, (dict, bool)))


@pytest.mark.skipif(not BENCH.exists(), reason="jsonschemabench-dev not present")
def test_subschema_positions_come_in_keyword_order():
    """subschemas() finds positions from a node's own keys, then orders them as the keyword
    tuples do: the same positions, same order, same objects as looking every keyword up, at
    every dict of the dev sample (and with the keys of a node reversed)."""
    from constraints.json_drafts import subschemas

    seen = 0

    def walk(x):
        nonlocal seen
        if isinstance(x, dict):
            for node in (x, dict(reversed(list(x.items())))):
                got = [(k, i, id(v)) for k, i, v in subschemas(node)]
                assert got == [(k, i, id(v)) for k, i, v in _subschemas_by_lookup(node)]
                seen += len(got) > 1
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for path in sorted(BENCH.rglob("*.json")):
        walk(json.loads(path.read_text()))
    assert seen > 1000
