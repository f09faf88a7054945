"""Recursive local $ref (through a pushdown automaton, not a depth cap): accept/reject sets."""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest
from schema_suite_runner import accepted_by_masks, accepted_by_tokens, byte_vocab_info

from constraints import GrammarCompiler, GrammarTooComplexError, UnsupportedSchemaError
from constraints.nfa import CALL_BASE
from constraints.pushdown import PushdownAutomaton
from tests.json_validation import format_validator

TREE = {
    "$defs": {"node": {
        "type": "object",
        "properties": {
            "value": {"type": "integer", "minimum": 0, "maximum": 100},
            "name": {"type": "string", "maxLength": 8},
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3},
        },
        "required": ["value", "children"],
        "additionalProperties": False,
    }},
    "$ref": "#/$defs/node",
}
LINKED_LIST = {  # recursion through the root
    "type": "object",
    "properties": {"v": {"type": "string", "maxLength": 3},
                   "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
    "required": ["v", "next"],
    "additionalProperties": False,
}
MUTUAL = {  # a -> b -> a across two $defs
    "$defs": {
        "a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}},
              "additionalProperties": False},
        "b": {"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "integer"}]},
              "maxItems": 2},
    },
    "$ref": "#/$defs/a",
}
EXPR = {  # a JSON expression grammar: numbers, variables, binary operations
    "$defs": {"expr": {"anyOf": [
        {"type": "number"},
        {"type": "object", "properties": {"var": {"type": "string", "pattern": "^[a-z]+$"}},
         "required": ["var"], "additionalProperties": False},
        {"type": "object",
         "properties": {"op": {"enum": ["+", "*"]},
                        "args": {"type": "array", "items": {"$ref": "#/$defs/expr"},
                                 "minItems": 2, "maxItems": 2}},
         "required": ["op", "args"], "additionalProperties": False},
    ]}},
    "$ref": "#/$defs/expr",
}
AMBIGUOUS = {  # a recursive call and an inline object compete at the same position
    "$defs": {"node": {
        "type": "object",
        "properties": {"k": {"type": "integer"},
                       "sub": {"anyOf": [{"$ref": "#/$defs/node"},
                                         {"type": "object", "properties": {"k": {"type": "string"}},
                                          "required": ["k"], "additionalProperties": False}]}},
        "required": ["k"],
        "additionalProperties": False,
    }},
    "$ref": "#/$defs/node",
}
NAMED = {  # a recursive $ref with a sibling keyword: a rule for the conjunction
    "$defs": {"node": {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 4},
                       "kids": {"type": "array", "items": {"$ref": "#/$defs/node", "required": ["name"]},
                                "maxItems": 2}},
        "additionalProperties": False,
    }},
    "$ref": "#/$defs/node",
}
NONEMPTY = {  # items must be non-empty arrays of the same kind: only [] is finite
    "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n", "minItems": 1}, "maxItems": 2}},
    "$ref": "#/$defs/n",
}
MERGED = {  # the root merged into a property by allOf, with a required name it does not declare
    "type": "object",
    "properties": {"n": {"allOf": [{"$ref": "#"}, {"required": ["x"]}]}},
}

