"""GrammarBackend on its own: the embedded model's real tokenizer and the real constraint
compiler, requests driven through admit / attach / fill_bitmask / accept / jump_forward as the
scheduler drives them; no engine, no scheduler thread."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from constraints.bitmask import unpack_bitmask
from sglang_lite.errors import ConstraintRefused, InvalidRequest
from sglang_lite.grammar import GrammarBackend
from sglang_lite.outputs import FinishReason
from sglang_lite.request import Req
from sglang_lite.sampling_params import SamplingParams

VOCAB = 49152


@pytest.fixture(scope="module")
def tok(model_dir):
    return AutoTokenizer.from_pretrained(str(model_dir))


@pytest.fixture(scope="module")
def backend(tok):
    b = GrammarBackend(tok, VOCAB, (tok.eos_token_id,), jump_forward=True)
    yield b
    b.close()


def _req(backend: GrammarBackend, **params) -> Req:
    sampling = SamplingParams.from_dict(params)
    req = Req("r", [1, 2, 3], sampling, seed=0, on_output=None,
              compiled_grammar=backend.admit(sampling) if sampling.constraint else None)
    backend.attach(req)
    return req


def _allowed(mask_row: torch.Tensor) -> set[int]:
    return {int(t) for t in np.flatnonzero(unpack_bitmask(mask_row, VOCAB))}


def test_rows_allow_exactly_the_tokens_the_constraint_can_continue_with(backend, tok):
    free, digits = _req(backend), _req(backend, regex="[0-9]+")
    mask = backend.fill_bitmask([free, digits], [16, 16])
    assert mask.shape[0] == 2 and bool((mask[0] == -1).all())  # unconstrained: every token
    allowed = _allowed(mask[1])
    assert allowed and all(tok.decode([t]).isdigit() for t in allowed)
    assert tok.encode("7", add_special_tokens=False)[0] in allowed
    assert backend.fill_bitmask([free], [16]) is None  # nothing constrained: no mask at all


def test_accept_finishes_on_completion_and_aborts_on_a_rejected_token(backend, tok):
    req = _req(backend, regex="yes|no")
    (yes,) = tok.encode("yes", add_special_tokens=False)
    assert backend.accept(req, yes) == FinishReason.stop(yes)
    other = _req(backend, regex="yes|no")
    (x,) = tok.encode("x", add_special_tokens=False)
    reason = backend.accept(other, x)
    assert reason.is_abort and "rejected by the grammar" in reason.message


def test_jump_forward_appends_the_forced_text(backend, tok):
    req = _req(backend, json_schema={"type": "object", "properties": {"answer": {"type": "integer"}},
                                     "required": ["answer"]})
    first = tok.encode("{", add_special_tokens=False)
    assert backend.accept(req, first[0]) is None
    ids = backend.jump_forward(req, first[0], limit=16)
    assert tok.decode(ids) == '{"answer":'  # the key is the only way on


def test_a_refused_schema_keyword_is_typed_with_its_keyword_and_pointer(backend):
    schema = {"type": "object", "properties": {"a": {"type": "string", "not": {"format": "date"}}}}
    with pytest.raises(ConstraintRefused) as info:
        backend.admit(SamplingParams.from_dict({"json_schema": schema}))
    e = info.value
    assert (e.field, e.reason, e.keyword, e.pointer) == ("json_schema", "unsupported", "not", "/properties/a/not")
    assert str(e).startswith("json_schema: JSON Schema keyword 'not' at /properties/a/not")


@pytest.mark.parametrize("params,field,reason,code", [
    ({"regex": "(unclosed"}, "regex", "invalid", "invalid_value"),
    ({"regex": "a{1,100000}"}, "regex", "limit", "constraint_too_large"),
    ({"json_schema": json.dumps({"type": "object", "properties": {"a": {"$ref": "#/nope"}}})},
     "json_schema", "invalid", "invalid_value"),
])
def test_refusals_name_the_field_and_the_reason(backend, params, field, reason, code):
    with pytest.raises(ConstraintRefused) as info:
        backend.admit(SamplingParams.from_dict(params))
    assert (info.value.field, info.value.reason, info.value.code) == (field, reason, code)


def test_a_budget_below_the_shortest_output_is_refused_before_admission(backend):
    schema = {"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]}
    with pytest.raises(InvalidRequest) as info:
        backend.admit(SamplingParams.from_dict({"json_schema": schema, "max_new_tokens": 3}))
    assert info.value.field == "max_new_tokens" and "at least 4" in str(info.value)
