"""Constrained decoding on the real model: outputs always parse and validate."""

from __future__ import annotations

import json
import re

import pytest
from lark import Lark

from sglang_lite import Engine
from tests.json_validation import validate_with_formats

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 24},
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "email": {"type": "string", "format": "email"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "minItems": 1, "maxItems": 3},
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": False,
    },
    "weather_call": {
        "type": "object",
        "properties": {
            "function": {"const": "get_weather"},
            "arguments": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 20},
                    "unit": {"enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
        "required": ["function", "arguments"],
        "additionalProperties": False,
    },
    "order_with_refs": {
        "$defs": {
            "item": {
                "type": "object",
                "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                               "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
                "required": ["sku", "qty"],
                "additionalProperties": False,
            }
        },
        "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "date": {"type": "string", "format": "date"},
            "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1, "maxItems": 2},
            "note": {"type": ["string", "null"], "maxLength": 16},
        },
        "required": ["id", "date", "items", "note"],
        "additionalProperties": False,
    },
}


def _prompt(engine, what: str) -> str:
    return engine.apply_chat_template([{"role": "user", "content": f"Reply with JSON for: {what}"}])


@pytest.fixture(scope="module")
def no_jump_engine(model_dir):
    eng = Engine(enable_jump_forward=False)
    yield eng
    eng.shutdown()