CASES = {
    "tree": (TREE, [
        {"value": 1, "children": []},
        {"value": 0, "name": "root", "children": [
            {"value": 2, "children": [{"value": 3, "name": "leaf", "children": []}]},
            {"value": 100, "children": []}, {"value": 4, "children": []}]},
    ], [
        {"value": 1, "children": [{"value": 101, "children": []}]},
        {"value": 1, "children": [{"value": 2, "children": [{"value": 3, "name": "toolongname",
                                                            "children": []}]}]},
        {"value": 1, "children": [{"value": 2}]},
        {"value": 1, "children": [{"value": 2, "children": [], "extra": 1}]},
        {"value": 1, "children": [1]},
        {"value": 1, "children": [{"value": 2, "children": [{"value": 1, "children": []}] * 4}]},
    ]),
    "linked_list": (LINKED_LIST, [
        {"v": "a", "next": None},
        {"v": "a", "next": {"v": "bb", "next": {"v": "ccc", "next": None}}},
    ], [
        {"v": "a", "next": {"v": "bb", "next": {"v": "cccc", "next": None}}},
        {"v": "a", "next": {"v": "b"}},
        {"v": "a", "next": 1},
        {"v": "a", "next": {"v": "b", "next": None, "w": 1}},
    ]),
    "mutual": (MUTUAL, [
        {}, {"b": []}, {"b": [1, {"b": [{"b": [2]}, 3]}]},
    ], [
        {"b": [1, 2, 3]},
        {"b": [{"b": [1, 2, 3]}]},
        {"b": [{"c": 1}]},
        {"b": ["x"]},
    ]),
    "expr": (EXPR, [
        1.5,
        {"var": "x"},
        {"op": "+", "args": [1, {"op": "*", "args": [{"var": "y"}, 2]}]},
    ], [
        {"op": "-", "args": [1, 2]},
        {"op": "+", "args": [1, {"op": "*", "args": [1, 2, 3]}]},
        {"op": "+", "args": [1, {"var": "X1"}]},
        {"op": "+", "args": [1]},
    ]),
    "ambiguous": (AMBIGUOUS, [
        {"k": 1, "sub": {"k": "s"}},
        {"k": 1, "sub": {"k": 2, "sub": {"k": 3, "sub": {"k": "x"}}}},
    ], [
        {"k": 1, "sub": {"k": None}},
        {"k": 1, "sub": {"k": "s", "sub": {"k": 1}}},
        {"k": 1, "sub": {"k": 2, "sub": {"k": True}}},
    ]),
    "named": (NAMED, [
        {}, {"kids": []}, {"name": "r", "kids": [{"name": "a", "kids": [{"name": "b"}]}]},
    ], [
        {"kids": [{}]},
        {"kids": [{"name": "a", "kids": [{"kids": []}]}]},
        {"kids": [{"name": "a", "kids": [{"name": "toolong"}]}]},
    ]),
    "nonempty": (NONEMPTY, [[]], [[[]], [[[]]], [[], []]]),
    "merged": (MERGED, [{}, {"n": {"x": 1}}, {"n": {"n": {"x": None}, "x": "a"}}],
               [{"n": {}}, {"n": {"x": 1, "n": {}}}, {"n": 1}]),
}
PARAMS = [(name, ok, i) for name, (_, valid, invalid) in CASES.items()
          for ok, values in ((True, valid), (False, invalid)) for i in range(len(values))]


def _text(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.fixture(scope="module")
def byte_compiler() -> GrammarCompiler:
    return GrammarCompiler(byte_vocab_info())


@pytest.mark.parametrize("name,valid,i", PARAMS)
def test_accept_reject_sets_byte_by_byte(byte_compiler, name, valid, i):
    schema, good, bad = CASES[name]
    value = (good if valid else bad)[i]
    assert format_validator(schema).is_valid(value) == valid
    grammar = byte_compiler.compile_json_schema(schema)
    assert isinstance(grammar.automaton, PushdownAutomaton)
    assert accepted_by_masks(grammar, _text(value).encode()) == valid


@pytest.mark.parametrize("name", list(CASES))
def test_valid_instances_pass_every_token_mask(compiler, hf_tokenizer, name):
    schema, good, _ = CASES[name]
    grammar = compiler.compile_json_schema(schema)
    for value in good:
        assert accepted_by_tokens(grammar, hf_tokenizer, _text(value)), value


@pytest.mark.parametrize("name,prefix,whitespace", [
    ("ambiguous", '{"k":1,"sub":', "compact"),
    ("ambiguous", '{"k":1,"sub":{"k":2,"sub":{"k"', "compact"),
    ("tree", '{"value":1,"children":[{"value":2,"children":[]} ', "flexible"),
    ("expr", '{"op":"+","args":[1,', "compact"),
])
def test_mask_equals_brute_force_over_the_vocabulary(compiler, name, prefix, whitespace):
    """The forking vocabulary walk allows exactly the tokens that advance() accepts."""
    automaton = compiler.compile_json_schema(CASES[name][0], whitespace=whitespace).automaton
    state = automaton.advance(automaton.initial, prefix.encode())
    assert state is not None
    token_bytes = automaton.info.token_bytes
    brute = sorted(t for t in automaton.info.layout.token_ids.tolist()
                   if automaton.advance(state, token_bytes[t]) is not None)
    assert np.array_equal(np.sort(automaton.allowed_token_ids(state)), np.array(brute))


def test_flexible_whitespace_inside_recursion(compiler, hf_tokenizer):
    value = CASES["tree"][1][1]
    flex = compiler.compile_json_schema(TREE, whitespace="flexible")
    assert accepted_by_tokens(flex, hf_tokenizer, json.dumps(value, indent=1))
    assert not compiler.compile_json_schema(TREE).matcher().accept_string('{ "value"')


def test_jump_forward_inside_recursion(compiler):
    m = compiler.compile_json_schema(TREE).matcher()
    assert m.find_jump_forward_string() == '{"value":'
    assert m.accept_string('{"value":1,"children":[{')
    assert m.find_jump_forward_string() == '"value":'  # forced inside the recursive call
    assert m.accept_string('"value":2,"children":[]}]')
    assert m.find_jump_forward_string() == "}"  # the return to the outer node
    m = compiler.compile_json_schema(LINKED_LIST).matcher()
    assert m.accept_string('{"v":"a","next":{"v":"b","next":null')
    assert m.find_jump_forward_string() == "}}"


def test_leaves_are_shared_rules_whose_sizes_add(byte_compiler):
    """A string leaf is one DFA called by every schema that uses it, never copied into the
    structure: 40 date-time properties cost the structure a call each, not a date-time each."""
    stamp = {"type": "string", "format": "date-time"}
    a = byte_compiler.compile_json_schema({"type": "object", "properties": {"at": stamp}})
    b = byte_compiler.compile_json_schema({"type": "array", "items": stamp})
    shared = [x for x in a.automaton.rules[1:] if any(x is y for y in b.automaton.rules[1:])]
    assert shared and max(d.num_states for d in shared) > 50
    wide = byte_compiler.compile_json_schema(
        {"type": "object", "properties": {f"p{i}": stamp for i in range(40)}})
    structure = wide.automaton.rules[0].num_states
    assert structure < 40 * shared[0].num_states / 4
    good = json.dumps({"p0": "2024-01-02T03:04:05Z", "p1": "1999-12-31T23:59:59+01:00"},
                      separators=(",", ":"))
    assert accepted_by_masks(wide, good.encode())
    assert not accepted_by_masks(wide, b'{"p0":"2024-13-02T03:04:05Z"}')


def _words(seed: int, n: int, length: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), length)) for _ in range(n)]


