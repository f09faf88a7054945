"""uniqueItems over strings and numbers: the matcher's duplicate check (unique_items.py)."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from schema_suite_runner import accepted_by_masks, byte_vocab_info

from constraints import GrammarCompiler, UnsupportedSchemaError, allocate_token_bitmask
from constraints.bitmask import unpack_bitmask
from tests.json_validation import validate_with_formats

STRINGS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
INTEGERS = {"type": "array", "items": {"type": "integer", "minimum": -5}, "uniqueItems": True}
NUMBERS = {"type": "array", "items": {"type": "number"}, "uniqueItems": True}
OBJECTS = {"type": "array", "uniqueItems": True, "items": {  # open objects: any further member
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": [1, 2]}}, "required": ["b"]}}
MIXED = {"type": "array", "uniqueItems": True, "items": {"type": ["string", "array", "object"]}}
IN_OBJECTS = {"type": "array", "uniqueItems": True, "items": {  # unique arrays inside unique items
    "type": "object", "properties": {"tags": STRINGS}}}
PATTERNED = {"type": "array", "uniqueItems": True, "items": {"type": "string", "pattern": "^a+$"}}
# closed objects of open members (CloudFormation's Tags): the rest of an item may be forced
TAGS = {"type": "array", "uniqueItems": True, "items": {
    "type": "object", "additionalProperties": False, "required": ["Key", "Value"],
    "properties": {"Key": {"type": "string"}, "Value": {"type": "string"}, "Note": {"type": "string"}}}}
# a path without commas, nor a space at either end (SchemaStore's buildkite checkout paths)
TRIMMED = {"type": "array", "uniqueItems": True,
           "items": {"type": "string", "pattern": "^[^,]+$", "not": {"pattern": "^ | $"}}}
# integers less a few values (winget's non-zero installer exit codes)
NON_ZERO = {"type": "array", "uniqueItems": True, "maxItems": 16, "items": {"type": "integer", "not": {"enum": [0, 7]}}}
NESTED = {"type": "object", "properties": {
    "tags": {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True},
    "rows": {"type": "array", "items": STRINGS}}, "required": ["tags", "rows"]}


@pytest.fixture(scope="module")
def byte_compiler() -> GrammarCompiler:
    return GrammarCompiler(byte_vocab_info(), cache_size=0)


CASES = [
    (STRINGS, '["a","b","c"]', True),
    (STRINGS, '["a","b","a"]', False),
    (STRINGS, '["a","\\u0061"]', False),  # one value, two spellings
    (STRINGS, '["a","a\\""]', True),
    (STRINGS, '["ab","a","abc",""]', True),
    (STRINGS, '["",""]', False),
    (STRINGS, '[]', True),
    (INTEGERS, '[1,2,10,-1,0]', True),
    (INTEGERS, '[1,2,1]', False),
    (INTEGERS, '[0,-0]', False),
    (INTEGERS, '[10,1]', True),
    (NUMBERS, '[1.5,15e-1]', False),
    (NUMBERS, '[1,1.0]', False),
    (NUMBERS, '[1,1.05,10,0.1]', True),
    (NUMBERS, '[0,0e1000001]', False),  # a huge exponent of zero is still zero
    (NUMBERS, '[0,0.0e5]', False),
    (NUMBERS, '[0,0.01e5]', True),
    (NESTED, '{"tags":["x","y"],"rows":[["a","b"],["a","b"]]}', True),  # rows may repeat
    (NESTED, '{"tags":["x","x"],"rows":[]}', False),
    (NESTED, '{"tags":["x"],"rows":[["a","a"]]}', False),
    (OBJECTS, '[{"b":1},{"b":2},{"a":1,"b":1}]', True),
    (OBJECTS, '[{"b":1},{"b":1}]', False),
    (OBJECTS, '[{"a":1,"b":1},{"b":1,"a":1.0}]', False),  # members unordered, 1 == 1.0
    (OBJECTS, '[{"b":1,"x":[1,{"y":"}"}]},{"b":1,"x":[1,{"y":"}"}]}]', False),
    (OBJECTS, '[{"b":1,"x":[1,{"y":"}"}]},{"b":1,"x":[{"y":"}"},1]}]', True),  # arrays ordered
    (OBJECTS, '[{"b":1,"x":true},{"b":1,"x":1}]', True),  # true is not 1
    (MIXED, '["a",["a"],{"a":"a"},[],{}]', True),
    (MIXED, '["a",["a"],["a"]]', False),
    (MIXED, '[{},[],{}]', False),
    (MIXED, '[["\\u0061"],["a"]]', False),
    (IN_OBJECTS, '[{"tags":["a","b"]},{"tags":["b","a"]}]', True),
    (IN_OBJECTS, '[{"tags":["a","b"]},{"tags":["a","b"]}]', False),
    (IN_OBJECTS, '[{"tags":["a","a"]}]', False),
    (PATTERNED, '["a","aa","aaa"]', True),  # every prefix goes on: "a", "aa", ...
    (PATTERNED, '["aa","a","aa"]', False),
    (TAGS, '[{"Key":"a","Value":"b"},{"Key":"a","Value":"c"},{"Key":"a","Value":"b","Note":""}]', True),
    (TAGS, '[{"Key":"a","Value":"b"},{"Key":"a","Value":"b"}]', False),
    (TAGS, '[{"Key":"a","Value":"b","Note":"n"},{"Key":"a","Value":"b","Note":"n"}]', False),
    (TRIMMED, '["a","a b","b"]', True),
    (TRIMMED, '["a b","a b"]', False),
    (TRIMMED, '[" a"]', False),
    (TRIMMED, '["a,b"]', False),
    (NON_ZERO, '[1,-1,10,70,-7000]', True),
    (NON_ZERO, '[3,-1,3]', False),
    (NON_ZERO, '[1,0]', False),  # a value the `not` removed
    (NON_ZERO, '[7]', False),
    (NON_ZERO, '[-0]', False),
]


@pytest.mark.parametrize("schema,text,valid", CASES, ids=[c[1] for c in CASES])
def test_duplicates_are_refused_by_mask_and_matcher(byte_compiler, schema, text, valid):
    """Masks and accept_token agree at every byte (accepted_by_masks checks), and the
    language is the validator's: a duplicate item, however spelled, is refused."""
    import jsonschema

    assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(text)) == valid
    grammar = byte_compiler.compile_json_schema(schema)
    assert accepted_by_masks(grammar, text.encode()) == valid


