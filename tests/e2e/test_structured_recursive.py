"""Recursive JSON Schemas on the real model: finished outputs parse and validate."""

from __future__ import annotations

import json

import pytest

from tests.json_validation import validate_with_formats

SCHEMAS = {
    "category_tree": {
        "$defs": {"node": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 16},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
            },
            "required": ["name", "children"],
            "additionalProperties": False,
        }},
        "$ref": "#/$defs/node",
    },
    "linked_list": {
        "type": "object",
        "properties": {
            "step": {"type": "integer", "minimum": 1, "maximum": 9},
            "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]},
        },
        "required": ["step", "next"],
        "additionalProperties": False,
    },
}


# A 135M model left alone nests until it runs out of tokens; an example to copy lets the
# greedy run finish while the sampled runs still wander through deeper levels.
EXAMPLES = {
    "category_tree": {"name": "Food", "children": [{"name": "Fruit", "children": []},
                                                   {"name": "Bread", "children": []}]},
    "linked_list": {"step": 1, "next": {"step": 2, "next": None}},
}


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_recursive_schema_outputs_validate(engine, name):
    schema = SCHEMAS[name]
    example = json.dumps(EXAMPLES[name], separators=(",", ":"))
    prompt = engine.apply_chat_template(
        [{"role": "user", "content": f"Copy this JSON exactly: {example}"}])
    params = [{"json_schema": schema, "temperature": 0, "max_new_tokens": 200}]
    params += [{"json_schema": schema, "temperature": 0.8, "seed": s, "max_new_tokens": 200}
               for s in (1, 2, 3)]
    outs = engine.generate([prompt] * len(params), params)
    finished = [o for o in outs if o["meta_info"]["finish_reason"]["type"] == "stop"]
    assert finished, [o["text"] for o in outs]
    for out in outs:
        assert out["text"].startswith("{"), out["text"]
    for out in finished:
        validate_with_formats(json.loads(out["text"]), schema)
