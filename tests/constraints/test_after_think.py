"""A constraint after a reasoning block: one automaton, an optional (or already opened)
``<think> ... </think>`` and then the schema. Languages as accept/reject sets, and token masks
against a brute-force walk of the vocabulary (tokens crossing from the block into the schema
included)."""

from __future__ import annotations

import numpy as np
import pytest

from constraints.after_think import think_prefix_dfa
from constraints.bitmask import unpack_bitmask

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
          "additionalProperties": False}


def _accepts(grammar, text: str) -> bool:
    auto = grammar.automaton
    state = auto.advance(auto.initial, text.encode())
    return state is not None and auto.is_accepting(state)


@pytest.mark.parametrize("mode, text, ok", [
    ("optional", '{"a":1}', True),  # no block: thinking off
    ("optional", '<think>hmm</think>{"a":1}', True),
    ("optional", '<think></think>\n\n{"a":12}', True),
    ("optional", '<think>a </b> </thinx> <think> </think {"a":0}</think>\n{"a":2}', True),
    ("optional", '<think>x</think>junk', False),
    ("optional", 'hello{"a":1}', False),
    ("optional", '<think>still thinking {"a":1}', False),  # never closed
    ("optional", '{"a":1}<think>', False),
    ("optional", '</think>{"a":1}', False),
    ("optional", '<think>x</think>{"a":1}</think>', False),
    ("open", 'reasoning</think>{"a":1}', True),
    ("open", '</think>\n{"a":1}', True),
    ("open", '{"a":1}', False),  # the opened block must close first
    ("open", '<think>x</think>', False),
])
def test_language(compiler, mode, text, ok):
    grammar = compiler.compile_after_think(compiler.compile_json_schema(SCHEMA), mode)
    assert _accepts(grammar, text) is ok


def test_prefix_dfa_is_small_and_exact():
    dfa = think_prefix_dfa("optional")
    assert dfa.num_states == len("<think>") + len("</think>") + 1
    assert dfa.matches(b"") and dfa.matches(b"<think>x</think>  ") and not dfa.matches(b"<think>x</think")
    with pytest.raises(ValueError, match="mode"):
        think_prefix_dfa("sometimes")


def _brute_force(auto, state, info) -> np.ndarray:
    expect = np.zeros(info.vocab_size, dtype=bool)
    for t, data in enumerate(info.token_bytes):
        if data and t not in info.special_token_ids:
            expect[t] = auto.advance(state, data) is not None
    for eos in info.eos_token_ids:
        expect[eos] = auto.is_accepting(state)
    return expect


@pytest.mark.parametrize("mode, text", [
    ("optional", ""), ("optional", "<think>ab</"), ("optional", "<think>ab</think>"),
    ("optional", "<think>ab</think>\n"), ("optional", '<think>x</think>{"a"'), ("open", "ab</think"),
])
def test_masks_match_brute_force(compiler, tokenizer_info, mode, text):
    grammar = compiler.compile_after_think(compiler.compile_json_schema(SCHEMA), mode)
    auto = grammar.automaton
    state = auto.advance(auto.initial, text.encode())
    got = unpack_bitmask(auto.mask_row(state), tokenizer_info.vocab_size)
    expect = _brute_force(auto, state, tokenizer_info)
    assert (got == expect).all(), np.nonzero(got != expect)[0][:10]
    if text.endswith("</think>"):  # a token may cross from the block into the schema
        crossing = [t for t, d in enumerate(tokenizer_info.token_bytes) if d and expect[t] and d[:1] in b"\n{"]
        assert crossing