def test_prefixes_that_can_only_be_zero_are_refused_as_soon_as_written(byte_compiler):
    """An integer item "0", or a number "0.0e", can only become 0: once 0 is an item, such a
    prefix is a dead end, so the mask refuses the byte that makes it."""
    grammar = byte_compiler.compile_json_schema(INTEGERS)
    m = grammar.matcher()
    assert m.accept_string("[0,")
    assert not m.accept_string("0")
    assert not m.accept_string("-0")
    assert m.accept_string("-1")
    numbers = byte_compiler.compile_json_schema(NUMBERS).matcher()
    assert numbers.accept_string("[0,0.0")  # 0.01 may follow
    assert not numbers.accept_string("e")  # 0.0e... is 0 whatever follows


def test_a_closed_item_is_refused_where_only_its_forced_rest_is_left(byte_compiler):
    """After the last member of a closed object only "}" may follow: the byte that leaves
    nothing but a duplicate (the closing quote) is refused, not the forced "}" after it,
    which would be a dead end; a longer value still goes on."""
    m = byte_compiler.compile_json_schema({**TAGS, "items": {**TAGS["items"], "properties": {
        "Key": {"type": "string"}, "Value": {"type": "string"}}}}).matcher()
    assert m.accept_string('[{"Key":"a","Value":"b"},{"Key":"a","Value":"b')
    assert not m.accept_string('"')
    assert m.accept_string('b"}]') and m.can_terminate()


# closed objects of bounded strings (CloudFormation's Tags with maxLength and patterns): a
# prefix may have a few completions, all written before; Note keeps new items from running out
BOUNDED_TAGS = {"type": "array", "uniqueItems": True, "items": {
    "type": "object", "additionalProperties": False, "required": ["Key", "Value"], "properties": {
        "Note": {"type": "string", "maxLength": 2},
        "Key": {"type": "string", "pattern": "^[ab]$"}, "Value": {"enum": ["x", "y"]}}}}


def test_a_bounded_item_is_refused_where_every_completion_was_written(byte_compiler):
    """With {a,x} and {a,y} written, a third item's Key "a" can only repeat one: the byte "a"
    is refused, "b" goes on; Note is optional and first, so after it anything goes."""
    m = byte_compiler.compile_json_schema(BOUNDED_TAGS).matcher()
    assert m.accept_string('[{"Key":"a","Value":"x"},{"Key":"a","Value":"y"},{"Key":"')
    assert not m.accept_string("a")
    assert m.accept_string('b","Value":"x"},{"Note":"n","Key":"a","Value":"x"}')
    assert not m.accept_string(',{"Note":"n","Key":"a","Value":"x"}')  # written just before
    assert m.accept_string(',{"Note":"","Key":"a","Value":"x"}]') and m.can_terminate()


def test_a_bounded_item_is_refused_where_its_last_string_is_full(byte_compiler):
    """Value of at most one character: with {"Key":"k","Value":"v"} written, "v" after the same
    Key leaves only the duplicate's closing; a Key of two characters may still differ."""
    schema = {"type": "array", "uniqueItems": True, "items": {
        "type": "object", "additionalProperties": False, "required": ["Key", "Value"],
        "properties": {"Key": {"type": "string", "maxLength": 2}, "Value": {"type": "string", "maxLength": 1}}}}
    m = byte_compiler.compile_json_schema(schema).matcher()
    assert m.accept_string('[{"Key":"k","Value":"v"},{"Key":"k","Value":"')
    assert not m.accept_string("v")
    assert m.accept_string('w"}')
    assert m.accept_string(',{"Key":"k')  # "kk" may follow, so "k" is no dead end
    assert m.accept_string('","Value":""}]') and m.can_terminate()


