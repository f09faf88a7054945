"""JSON Schema compiler: realistic schemas on the real tokenizer, errors, options."""

from __future__ import annotations

import json

import jsonschema
import pytest
from schema_suite_runner import accepted_by_tokens

from constraints import InvalidConstraintError, UnsupportedSchemaError
from tests.json_validation import validate_with_formats

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "role": {"enum": ["admin", "user"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "address": {"$ref": "#/$defs/address"},
        "score": {"type": ["number", "null"], "exclusiveMinimum": 0},
    },
    "required": ["name", "age", "role"],
    "$defs": {"address": {"type": "object", "properties": {
        "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
        "required": ["city"], "additionalProperties": False}},
}


def _text(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


VALID = [
    {"name": "Zoë", "age": 31, "role": "admin"},
    {"name": "Al", "age": 0, "email": "al@example.com", "role": "user", "tags": ["x", "日本"],
     "address": {"city": "Paris", "zip": "75001"}, "score": 0.5},
    {"name": "B", "age": 150, "role": "user", "score": None},
]
INVALID = [
    {"name": "", "age": 31, "role": "admin"},
    {"name": "A", "age": 151, "role": "admin"},
    {"name": "A", "age": -1, "role": "admin"},
    {"name": "A", "age": 1, "role": "root"},
    {"name": "A", "age": 1},
    {"name": "A", "age": 1, "role": "user", "tags": []},
    {"name": "A", "age": 1, "role": "user", "address": {"city": "X", "zip": "1234"}},
    {"name": "A", "age": 1, "role": "user", "score": 0},
    {"name": "A", "age": 1, "role": "user", "email": "not-an-email"},
]


@pytest.mark.parametrize("value", VALID)
def test_valid_instances_pass_every_mask(compiler, hf_tokenizer, value):
    validate_with_formats(value, PERSON)
    assert accepted_by_tokens(compiler.compile_json_schema(PERSON), hf_tokenizer, _text(value))


@pytest.mark.parametrize("value", INVALID)
def test_invalid_instances_are_rejected(compiler, value):
    with pytest.raises(jsonschema.ValidationError):
        validate_with_formats(value, PERSON)
    m = compiler.compile_json_schema(PERSON).matcher()
    assert not (m.accept_string(_text(value)) and m.can_terminate())


def test_json_object_mode_and_flexible_whitespace(compiler, hf_tokenizer):
    g = compiler.compile_json_schema({"type": "object"})
    assert accepted_by_tokens(g, hf_tokenizer, '{"a":[1,{"b":null}],"c":"d"}')
    assert not g.matcher().accept_string("[1]")
    flex = compiler.compile_json_schema(PERSON, whitespace="flexible")
    pretty = json.dumps(VALID[1], indent=2, ensure_ascii=False)
    assert accepted_by_tokens(flex, hf_tokenizer, pretty)


def test_compact_output_forces_jump_forward_keys(compiler):
    m = compiler.compile_json_schema(PERSON).matcher()
    assert m.find_jump_forward_string() == '{"name":"'


@pytest.mark.parametrize("schema,keyword,pointer", [
    ({"type": "object", "properties": {"a": {"not": {"multipleOf": 3}}}}, "not", "/properties/a/not"),
    ({"type": "array", "items": {"$dynamicRef": "#node"}}, "$dynamicRef", "/items/$dynamicRef"),
    ({"oneOf": [{"type": "string", "maxLength": 3}, {"type": "string", "format": "date"}]}, "oneOf", "/oneOf"),
])
def test_unsupported_keywords_name_keyword_and_pointer(compiler, schema, keyword, pointer):
    with pytest.raises(UnsupportedSchemaError) as err:
        compiler.compile_json_schema(schema)
    assert err.value.keyword == keyword and err.value.pointer == pointer
    assert keyword in str(err.value) and pointer in str(err.value)


@pytest.mark.parametrize("schema", [
    # an object that must be a string or a number (a Kubernetes Quantity schema, type left over)
    {"type": "object", "additionalProperties": False, "oneOf": [{"type": "string"}, {"type": "number"}]},
    {"type": "integer", "minimum": 5, "maximum": 3},
    {"enum": ["a", "b"], "not": {"type": "string"}},
])
def test_a_schema_no_value_satisfies_admits_nothing(compiler, schema):
    """Exact as a language (nothing), and flagged, so the engine refuses it at admission (a
    400) rather than run a request whose first mask is empty."""
    assert compiler.compile_json_schema(schema).admits_nothing
    assert not compiler.compile_json_schema({"type": "integer", "minimum": 3, "maximum": 5}).admits_nothing


def test_an_empty_integer_range_is_no_value(compiler):
    """minimum above maximum leaves no integer: the member is absent from every output (its
    leaf once took a non-ASCII character and a NUL as its value)."""
    grammar = compiler.compile_json_schema(
        {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 3}}})
    m = grammar.matcher()
    assert not (m.accept_string('{"a":\u00e9\u0000}') and m.can_terminate())
    m = grammar.matcher()
    assert m.accept_string("{}") and m.can_terminate()