@pytest.mark.parametrize("jump_forward", [True, False])
def test_json_schema_outputs_validate(engine, no_jump_engine, jump_forward):
    eng = engine if jump_forward else no_jump_engine
    names = list(SCHEMAS)
    prompts, params = [], []
    for name in names:
        for seed in (None, 1, 2):  # greedy, then two sampled runs
            prompts.append(_prompt(eng, name.replace("_", " ")))
            sampling = {"temperature": 0} if seed is None else {"temperature": 0.9, "seed": seed}
            params.append({"json_schema": SCHEMAS[name], "max_new_tokens": 160, **sampling})
    outs = eng.generate(prompts, params)
    for i, out in enumerate(outs):
        schema = SCHEMAS[names[i // 3]]
        assert out["meta_info"]["finish_reason"]["type"] == "stop", out
        value = json.loads(out["text"])
        validate_with_formats(value, schema)
    jumped = eng.get_stats()["num_jump_forward_tokens"]
    assert (jumped > 0) == jump_forward


@pytest.mark.parametrize("pattern", [r"[0-9]{3}-[0-9]{4}", r"(yes|no|maybe)", r"[A-Z][a-z]{2,8} (is|was) [0-9]+",
                                     r"\d{4}-\d{2}-\d{2}", r"(café|naïve|日本語)!"])
def test_regex_outputs_fullmatch(engine, pattern):
    outs = engine.generate(["Answer:"] * 3, [{"regex": pattern, "temperature": t, "seed": 4, "max_new_tokens": 40}
                                             for t in (0, 0.8, 1.2)])
    for out in outs:
        assert re.fullmatch(pattern, out["text"]), out["text"]


def test_ebnf_output_parses(engine):
    grammar = r"""
    start: expr
    expr: term (("+" | "-") term)*
    term: NUMBER | "(" expr ")"
    NUMBER: /[0-9]{1,3}/
    """
    outs = engine.generate(["Write an arithmetic expression:"] * 2,
                           [{"ebnf": grammar, "temperature": t, "seed": 9, "max_new_tokens": 30} for t in (0, 1.0)])
    parser = Lark(grammar, parser="lalr")
    for out in outs:
        if out["meta_info"]["finish_reason"]["type"] == "stop":
            parser.parse(out["text"])
        else:  # ran out of tokens: still a valid prefix, never an invalid character
            assert re.fullmatch(r"[0-9+\-()]*", out["text"]), out["text"]


def test_constrained_and_free_requests_share_a_batch(engine):
    free = engine.generate("The weather today is", {"temperature": 0, "max_new_tokens": 12})
    outs = engine.generate(["The weather today is", "Pick one:"],
                           [{"temperature": 0, "max_new_tokens": 12}, {"regex": "(sunny|rainy)", "temperature": 0}])
    assert outs[0]["output_ids"] == free["output_ids"]
    assert outs[1]["text"] in ("sunny", "rainy")


def test_json_object_mode(engine):
    # A 135M model may ramble inside an object; every output is an object (prefix), and the
    # ones that finish parse as a dict.
    outs = engine.generate([_prompt(engine, "a city")] * 4,
                           [{"json_schema": {"type": "object"}, "temperature": 1.0, "seed": s,
                             "max_new_tokens": 96} for s in range(4)])
    finished = [o for o in outs if o["meta_info"]["finish_reason"]["type"] == "stop"]
    assert all(o["text"].startswith("{") for o in outs)
    assert finished, [o["text"] for o in outs]
    assert all(isinstance(json.loads(o["text"]), dict) for o in finished)


def test_unique_items_that_run_out_end_the_array(engine):
    """Unique items of a small language (three letters) and a long enum (CFF's licenses),
    compared as texts in the matcher, from the real model, greedy and sampled: each output is
    complete and valid (the model closes these arrays by itself; the comma refused where no
    new item is left is exercised by the walks in test_unique_items)."""
    letters = {"type": "array", "uniqueItems": True, "minItems": 2,
               "items": {"type": "string", "pattern": "^[abc]$"}}
    licenses = {"type": "array", "uniqueItems": True, "minItems": 1,
                "items": {"enum": [f"LIC-{i}" for i in range(100)]}}
    prompts, params, schemas = [], [], []
    for schema, what in ((letters, "a list of many letters, a b c, repeated"), (licenses, "licenses")):
        for seed in (None, 1, 2):
            sampling = {"temperature": 0} if seed is None else {"temperature": 1.0, "seed": seed}
            prompts.append(_prompt(engine, what))
            params.append({"json_schema": schema, "max_new_tokens": 96, **sampling})
            schemas.append(schema)
    for out, schema in zip(engine.generate(prompts, params), schemas):
        assert out["meta_info"]["finish_reason"]["type"] == "stop", out
        validate_with_formats(json.loads(out["text"]), schema)


def test_unsupported_schema_keyword_is_a_clear_error(engine):
    with pytest.raises(ValueError, match="not"):
        engine.generate("x", {"json_schema": {"type": "array", "not": {"uniqueItems": True}}})
    with pytest.raises(ValueError, match="regex"):
        engine.generate("x", {"regex": "(unclosed"})
    assert engine.generate("ok", {"max_new_tokens": 2})["meta_info"]["completion_tokens"] == 2


def test_a_failing_matcher_fails_only_its_request(engine, monkeypatch):
    from constraints import GrammarMatcher
    from sglang_lite.sampling_params import SamplingParams

    boom = engine.scheduler.grammar_backend.compile(SamplingParams.from_dict({"regex": "(boom|bang)"}))
    real = GrammarMatcher.fill_next_token_bitmask

    def flaky(self, *args, **kw):  # compiled and admitted fine; the matcher breaks later
        if self._automaton is boom.automaton:
            raise RuntimeError("matcher exploded")
        return real(self, *args, **kw)

    monkeypatch.setattr(GrammarMatcher, "fill_next_token_bitmask", flaky)
    outs = engine.generate(["a", "b"], [{"regex": "(boom|bang)", "temperature": 0},
                                        {"temperature": 0, "max_new_tokens": 5, "ignore_eos": True}])
    assert outs[0]["meta_info"]["finish_reason"]["type"] == "abort"
    assert "matcher exploded" in outs[0]["meta_info"]["finish_reason"]["message"]
    assert outs[0]["output_ids"] == []
    assert outs[1]["meta_info"]["completion_tokens"] == 5