@pytest.mark.parametrize("items", [{"type": "string", "maxLength": 1},
                                   {"type": "string", "not": {"pattern": "^a."}},
                                   {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"}],
                         ids=["maxLength", "not-pattern", "pattern"])
def test_a_bounded_string_item_is_refused_where_it_can_only_repeat(byte_compiler, items):
    """Once "a" is an item, the prefix "a" of a string that can only end there is refused at
    the byte that writes it; "b" and longer strings go on."""
    m = byte_compiler.compile_json_schema({"type": "array", "items": items, "uniqueItems": True}).matcher()
    assert m.accept_string('["a","')
    assert not m.accept_string("a") if "not" in items or items.get("maxLength") == 1 else m.accept_string("a")
    assert m.accept_string('b"]') and m.can_terminate()


def test_a_token_that_ends_a_string_and_a_repeated_item_is_masked(compiler, hf_tokenizer):
    """A real tokenizer's '"},' closes the last member, the item and goes on to the next one:
    where that item repeats an earlier one the mask leaves it out, elsewhere it stays."""
    schema = {"type": "array", "uniqueItems": True, "items": {
        "type": "object", "additionalProperties": False, "required": ["Key", "Value"],
        "properties": {"Key": {"type": "string", "maxLength": 8}, "Value": {"type": "string", "maxLength": 8}}}}
    grammar = compiler.compile_json_schema(schema)
    close = [hf_tokenizer.encode(t, add_special_tokens=False) for t in ('"}', '"},')]
    assert all(len(ids) == 1 for ids in close)
    bm = allocate_token_bitmask(1, grammar.vocab_size)
    for prefix, allowed in (('[{"Key":"a","Value":"b"},{"Key":"a","Value":"b', False),
                            ('[{"Key":"a","Value":"b"},{"Key":"a","Value":"c', True)):
        m = grammar.matcher()
        assert m.accept_string(prefix)
        m.fill_next_token_bitmask(bm, 0)
        row = unpack_bitmask(bm[0], grammar.vocab_size)
        assert [bool(row[ids[0]]) for ids in close] == [allowed, allowed], prefix


def test_strings_beside_closed_objects_of_strings_are_compared_as_texts(byte_compiler):
    """Travis's imports: an object {source, mode} or a plain string, items unique; a string is
    spelled one way too, so the two kinds share the texts check."""
    items = {"anyOf": [{"type": "object", "additionalProperties": False, "required": ["source"], "properties": {
        "source": {"type": "string", "minLength": 1}, "mode": {"enum": ["merge", "keep"]}}},
        {"type": "string", "minLength": 1}]}
    m = byte_compiler.compile_json_schema({"type": "array", "uniqueItems": True, "items": items}).matcher()
    assert m.accept_string('["a",{"source":"s","mode":"keep"},{"source":"s","mode":"')
    assert not m.accept_string('keep"}')
    assert m.accept_string('merge"},')
    assert not m.accept_string('"a"')
    assert m.accept_string('"ab"]') and m.can_terminate()


def test_bounded_items_need_a_member_that_never_runs_out(byte_compiler):
    """Members with patterns count when a million of their strings fit (AWS's tag keys); with
    every member small, new items could run out before the array may end: refused."""
    tag = {"type": "string", "minLength": 1, "maxLength": 256, "pattern": "^[a-zA-Z0-9\\s+=._:/-]+$"}
    items = {"type": "object", "additionalProperties": False, "required": ["Key", "Value"],
             "properties": {"Key": tag, "Value": tag}}
    m = byte_compiler.compile_json_schema({"type": "array", "uniqueItems": True, "items": items}).matcher()
    assert m.accept_string('[{"Key":"a","Value":"b"},{"Key":"a","Value":"b')
    assert not m.accept_string('"')
    assert m.accept_string('c"}]')
    small = {**items, "properties": {"Key": {"type": "string", "pattern": "^[a-z]{1,3}$"},
                                     "Value": {"enum": ["x", "y"]}}}
    with pytest.raises(UnsupportedSchemaError) as e:
        byte_compiler.compile_json_schema({"type": "array", "uniqueItems": True, "items": small})
    assert e.value.keyword == "uniqueItems"


def test_rollback_forgets_items(byte_compiler):
    grammar = byte_compiler.compile_json_schema(STRINGS)
    m = grammar.matcher()
    for step in ("[", '"a"', ","):
        assert m.accept_string(step)
    assert not m.accept_string('"a"')
    m.rollback(2)  # back to "[": "a" was never written
    for step in ('"b"', ",", '"a"', "]"):
        assert m.accept_string(step)


def test_items_the_check_cannot_keep_exact_are_refused(byte_compiler):
    """Items that could run out before minItems, closed objects of few values, bounded
    numbers, and a closed object whose last member is bounded (its member after the open one
    can leave a prefix with two completions, both written): a clear refusal naming the
    keyword."""
    last_bounded = {"type": "object", "additionalProperties": False, "required": ["k"], "properties": {
        "k": {"type": "string"}, "v": {"type": "object", "properties": {"b": {"const": 1}}}}}
    for items, min_items in (({"type": "string", "pattern": "^[ab]$"}, 3),  # two strings, three items
                             ({"type": "string", "pattern": "^a+b$"}, 64),  # 63 counted within 64 bytes
                             ({"type": "object", "additionalProperties": False,
                               "properties": {"on": {"type": "boolean"}}}, 0),
                             ({"type": "integer", "maximum": 3}, 0), (last_bounded, 0)):
        with pytest.raises(UnsupportedSchemaError) as e:
            byte_compiler.compile_json_schema({"type": "array", "items": items, "uniqueItems": True,
                                               "minItems": min_items})
        assert e.value.keyword == "uniqueItems"


def test_few_strings_are_compared_as_texts_and_a_comma_needs_a_new_one(byte_compiler):
    """Strings of a small language (CFF's two- or three-letter language codes), as many as
    minItems asks or more: compared as texts. Once every string is written, the comma that
    would need another is refused, and the array can only end."""
    m = byte_compiler.compile_json_schema({"type": "array", "uniqueItems": True, "minItems": 2,
                                           "items": {"type": "string", "pattern": "^[ab]$"}}).matcher()
    assert m.accept_string('["a",')
    assert not m.accept_string('"a"')
    assert m.accept_string('"b"')
    assert not m.accept_string(",")  # no third string exists: a dead end
    assert m.accept_string("]") and m.can_terminate()


ANY_VALUES = {"type": "array", "uniqueItems": True}  # items of any kind, literals included


@pytest.mark.parametrize("schema,text,valid", [
    (ANY_VALUES, '[true,false,null,0,"x",[],{},[true]]', True),
    (ANY_VALUES, '[true,1,true]', False),
    (ANY_VALUES, '[null,{"a":null},null]', False),
    (ANY_VALUES, '[[false],[false]]', False),
    ({"uniqueItems": True}, '"not an array"', True),
    ({"uniqueItems": True}, '[false,false]', False),
])
def test_any_values_literals_included(byte_compiler, schema, text, valid):
    import jsonschema

    assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(text)) == valid
    assert accepted_by_masks(byte_compiler.compile_json_schema(schema), text.encode()) == valid


def test_a_literal_is_refused_at_its_first_letter_once_written(byte_compiler):
    """After "t" only "rue" can follow: once true is an item, the "t" that leaves nothing but
    a duplicate is the byte refused (its forced rest is looked through), not a later one."""
    m = byte_compiler.compile_json_schema(ANY_VALUES).matcher()
    assert m.accept_string("[true,null,")
    assert not m.accept_string("t") and not m.accept_string("n")
    assert m.accept_string("f")
    assert m.accept_string("alse]") and m.can_terminate()


def test_two_arrays_with_the_same_texts_are_checked_apart(byte_compiler):
    """The check's cache tells arrays apart: after ["a" in x a new item exists ("b"); after
    ["a" in y, whose items are only "a", none does, so y's comma is refused."""
    schema = {"type": "object", "additionalProperties": False, "required": ["x", "y"], "properties": {
        "x": {"type": "array", "uniqueItems": True, "items": {"type": "string", "pattern": "^[ab]$"}},
        "y": {"type": "array", "uniqueItems": True, "items": {"type": "string", "pattern": "^a$"}}}}
    m = byte_compiler.compile_json_schema(schema).matcher()
    assert m.accept_string('{"x":["a"') and m.accept_string(",")  # x: "b" is left
    assert m.accept_string('"b"],"y":["a"')
    assert not m.accept_string(",")
    assert m.accept_string("]}") and m.can_terminate()


def test_a_long_enum_of_strings_is_compared_as_texts(byte_compiler):
    """An enum of more strings than the sorted-subset grammar takes (CFF's 459 SPDX licenses):
    a duplicate is refused, and a comma once every value is written."""
    names = [f"L{i}" for i in range(100)]
    schema = {"type": "array", "uniqueItems": True, "items": {"enum": names}}
    m = byte_compiler.compile_json_schema(schema).matcher()
    assert m.accept_string('["L7","L70",')
    assert not m._unique._fresh  # fewer items than values: no search at the commas
    assert not m.accept_string('"L7"')
    assert m.accept_string('"L71"]') and m.can_terminate()
    m = byte_compiler.compile_json_schema(schema).matcher()
    assert m.accept_string("[" + ",".join(f'"{n}"' for n in names[:-1]) + ",")
    assert not m.accept_string('"L1"') and not m.accept_string('"L98"')
    assert m.accept_string('"L99"')
    assert not m.accept_string(",")
    assert m.accept_string("]") and m.can_terminate()
    with pytest.raises(UnsupportedSchemaError):  # 100 values cannot make 101 items
        byte_compiler.compile_json_schema({**schema, "minItems": 101})


# objects whose last member is open (SARIF's, with a property bag last), and objects open to
# names of a pattern (Compose's x- extensions)
LAST_OPEN = {"type": "array", "uniqueItems": True, "items": {
    "type": "object", "additionalProperties": False, "required": ["uri"], "properties": {
        "uri": {"type": "string", "format": "uri"}, "kind": {"enum": ["a", "b"]},
        "bag": {"type": "object", "additionalProperties": True}}}}
EXTENSIONS = {"type": "array", "uniqueItems": True, "items": {
    "type": "object", "additionalProperties": False, "patternProperties": {"^x-": {}},
    "required": ["type"], "properties": {"type": {"enum": ["bind", "volume"]}}}}


@pytest.mark.parametrize("schema,text,valid", [
    (LAST_OPEN, '[{"uri":"a:b","kind":"a"},{"uri":"a:b"},{"uri":"a:b","bag":{}}]', True),
    (LAST_OPEN, '[{"uri":"a:b","kind":"a"},{"uri":"a:b","kind":"a"}]', False),
    (LAST_OPEN, '[{"uri":"a:b","bag":{"x":1}},{"uri":"a:b","bag":{"x":1.0}}]', False),
    (EXTENSIONS, '[{"type":"bind"},{"type":"bind","x-a":1},{"type":"volume"}]', True),
    (EXTENSIONS, '[{"type":"bind","x-a":1},{"type":"bind","x-a":1}]', False),
])
def test_objects_that_go_on_are_checked_by_value(byte_compiler, schema, text, valid):
    import jsonschema

    assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(text)) == valid
    assert accepted_by_masks(byte_compiler.compile_json_schema(schema), text.encode()) == valid