def test_members_too_big_to_inline_are_rules_of_their_own(byte_compiler):
    """Twenty members, each an enum of 80 words of its own: inline, the object's rule held
    every enum's automaton (over 20,000 states: refused); each is a call of a rule now, and
    a value stays checked against its own member's enum."""
    enums = {f"m{i}": {"enum": _words(i, 80, 16)} for i in range(20)}
    grammar = byte_compiler.compile_json_schema({"type": "object", "properties": enums})
    assert grammar.automaton.rules[0].num_states < 2_000
    first, other = enums["m3"]["enum"][5], enums["m4"]["enum"][5]
    assert accepted_by_masks(grammar, json.dumps({"m3": first, "m7": enums["m7"]["enum"][79]},
                                                 separators=(",", ":")).encode())
    assert not accepted_by_masks(grammar, json.dumps({"m3": other}, separators=(",", ":")).encode())


def test_a_value_many_members_share_is_one_rule_they_call(byte_compiler):
    """300 members with one value (putout's rules: each a $ref to one definition): one rule
    of that value, called by each member, not 300 copies of it in the object's rule."""
    rule = {"enum": ["off", "on", "warn", "error", 0, 1, 2]}
    names = [f"rule-{i:03d}" for i in range(300)]
    schema = {"$defs": {"rule": rule}, "type": "object",
              "properties": {n: {"$ref": "#/$defs/rule"} for n in names}}
    grammar = byte_compiler.compile_json_schema(schema)
    main = grammar.automaton.rules[0]
    calls = (main.trans[:, CALL_BASE:] >= 0).sum(axis=0)  # positions calling each rule
    called = grammar.automaton.rules[1 + int(calls.argmax())]
    assert calls.max() >= 300  # every member calls it (the rule's tracks may call it twice)
    assert called.matches(b'"warn"') and called.matches(b"2") and not called.matches(b'"maybe"')
    assert accepted_by_masks(grammar, b'{"rule-000":"warn","rule-123":2,"rule-299":"off"}')
    assert not accepted_by_masks(grammar, b'{"rule-000":"maybe"}')
    assert not accepted_by_masks(grammar, b'{"rule-123":2,"rule-000":"warn"}')  # schema order


def test_unique_items_of_a_finite_domain_too_long_to_spell_in_order_are_checked_as_texts(byte_compiler):
    """uniqueItems over 62 words of 20 letters: every subset in the domain's order would be
    33,000 bytes of automaton (refused); the items are compared as texts in the matcher."""
    words = _words(7, 62, 20)
    grammar = byte_compiler.compile_json_schema({"type": "array", "items": {"enum": words}, "uniqueItems": True})
    assert accepted_by_masks(grammar, json.dumps([words[9], words[2], words[61]], separators=(",", ":")).encode())
    assert not accepted_by_masks(grammar, json.dumps([words[9], words[2], words[9]], separators=(",", ":")).encode())
    assert not accepted_by_masks(grammar, json.dumps([words[9], "x"], separators=(",", ":")).encode())


