"""Constrained outputs are complete and valid within max_new_tokens, on the embedded model:
every budget from the constraint's minimum up to three times it, greedy and sampled; a
smaller budget is refused at admission; compiles never run on the scheduler thread, and
masks filled while the model runs change nothing."""

from __future__ import annotations

import json
import re
import threading

import jsonschema
import pytest

from constraints import GrammarCompiler, GrammarMatcher
from sglang_lite import Engine

SCHEMAS = {
    "tree": {"type": "object",
             "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#"}}},
             "required": ["v", "kids"]},
    "string": {"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]},
}
SHORTEST = {"tree": '{"v":0,"kids":[]}', "string": '{"s":""}'}
# Asks for more than any budget here holds: the model would nest / write on past the end.
PROMPTS = {"tree": "Write a JSON tree of numbers, every node with three children, five levels deep.",
           "string": "Write a very long story (at least 500 words) as JSON."}


def _minimum(engine: Engine, schema: dict) -> int:
    """The minimum the engine states when it refuses a budget of one token."""
    with pytest.raises(ValueError, match=r"^max_new_tokens: 1 is too few") as e:
        engine.generate("x", {"json_schema": schema, "max_new_tokens": 1})
    return int(re.search(r"at least (\d+)", str(e.value)).group(1))


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_budgets_below_the_minimum_are_refused(engine, tokenizer, name):
    need = _minimum(engine, SCHEMAS[name])
    # At most the tokenizer's own spelling of a shortest valid document.
    assert 2 <= need <= len(tokenizer.encode(SHORTEST[name], add_special_tokens=False))
    with pytest.raises(ValueError, match=rf"max_new_tokens: {need - 1} .*at least {need}"):
        engine.generate("x", {"json_schema": SCHEMAS[name], "max_new_tokens": need - 1})
    out = engine.generate("x", {"json_schema": SCHEMAS[name], "max_new_tokens": need, "temperature": 0})
    jsonschema.validate(json.loads(out["text"]), SCHEMAS[name])


def test_a_schema_no_value_satisfies_is_refused_at_admission(engine):
    """A schema no value satisfies (Kubernetes' Quantity: an object that must be a string or a
    number) is a clear error naming the field, and the engine goes on serving."""
    schema = {"type": "object", "additionalProperties": False, "oneOf": [{"type": "string"}, {"type": "number"}]}
    with pytest.raises(ValueError, match=r"^json_schema: no output satisfies this constraint") as e:
        engine.generate("x", {"json_schema": schema, "max_new_tokens": 8})
    assert e.value.field == "json_schema"
    out = engine.generate("x", {"json_schema": {"type": "integer"}, "max_new_tokens": 8, "temperature": 0})
    int(out["text"])


@pytest.mark.parametrize("temperature", [0, 0.9])
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_every_budget_from_the_minimum_to_three_times_it_gives_valid_json(engine, name, temperature):
    schema = SCHEMAS[name]
    need = _minimum(engine, schema)
    budgets = list(range(need, 3 * need + 1))
    prompt = engine.apply_chat_template([{"role": "user", "content": PROMPTS[name]}])
    outs = engine.generate([prompt] * len(budgets),
                           [{"json_schema": schema, "max_new_tokens": b, "temperature": temperature,
                             "seed": b} for b in budgets])
    for budget, out in zip(budgets, outs):
        meta = out["meta_info"]
        assert meta["completion_tokens"] <= budget
        assert meta["finish_reason"]["type"] == "stop", (budget, out["text"])
        jsonschema.validate(json.loads(out["text"]), schema)
    # The budget was the limit, not the model's own choice: the largest ones use most of it.
    assert max(o["meta_info"]["completion_tokens"] for o in outs) > 2 * need


def test_the_scheduler_thread_never_compiles(engine, monkeypatch):
    """The grammar is compiled at intake, on the caller's thread; the scheduler only makes
    its matcher, so it works even when the compile cache is emptied right after admission."""
    threads = []
    real = GrammarCompiler._cached

    def spy(self, key, build):
        threads.append(threading.current_thread().name)
        return real(self, key, build)

    monkeypatch.setattr(GrammarCompiler, "_cached", spy)
    stream = engine.generate("Pick:", {"regex": "(left|right) [0-9]{2}", "max_new_tokens": 12}, stream=True)
    engine.scheduler.grammar_backend.compiler.clear_cache()
    text = "".join(chunk["text"] for chunk in stream)
    assert re.fullmatch("(left|right) [0-9]{2}", text), text
    assert threads == [threading.current_thread().name]


@pytest.fixture(scope="module")
def serial_masks_engine(model_dir):
    eng = Engine(overlap_grammar_masks=False)
    yield eng
    eng.shutdown()


def test_masks_filled_while_the_model_runs_change_nothing(engine, serial_masks_engine, monkeypatch):
    threads = set()
    real = GrammarMatcher.fill_next_token_bitmask

    def spy(self, *args, **kw):
        threads.add(threading.current_thread().name)
        return real(self, *args, **kw)

    monkeypatch.setattr(GrammarMatcher, "fill_next_token_bitmask", spy)
    prompt = engine.apply_chat_template([{"role": "user", "content": PROMPTS["tree"]}])
    params = [{"json_schema": SCHEMAS["tree"], "max_new_tokens": 24, "temperature": t, "seed": 3}
              for t in (0, 0.9)] + [{"max_new_tokens": 8, "temperature": 0}]
    overlapped = engine.generate([prompt] * 3, params)
    assert {t.split("_")[0] for t in threads} == {"sglang-lite-masks"}
    threads.clear()
    serial = serial_masks_engine.generate([prompt] * 3, params)
    assert threads == {"sglang-lite-scheduler"}
    assert [o["output_ids"] for o in overlapped] == [o["output_ids"] for o in serial]