PREFIXED = {"type": "array", "uniqueItems": True, "items": {"type": ["object", "string"]}, "prefixItems": [
    {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}]}


@pytest.mark.parametrize("text,valid", [
    ('[{"a":[1,1]},{"a":[1,1],"b":1},"x"]', True),  # arrays inside items may repeat their items
    ('[{"a":[1]},{"a":[1]}]', False),  # the prefix's item is compared with the rest
    ('[{"a":[1]},"x","x"]', False),
    ('["x"]', False),  # the first item is the prefix's: an object
])
def test_prefix_items_are_compared_with_the_rest(byte_compiler, text, valid):
    """prefixItems of open values (Travis's webhooks: a first URL, then any more): every item,
    the prefix's too, is compared with every other, and what lies inside an item is not."""
    import jsonschema

    assert jsonschema.Draft202012Validator(PREFIXED).is_valid(json.loads(text)) == valid
    assert accepted_by_masks(byte_compiler.compile_json_schema(PREFIXED), text.encode()) == valid


def test_an_object_whose_last_member_is_written_has_only_its_forced_rest(byte_compiler):
    """Past the open last member only "}" may follow: the byte that would leave nothing but a
    duplicate is refused, while a prefix before the last member still goes on."""
    m = byte_compiler.compile_json_schema(LAST_OPEN).matcher()
    assert m.accept_string('[{"uri":"a:b","kind":"a","bag":{}},{"uri":"a:b","kind":"a","bag":{')
    assert not m.accept_string("}")  # {"uri":"a:b","kind":"a","bag":{}} again
    assert m.accept_string('"y":2}}')
    m = byte_compiler.compile_json_schema(LAST_OPEN).matcher()
    assert m.accept_string('[{"uri":"a:b","kind":"a"},{"uri":"a:b","kind":"a"')
    assert not m.accept_string("}")
    assert m.accept_string(',"bag":{}}]') and m.can_terminate()