def test_values_tried_inline_again_and_again_stay_within_the_nfa_cap(byte_compiler):
    """Members that each reach a 100,000-item array (workflows.json's steps): every inline
    try is rolled back and the value emitted again as a rule, and those tries count against
    the NFA cap, so the compile is refused at once instead of running into its time limit."""
    steps = {"type": "array", "maxItems": 100_000, "items": {"type": "object", "properties": {
        "call": {"type": "string"}, "next": {"type": "string"}}}}
    schema = {"$defs": {"steps": steps}, "type": "object",
              "properties": {f"branch{i}": {"$ref": "#/$defs/steps", "description": f"branch {i}"} for i in range(6)}}
    compiler = GrammarCompiler(byte_vocab_info(), compile_timeout_s=8.0)
    with pytest.raises(GrammarTooComplexError, match="tried inline"):
        compiler.compile_json_schema(schema)


def test_hundreds_of_optional_members_spell_each_name_once(byte_compiler):
    """475 optional members (putout's rules): the two tracks (nothing written yet, or a comma
    first) share one spelling of each name, so the rule is one state per byte of the names,
    not two (which passed the state cap before minimization could merge them)."""
    names = [f"{w}/{v}" for w, v in zip(_words(5, 475, 14), _words(6, 475, 14))]
    schema = {"type": "object", "properties": {n: {"enum": ["off", "on", 0, 1]} for n in names}}
    grammar = byte_compiler.compile_json_schema(schema)
    assert grammar.automaton.rules[0].num_states < 1.3 * sum(len(n) + 3 for n in names)
    text = json.dumps({names[3]: "on", names[200]: 1, names[474]: "off"}, separators=(",", ":"))
    assert accepted_by_masks(grammar, text.encode())
    assert not accepted_by_masks(grammar, json.dumps({names[200]: 1, names[3]: "on"}, separators=(",", ":")).encode())


def test_a_rule_past_the_state_cap_is_named_by_its_pointer(byte_compiler):
    """900 optional members of 28-letter names make a rule of more states than the cap (a
    state for each byte of each name at least): the refusal names that rule's place."""
    rules = {"type": "object", "properties": {f"{w}-{i}": {"type": "boolean"} for i, w in enumerate(_words(3, 900, 24))}}
    with pytest.raises(GrammarTooComplexError, match="rule at /properties/rules "):
        byte_compiler.compile_json_schema({"type": "object", "properties": {"name": {"type": "string"}, "rules": rules}})


def test_a_grammars_per_position_tables_are_not_walked_by_the_garbage_collector(byte_compiler):
    """A cached grammar keeps tables of one entry per position (its own and its completion
    distances'): as lists the collector would walk every entry at each collection reaching
    them (the 240 dev grammars made a full collection 29 ms, ~5 ms without), so no attribute
    of the automaton or of its distances has that many entries for the collector to walk."""
    stamp = {"type": "string", "format": "date-time"}
    tree = {"type": "object", "properties": {"at": stamp, "kids": {"type": "array", "items": {"$ref": "#"}},
                                             "name": {"type": "string", "maxLength": 8}}}
    grammar = byte_compiler.compile_json_schema(tree)
    matcher = grammar.matcher()
    assert matcher.finishes_within(64)
    assert accepted_by_masks(grammar, b'{"at":"2024-01-02T03:04:05Z","kids":[{"name":"ab"}]}')
    automaton = grammar.automaton
    positions = automaton.num_states
    assert positions > 100 and automaton._distances
    gc.collect()  # a tuple of ints is untracked by the first collection that sees it
    for owner in (automaton, *automaton._distances.values()):
        for name, value in vars(owner).items():
            walked = len(gc.get_referents(value)) if gc.is_tracked(value) else 0
            assert walked < positions, f"{type(owner).__name__}.{name}: the collector walks {walked} entries"


@pytest.mark.parametrize("schema,keyword", [
    ({"anyOf": [{"$ref": "#"}, {"type": "null"}]}, "$ref"),  # left recursion
    ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "$ref"),
    ({"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}, "uniqueItems": True}},
      "$ref": "#/$defs/n"}, "uniqueItems"),
    ({"type": "array", "items": {"anyOf": [{"$ref": "#"}, {"type": "object", "$dynamicRef": "#x"}]}},
     "$dynamicRef"),
])
def test_unenforceable_recursive_schemas_raise_typed_errors(byte_compiler, schema, keyword):
    with pytest.raises(UnsupportedSchemaError) as err:
        byte_compiler.compile_json_schema(schema)
    assert err.value.keyword == keyword


