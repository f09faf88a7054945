"""The compile context's keys and value checks: a nested object's rule key (Ctx.canonical)
equal exactly where the JSON is, and costing the object's own members; enum values checked
against their siblings as the validator checks them, with or without asking it."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import jsonschema
import pytest
from schema_suite_runner import accepted_by_masks, byte_vocab_info

from constraints import GrammarCompiler
from constraints.json_context import Ctx, literal_texts
from constraints.json_schema import emit_schema

DEV_SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/jsonschemabench-dev"


def _ctx() -> Ctx:
    ctx = Ctx({}, False, False, None, emit_schema)
    ctx.validator = jsonschema.Draft202012Validator({})
    return ctx


def _containers(value, out: list) -> list:
    if isinstance(value, dict):
        out.append(value)
        for v in value.values():
            _containers(v, out)
    elif isinstance(value, list):
        out.append(value)
        for v in value:
            _containers(v, out)
    return out


_EDGES = [{"a": 1}, {"a": 1.0}, {"a": True}, {"a": "1"}, {"a": None}, {"a": [1]}, {"a": (1,)},
          {"b": 1, "a": 2}, {"a": 2, "b": 1}, {"a": {"b": 1}}, {"a": {"b": [1, 2]}}, {"a": {"b": [2, 1]}},
          {"a": math.inf}, {"a": "\u00e9"}, {"a": "\\u00e9"}, {"a\"": 1}, {"a": ""}, [], {}, [{}], [[]],
          {"a": {"b": {"c": 1}}}, {"a": {"b": {"c": 2}}}, {"a": {"b": {"c": 1}}, "d": 0}]


def test_canonical_keys_are_equal_exactly_where_the_json_is():
    """Every dict and list of the development sample's schemas (and edge cases: 1, 1.0 and
    true; key order; tuples; escapes), keyed in one compile context, each also as a deep
    copy (a new identity, so the kept keys by identity are not what makes them agree): two
    keys are equal exactly where json.dumps with sorted keys is."""
    values = list(_EDGES)
    if DEV_SAMPLE.is_dir():
        for path in sorted(DEV_SAMPLE.glob("*/*.json"))[::3]:
            values += _containers(json.loads(path.read_text()), [])
    assert len(values) > 1000 or not DEV_SAMPLE.is_dir()
    ctx = _ctx()
    keys_of_text: dict[str, set] = {}
    texts_of_key: dict[str, set] = {}
    for value in values + [copy.deepcopy(v) for v in values]:
        text, key = json.dumps(value, sort_keys=True, default=repr), ctx.canonical(value)
        keys_of_text.setdefault(text, set()).add(key)
        texts_of_key.setdefault(key, set()).add(text)
    assert all(len(k) == 1 for k in keys_of_text.values())
    assert all(len(t) == 1 for t in texts_of_key.values())
    assert len(texts_of_key) == len(keys_of_text) > len(_EDGES) - 4  # the edges are mostly distinct


def test_a_nested_objects_key_costs_its_own_members():
    """An object nested 300 deep: the key of each level, and all the text kept to make them,
    grow with the levels, not with their square (a whole JSON text per level is 300 texts
    of up to 300 levels each)."""
    leaf: dict = {"type": "string"}
    levels = [leaf]
    for i in range(300):
        levels.append({"type": "object", "properties": {f"p{i}": levels[-1]}, "required": [f"p{i}"]})
    ctx = _ctx()
    keys = [ctx.canonical(level) for level in levels]
    assert len(set(keys)) == len(levels)
    assert max(map(len, keys)) < 16
    kept = sum(map(len, ctx.keys_by_text))
    assert kept < 100 * len(levels)
    assert sum(len(json.dumps(level, sort_keys=True)) for level in levels) > 50 * kept  # whole texts' cost


@pytest.mark.parametrize("rest", [
    {"pattern": "^a.c$"},
    {"pattern": "b", "description": "anywhere in the string", "doNotSuggest": True},
    {"pattern": "^\\d+@[0-9]$", "ignoreCase": "value"},
    {"pattern": "^\u00e9", "title": "non-ASCII"},
    {"pattern": "^a", "maxLength": 3},  # another keyword the validator reads: it is asked
    {"description": "annotations only", "doNotSuggest": False, "deprecationMessage": "old"},
    {"type": "string", "description": "x"},
])
def test_enum_values_are_checked_against_their_siblings_as_the_validator_checks_them(rest):
    values = ["abc", "axc", "abcd", "xabc", "b", "12@3", "1@3", "\u00e9t\u00e9", "a", 1, None, True, ["abc"],
              {"a": "abc"}, 2.5]
    validator = jsonschema.Draft202012Validator(rest)
    expected = [json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()
                for v in values if validator.is_valid(v)]
    assert literal_texts(_ctx(), {"enum": values, **rest}, "") == expected
    assert 0 < len(expected) < len(values) or "annotations only" in str(rest)


def test_branches_told_apart_by_a_pattern_over_an_enum_keep_each_branch_exact():
    """Azure Pipelines' shape: a name taking one of several enums, and branches each fixing
    it by a pattern with members of their own: a name another branch's pattern picks is
    not accepted with this branch's members."""
    schema = {
        "type": "object",
        "properties": {"task": {"anyOf": [{"enum": ["Shell@2"]}, {"enum": ["Shell@1"]}, {"enum": ["Copy@1"]}]}},
        "required": ["task"],
        "anyOf": [
            {"properties": {"task": {"pattern": "^Shell@2$", "description": "x"}, "script": {"type": "string"}},
             "required": ["script"]},
            {"properties": {"task": {"pattern": "^Copy@", "ignoreCase": "value"}, "to": {"type": "integer"}},
             "required": ["to"]},
        ],
    }
    grammar = GrammarCompiler(byte_vocab_info(), max_states=20_000).compile_json_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    texts = ['{"task":"Shell@2","script":"ls"}', '{"task":"Copy@1","to":3}', '{"task":"Shell@1","script":"ls"}',
             '{"task":"Copy@1","script":"ls"}', '{"task":"Shell@2","to":3}', '{"task":"Shell@1","to":3}']
    assert [accepted_by_masks(grammar, t.encode()) for t in texts] == [validator.is_valid(json.loads(t))
                                                                       for t in texts]
    assert [validator.is_valid(json.loads(t)) for t in texts] == [True, True, False, False, False, False]