# Tokens the walker prefers: short items that repeat often, so duplicates are tried.
_FAVOURITES = {"string": ['"', "a", '",', '"]', ",", "]"], "number": ["1", "0", ",", "]", "."],
               "object": ["{", '{"', "}", "},", "}]", "b", '":', "1", ",", "]", "[", "[]", "{}"],
               "tags": ['{"', "Key", '":"', "a", '","', "Value", '"', '"}', '"},', '"}]', ","],
               "bounded": ['{"', "Key", '":"', "a", "b", '","', "Value", "x", "y", '"}', '"},', '"}]', ","],
               "literals": ["true", "false", "null", ",", "]", "t", "n", "f", "1", "[]"]}


def _walk(grammar, hf_tokenizer, favourites: list[int], rng, max_tokens: int = 60) -> bytes | None:
    info = grammar.automaton.info
    bm = allocate_token_bitmask(1, grammar.vocab_size)
    m = grammar.matcher()
    out = []
    for left in range(max_tokens, 0, -1):
        if m.is_terminated():
            break
        m.fill_next_token_bitmask(bm, 0, max_tokens=left)
        allowed = np.nonzero(unpack_bitmask(bm[0], grammar.vocab_size))[0]
        assert len(allowed), f"no token allowed after {b''.join(out)!r}"
        liked = [t for t in favourites if t in set(allowed.tolist())]
        tok = int(rng.choice(liked if liked and rng.random() < 0.9 else allowed))
        assert m.accept_token(tok)
        if tok in info.eos_token_ids:
            break
        out.append(info.token_bytes[tok])
    return b"".join(out) if m.is_terminated() else None


@pytest.mark.parametrize("schema,kind", [(STRINGS, "string"), (NESTED, "string"), (INTEGERS, "number"),
                                         (NUMBERS, "number"), (OBJECTS, "object"), (MIXED, "object"),
                                         (TAGS, "tags"), (BOUNDED_TAGS, "bounded"),
                                         ({**STRINGS, "items": {"type": "string", "maxLength": 2}}, "string"),
                                         ({**STRINGS, "items": {"type": "string", "pattern": "^[ab]$"}}, "string"),
                                         ({"type": "array", "uniqueItems": True}, "literals")],
                         ids=["strings", "nested", "integers", "numbers", "objects", "mixed", "tags",
                              "bounded", "short-strings", "two-strings", "any-values"])