def test_deep_nesting_has_no_depth_cap(byte_compiler):
    value = {"v": "z", "next": None}
    for _ in range(40):
        value = {"v": "a", "next": value}
    grammar = byte_compiler.compile_json_schema(LINKED_LIST)
    assert accepted_by_masks(grammar, _text(value).encode())


def test_pathological_ambiguity_is_bounded_not_an_error(byte_compiler):
    """Two identical recursive branches double the parses per level; the count stays capped."""
    schema = {"$defs": {
        "a": {"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}]}},
        "b": {"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}]}}},
        "$ref": "#/$defs/a"}
    grammar = byte_compiler.compile_json_schema(schema)
    text = "[" * 12 + "]" * 12
    assert accepted_by_masks(grammar, text.encode())
    m = grammar.matcher()
    assert m.accept_string("[" * 12)
    assert len(m._state) <= 64


def test_a_recursive_ref_beside_keywords_its_target_already_says(byte_compiler):
    """``{"type": ["object", "null"], "anyOf": [{"$ref": node}, {"type": "null"}]}``: the type
    beside the recursive call holds for every node (its target is an object), so the call
    alone is exact (WashingtonPost's author and content schemas)."""
    schema = {"$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array", "items": {
        "type": ["object", "null"], "anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}},
        "additionalProperties": False}}, "$ref": "#/$defs/node"}
    grammar = byte_compiler.compile_json_schema(schema)
    for text, valid in [(b'{"kids":[{"kids":[null,{}]}]}', True), (b'{"kids":[null]}', True),
                        (b'{"kids":[1]}', False), (b'{"kids":[{"kids":[{"x":1}]}]}', False)]:
        assert accepted_by_masks(grammar, text) == valid, text
    items = schema["$defs"]["node"]["properties"]["kids"]["items"]
    items["type"] = ["string", "null"]  # a type the target does not imply: the conjunction's rule
    grammar = byte_compiler.compile_json_schema(schema)
    for text, valid in [(b'{"kids":[null]}', True), (b'{"kids":[{}]}', False), (b'{"kids":["a"]}', False)]:
        assert accepted_by_masks(grammar, text) == valid, text


NEVER = {  # "x" may only hold an object that requires itself: no finite instance
    "$defs": {"never": {"type": "object", "properties": {"a": {"$ref": "#/$defs/never"}},
                        "required": ["a"]}},
    "type": "object",
    "properties": {"x": {"$ref": "#/$defs/never"}, "y": {"type": "integer"}},
    "additionalProperties": False,
}


def test_a_rule_without_finite_instances_is_never_entered(byte_compiler):
    """The call of an empty rule is cut from its caller, so no mask leads into it: after
    '{"' only "y" may follow (a mask allowing "x" would lead into a dead end that no byte
    budget can close)."""
    automaton = byte_compiler.compile_json_schema(NEVER).automaton
    state = automaton.advance(automaton.initial, b'{"')
    assert state is not None
    allowed = {automaton.info.token_bytes[t] for t in automaton.allowed_token_ids(state).tolist()}
    assert b"y" in allowed and b"x" not in allowed
    assert accepted_by_masks(byte_compiler.compile_json_schema(NEVER), b'{"y":1}')
    assert not accepted_by_masks(byte_compiler.compile_json_schema(NEVER), b'{"x":{}}')


EMPTY_MEMBER = {  # "x" may only hold an object that requires a member no value satisfies
    "type": "object",
    "properties": {"x": {"type": "object", "properties": {"a": {"type": "string", "minLength": 3,
                                                                 "maxLength": 2}},
                         "required": ["a"]},
                   "y": {"type": "integer"}},
    "additionalProperties": False,
}


def test_a_nested_rule_without_instances_is_never_entered(byte_compiler):
    """An object rule that calls only rules that match, yet matches nothing itself (its
    required member has no value), is empty: its call is cut like a recursive one's."""
    automaton = byte_compiler.compile_json_schema(EMPTY_MEMBER).automaton
    state = automaton.advance(automaton.initial, b'{"')
    allowed = {automaton.info.token_bytes[t] for t in automaton.allowed_token_ids(state).tolist()}
    assert b"y" in allowed and b"x" not in allowed
    assert not accepted_by_masks(byte_compiler.compile_json_schema(EMPTY_MEMBER), b'{"x":{"a":"abc"}}')