def test_lenient_ignores_unsupported_keywords(compiler):
    schema = {"type": "array", "items": {"type": "integer"}, "not": {"uniqueItems": True}}
    with pytest.raises(UnsupportedSchemaError):
        compiler.compile_json_schema(schema)
    m = compiler.compile_json_schema(schema, lenient=True).matcher()
    assert m.accept_string("[1]") and m.can_terminate()


def test_disjoint_one_of_is_enforced(compiler):
    schema = {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
         "required": ["kind"]},
        {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]}]}
    g = compiler.compile_json_schema(schema)
    assert g.matcher().accept_string('{"kind":"a","x":1}')
    assert not g.matcher().accept_string('{"kind":"b","x"')


def test_string_schema_and_invalid_json_text(compiler):
    g = compiler.compile_json_schema('{"type": "string", "format": "date"}')
    assert g.matcher().accept_string('"2024-02-29"')
    assert not g.matcher().accept_string('"2023-02-29"')
    with pytest.raises(InvalidConstraintError):
        compiler.compile_json_schema("{not json")


def test_compiled_grammars_are_cached(compiler):
    assert compiler.compile_json_schema(PERSON) is compiler.compile_json_schema(PERSON)
    assert compiler.compile_regex("a+") is compiler.compile_regex("a+")


def test_rule_count_is_capped_with_a_clear_error(compiler):
    """Each nested object is a rule: a schema needing thousands is refused by count, before
    any of them is built (each rule's own NFA is too small for a state cap to trip)."""
    from constraints import GrammarTooComplexError

    many = {f"p{i}": {"type": "object", "required": [f"x{i}"]} for i in range(4200)}  # all distinct
    with pytest.raises(GrammarTooComplexError, match="4096 grammar rules"):
        compiler.compile_json_schema({"type": "object", "properties": many})


def test_an_enum_whose_trie_passes_the_state_cap_is_a_leaf(compiler, hf_tokenizer):
    """CRYENGINE's 2,457 console variable names make a 31,119-state trie, more than the
    structure's 20,000-state rule cap: a long enum is a minimized leaf of its own, exact."""
    import random

    rng = random.Random(3)
    names = sorted({"".join(rng.choices("abcdefghijklmnop_", k=rng.randint(12, 24))) for _ in range(2500)})
    schema = {"type": "object", "properties": {"cvar": {"enum": names}, "n": {"type": "integer"}},
              "required": ["cvar"]}
    grammar = compiler.compile_json_schema(schema)
    for name in rng.sample(names, 20):
        assert accepted_by_tokens(grammar, hf_tokenizer, _text({"cvar": name, "n": 1}))
    for name in [n[:-1] for n in names[:10]] + [n + "a" for n in names[:10]]:
        m = grammar.matcher()
        assert not (m.accept_string(_text({"cvar": name})) and m.can_terminate()), name


def test_an_enum_of_thousands_of_short_names_compiles_exactly(compiler, hf_tokenizer):
    """GitHub's issue forms list 1,772 languages in one enum (over the old 1,024 limit): an
    enum of 2,000 short names compiles, every name passes the masks, and a name one letter
    off or cut short does not."""
    import random

    rng = random.Random(7)
    names = sorted({"".join(rng.choices("abcdefghijklmnopqrstuvwxyz+#-", k=rng.randint(1, 9)))
                    for _ in range(2400)})[:2000]
    schema = {"type": "object", "properties": {"render": {"enum": names}}, "required": ["render"]}
    grammar = compiler.compile_json_schema(schema)
    for name in rng.sample(names, 40):
        assert accepted_by_tokens(grammar, hf_tokenizer, _text({"render": name}))
    members = set(names)
    outside = [n[:-1] for n in names if len(n) > 1 and n[:-1] not in members][:20]
    outside += [n + "q" for n in names if n + "q" not in members][:20]
    for name in outside:
        m = grammar.matcher()
        assert not (m.accept_string(_text({"render": name})) and m.can_terminate()), name