def test_walks_through_the_masks_never_repeat_an_item(compiler, hf_tokenizer, schema, kind):
    """Random walks that keep trying the same short items (a real tokenizer, budget-aware
    closing on) end in valid instances only, and did try duplicates: without the check
    they would have written some."""
    grammar = compiler.compile_json_schema(schema)
    favourites = [hf_tokenizer.encode(t, add_special_tokens=False)[0] for t in _FAVOURITES[kind]]
    rng = np.random.default_rng(7)
    items = 0
    for _ in range(12):
        text = _walk(grammar, hf_tokenizer, favourites, rng)
        assert text is not None, "walk did not finish within its budget"
        value = json.loads(text)
        validate_with_formats(value, schema)
        items += len(value) if isinstance(value, list) else len(value["tags"])
    assert items >= 12  # the walks wrote items, so duplicates were on offer


def _bounded_items(rng) -> dict:
    """A random closed object of small string members, one of them plain (never runs out)."""
    pool = [{"type": "string", "maxLength": 1}, {"type": "string", "pattern": "^[ab]{0,2}$"},
            {"enum": ["a", "b"]}, {"type": "string", "maxLength": 2, "minLength": 1},
            {"type": "boolean"}, {"enum": ["x", None, True]}]
    names = ["k", "v", "w"][:int(rng.integers(1, 4))]
    props = {n: pool[int(rng.integers(len(pool)))] for n in names}
    props[names[int(rng.integers(len(names)))]] = {"type": "string", "maxLength": int(rng.integers(1, 3))}
    required = [n for n in names if rng.random() < 0.6]
    return {"type": "object", "additionalProperties": False, "properties": props, "required": required}


def _nested_items(rng) -> dict:
    """As _bounded_items, with members that are closed objects, arrays (unique or not) or a
    oneOf of a string and an object, a level or two deep: values compared as texts
    (json_compound.canonical)."""
    small = [{"type": "string", "maxLength": 1}, {"enum": ["a", "b"]}, {"type": "boolean"},
             {"enum": ["x", None, True]}]

    def member(depth: int = 0) -> dict:
        r = rng.random()
        if depth < 2 and r < 0.2:
            return {"type": "object", "additionalProperties": False,
                    "properties": {"s": member(depth + 1), "t": member(depth + 1)}}
        if depth < 2 and r < 0.35:
            return {"type": "array", "maxItems": 2, "items": member(depth + 1),
                    **({"uniqueItems": True} if rng.random() < 0.5 else {})}
        if depth < 2 and r < 0.5:
            return {"oneOf": [{"type": "string", "maxLength": 1}, {"type": "object", "additionalProperties": False,
                                                                  "properties": {"s": {"enum": ["a", "b"]}}}]}
        return small[int(rng.integers(len(small)))]

    names = ["k", "v", "w"][:int(rng.integers(1, 4))]
    props = {n: member() for n in names}
    props[names[int(rng.integers(len(names)))]] = {"type": "string", "maxLength": int(rng.integers(1, 3))}
    required = [n for n in names if rng.random() < 0.6]
    return {"type": "object", "additionalProperties": False, "properties": props, "required": required}


@pytest.mark.parametrize("make_items,seed", [(_bounded_items, s) for s in range(6)] + [(_nested_items, s) for s in range(4)],
                         ids=[f"bounded{s}" for s in range(6)] + [f"nested{s}" for s in range(4)])
def test_random_bounded_items_never_dead_end_nor_repeat(byte_compiler, make_items, seed):
    """Random closed objects of bounded strings (and of nested closed objects and arrays of
    them), walked byte by byte with a strong pull toward repeating the items already written
    (the byte that continues one of them): the mask is never empty before the output ends, and
    every output validates (uniqueItems included, nested ones too)."""
    rng = np.random.default_rng(seed)
    items = 0

    def choose(allowed: set, out: bytes) -> int:
        written = out.split(b"},{")  # earlier items' texts: follow one of them
        model = written[int(rng.integers(len(written)))] if len(written) > 1 else b""
        cur = written[-1]
        nxt = model[len(cur)] if model.startswith(cur) and len(model) > len(cur) else None
        small = [b for b in b'ab"{}' if b in allowed]  # few values: repeats likely
        if nxt is not None and nxt in allowed and rng.random() < 0.9:
            return nxt
        if ord(",") in allowed and len(written) < 10 and rng.random() < 0.9:
            return ord(",")
        if small and rng.random() < 0.8:
            return int(rng.choice(small))
        return int(rng.choice(sorted(allowed)))

    for _ in range(4):
        schema = {"type": "array", "uniqueItems": True, "items": make_items(rng)}
        grammar = byte_compiler.compile_json_schema(schema)
        for _ in range(3):
            out = _byte_walk(grammar, choose, 400)
            if out is None:
                continue  # the budget ran out mid-way (rare): nothing to validate
            value = json.loads(out)
            validate_with_formats(value, schema)
            items += len(value)
    assert items >= 40  # the walks wrote many items, so repeats were on offer (80-100 a seed)


def _byte_walk(grammar, choose, budget: int) -> bytes | None:
    """Bytes picked by ``choose(allowed, output so far)`` through the masks (with the tokens
    left as the budget), each accepted by the matcher; asserts the mask is never empty before
    the output ends. The output, or None where the budget ran out first."""
    vocab = grammar.vocab_size
    bm = allocate_token_bitmask(1, vocab)
    m, out = grammar.matcher(), b""
    for left in range(budget, 0, -1):
        if m.is_terminated():
            break
        m.fill_next_token_bitmask(bm, 0, max_tokens=left)
        allowed = set(np.nonzero(unpack_bitmask(bm[0], vocab))[0].tolist())
        assert allowed, f"dead end after {out!r}"
        tok = choose(allowed, out)
        assert m.accept_token(tok)
        if tok >= 256:
            break
        out += bytes((tok,))
    return out if m.is_terminated() else None


def test_token_features_read_each_tokens_bytes():
    """The per-token flags the duplicate check reads (built once per tokenizer, by counts over
    all tokens' bytes at once), against a token-by-token reading, empty tokens included."""
    import random

    from constraints.unique_items import _token_features

    rng = random.Random(2)
    alphabet = b'"{}[]09a5,tfn \\\xff'
    tokens = [bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 7))) for _ in range(3000)]
    tokens += [b"", b'""', b'"', b"}]", b"x"]
    two, one, digit, closers, opener, comma, letter = _token_features(tokens)
    for k, t in enumerate(tokens):
        assert two[k] == (t.count(b'"') >= 2) and one[k] == (b'"' in t), t
        assert digit[k] == any(48 <= b <= 57 for b in t) and comma[k] == (b"," in t), t
        assert letter[k] == any(b in b"tfn" for b in t), t
        assert closers[k] == t.count(b"}") + t.count(b"]") and opener[k] == (b"{" in t or b"[" in t), t


# Travis's webhooks: closed objects whose members are booleans, an enum, and a URL given as a
# string, a closed {secure} object or a unique array of either (values of one spelling each,
# nested containers included), items unique.
_SECRET = {"type": "object", "additionalProperties": False, "properties": {"secure": {"type": "string"}}}
_URL = {"oneOf": [{"type": "string", "minLength": 1}, _SECRET]}
WEBHOOKS = {"type": "array", "uniqueItems": True, "items": {
    "type": "object", "additionalProperties": False, "properties": {
        "enabled": {"type": "boolean"},
        "urls": {"oneOf": [_URL, {"type": "array", "uniqueItems": True, "minItems": 1, "items": _URL}]},
        "on_failure": {"enum": ["always", "never", "change"]}}}}


@pytest.mark.parametrize("text", [
    '[{"enabled":true,"urls":"a"},{"enabled":true,"urls":"b"}]',
    '[{"enabled":true,"urls":"a"},{"enabled":true,"urls":"a"}]',
    '[{"urls":{"secure":"s"}},{"urls":["a",{"secure":"s"}]},{"urls":{"secure":"s"}}]',
    '[{"urls":["a",{"secure":"s"}]},{"urls":["a",{"secure":"s"}],"on_failure":"never"},{"urls":["a",{"secure":"s"}]}]',
    '[{"urls":["a",{"secure":"s"}]},{"urls":[{"secure":"s"},"a"]}]',
    '[{"urls":["a","a"]}]',
    '[{},{"enabled":false},{}]',
])
def test_closed_objects_with_nested_values_are_compared_as_texts(byte_compiler, text):
    """Members that are closed objects, arrays, or a oneOf of a string, an object and an
    array (each container in one branch, so a value has one spelling): duplicates refused,
    nested unique arrays checked too, arrays in another order new items (as the validator)."""
    grammar = byte_compiler.compile_json_schema(WEBHOOKS)
    valid = jsonschema.Draft202012Validator(WEBHOOKS).is_valid(json.loads(text))
    assert accepted_by_masks(grammar, text.encode()) == valid


@pytest.mark.parametrize("text", [
    '[{"path":"a"},{"path":"a","optional":true},{"path":"b","relative":"git"}]',
    '[{"path":"a","relative":"git"},{"path":"b"},{"path":"a","relative":"git"}]',
])
def test_keywords_no_validator_reads_leave_a_unique_item_shape_alone(byte_compiler, text):
    """cargo-make's extends: closed objects of texts that carry an editor's ``x-taplo``
    (and an unknown keyword in a member) are compared as texts, as without them."""
    schema = {"type": "array", "uniqueItems": True, "items": {
        "type": "object", "x-taplo": {"initKeys": ["optional"]}, "required": ["path"], "additionalProperties": False,
        "properties": {"path": {"type": "string", "markdownDescription": "the file"}, "optional": {"type": "boolean"},
                       "relative": {"oneOf": [{"const": "git"}, {"const": "crate", "x-order": 2}]}}}}
    grammar = byte_compiler.compile_json_schema(schema)
    valid = jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
    assert accepted_by_masks(grammar, text.encode()) == valid


def test_prefix_items_compared_as_texts_with_the_rest(byte_compiler):
    """A first item of its own schema (a oneOf's `not` leaves one, as in Travis's webhooks)
    and more of the same kind: the first is compared with the rest as text."""
    items = WEBHOOKS["items"]
    schema = {"type": "array", "uniqueItems": True, "prefixItems": [{**items, "required": ["urls"]}], "items": items}
    grammar = byte_compiler.compile_json_schema(schema)
    assert accepted_by_masks(grammar, b'[{"urls":"a"},{"urls":"b"},{}]')
    assert not accepted_by_masks(grammar, b'[{"urls":"a"},{"urls":"b"},{"urls":"a"}]')


def test_objects_spelled_in_two_member_orders_are_refused(byte_compiler):
    """Two branches writing the same names in other orders would spell one value two ways,
    so texts could differ where values are equal: refused, naming the keyword."""
    member = {"type": "string", "maxLength": 3}
    ab = {"type": "object", "additionalProperties": False, "properties": {"a": {"type": "string"}, "b": member}}
    ba = {**ab, "properties": {"b": member, "a": {"type": "string"}}}
    with pytest.raises(UnsupportedSchemaError) as e:
        byte_compiler.compile_json_schema({"type": "array", "uniqueItems": True, "items": {"anyOf": [ab, ba]}})
    assert e.value.keyword == "uniqueItems"


NULLABLE_TAGS = {"type": "array", "uniqueItems": True, "maxItems": 16,
                 "items": {"type": ["string", "null"], "minLength": 1, "maxLength": 1}}  # winget's tags
NAMED_OR_ANY = {"type": "array", "uniqueItems": True,  # Chrome's permissions: a listed name or any string
                "items": {"anyOf": [{"type": "string", "enum": ["ab", "b"]}, {"type": "string"}]}}


def test_null_beside_bounded_strings_and_listed_strings_beside_any_are_compared_as_texts(byte_compiler):
    """A bounded string or null: null once, then refused at its first letter; a string that
    can only repeat refused where it is decided. A listed string or any string: the listed
    value written as a string of the other branch is the same item."""
    m = byte_compiler.compile_json_schema(NULLABLE_TAGS).matcher()
    assert m.accept_string('[null,"a",')
    assert not m.accept_string("n")
    assert m.accept_string('"')
    assert not m.accept_string("a")
    assert m.accept_string('b"]') and m.can_terminate()
    m = byte_compiler.compile_json_schema(NAMED_OR_ANY).matcher()
    assert m.accept_string('["ab","c",')
    assert not m.accept_string('"ab"')
    assert m.accept_string('"abc","b"')
    assert not m.accept_string(',"b"')
    assert m.accept_string("]") and m.can_terminate()


OBJECT_OR_LITERAL = {"type": "array", "uniqueItems": True, "items": {"anyOf": [
    {"type": "object", "additionalProperties": False, "required": ["a"],
     "properties": {"a": {"type": "string", "maxLength": 2}}}, {"type": "null"}, {"type": "boolean"}]}}


@pytest.mark.parametrize("schema", [NULLABLE_TAGS, NAMED_OR_ANY, OBJECT_OR_LITERAL, NON_ZERO],
                         ids=["nullable", "named-or-any", "object-or-literal", "non-zero"])
def test_walks_pulled_toward_repeats_never_dead_end_nor_repeat(byte_compiler, schema):
    """Byte walks that favour the few bytes of the listed and short values (so duplicates are
    on offer at every item): the mask is never empty before the output ends, and every output
    validates, uniqueItems included."""
    rng = np.random.default_rng(7)
    grammar = byte_compiler.compile_json_schema(schema)

    def choose(allowed: set, out: bytes) -> int:
        small = [b for b in b'abntf",{017-' if b in allowed]
        return int(rng.choice(small)) if small and rng.random() < 0.9 else int(rng.choice(sorted(allowed)))

    items = 0
    for _ in range(12):
        out = _byte_walk(grammar, choose, 300)
        if out is not None:
            value = json.loads(out)
            validate_with_formats(value, schema)
            items += len(value)
    assert items >= 40


@pytest.mark.parametrize("schema", [STRINGS, MIXED], ids=["strings", "any-kind"])
def test_near_the_budget_an_item_is_not_walked_into_a_repeat(compiler, hf_tokenizer, schema):
    """A model that repeats its items (SchemaStore's size-limit paths: "dataType_json_data",
    then one more "_data" each time, up to 384 tokens): where the tokens left are just enough
    to close, the token that makes the item being written equal to a finished one is out of
    the budget row, since closing it then would be a duplicate with nothing left to write it
    on; with a token to spare it stays. The output closes with a new item in time. Items of
    one type, and of several (compared as values)."""
    grammar = compiler.compile_json_schema(schema)
    info = grammar.automaton.info
    repeat = info.ids_by_bytes[b"Type"]
    bm = allocate_token_bitmask(1, grammar.vocab_size)
    m = grammar.matcher()
    assert m.accept_string(b'["dataType","data')
    assert m.min_tokens_to_finish() == 1  # '"]', which ends the output

    def allowed(left: int) -> set[int]:
        m.fill_next_token_bitmask(bm, 0, max_tokens=left)
        return set(np.nonzero(unpack_bitmask(bm[0], grammar.vocab_size))[0].tolist())

    assert repeat in allowed(3) and repeat in allowed(50)
    near = allowed(2)
    assert repeat not in near and near
    # greedy for the repeat wherever it is allowed, then for the closing
    favourites, text = [repeat, info.ids_by_bytes[b'"]']], b'["dataType","data'
    for left in (2, 1):
        row = allowed(left)
        tok = next(t for t in [*favourites, *sorted(row)] if t in row)
        assert m.accept_token(tok)
        text += info.token_bytes[tok]
        if m.is_terminated():
            break
    assert m.is_terminated()
    validate_with_formats(json.loads(text), schema)
