"""Lark EBNF grammars and choices as token automata."""

from __future__ import annotations

import pytest

from constraints import InvalidConstraintError, allocate_token_bitmask
from constraints.bitmask import unpack_bitmask

ARITH = r"""
start: expr
?expr: term (("+" | "-") term)*
?term: atom (("*" | "/") atom)*
?atom: NUMBER | NAME | "(" expr ")"
NAME: /[a-z_]+/
NUMBER: /[0-9]+/
%ignore " "
"""

JSON_GRAMMAR = r"""
start: value
?value: object | array | ESCAPED_STRING | SIGNED_NUMBER | "true" | "false" | "null"
array  : "[" [value ("," value)*] "]"
object : "{" [pair ("," pair)*] "}"
pair   : ESCAPED_STRING ":" value
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
"""


@pytest.mark.parametrize("text,ok", [
    ("1+2*x", True), ("(a + 12) * b", True), ("((1))", True), ("1+", False), ("(1", False),
    ("1 2", False), ("*1", False), ("a+-b", False),
])
def test_arith_grammar_accepts_and_rejects(compiler, text, ok):
    m = compiler.compile_ebnf(ARITH).matcher()
    assert (m.accept_string(text) and m.can_terminate()) == ok


def test_tokens_span_several_terminals(compiler, hf_tokenizer, tokenizer_info):
    g = compiler.compile_ebnf(JSON_GRAMMAR)
    text = '{"a": [1, 2.5, {"b": null}], "c": "x y"}'
    m = g.matcher()
    bm = allocate_token_bitmask(1, g.vocab_size)
    for tok in hf_tokenizer.encode(text):
        m.fill_next_token_bitmask(bm, 0)
        assert unpack_bitmask(bm[0], g.vocab_size)[tok], tokenizer_info.token_bytes[tok]
        assert m.accept_token(tok)
    assert m.can_terminate() and m.accept_token(tokenizer_info.eos_token_ids[0])
    m.fill_next_token_bitmask(bm, 0)
    assert not bm.any()


def test_ebnf_mask_matches_advance(compiler, tokenizer_info):
    g = compiler.compile_ebnf(ARITH)
    m = g.matcher()
    assert m.accept_string("(ab")
    bm = allocate_token_bitmask(1, g.vocab_size)
    m.fill_next_token_bitmask(bm, 0)
    got = unpack_bitmask(bm[0], g.vocab_size)
    state = g.automaton.advance(g.automaton.initial, b"(ab")
    for t in range(0, tokenizer_info.vocab_size, 7):
        data = tokenizer_info.token_bytes[t]
        assert got[t] == (bool(data) and g.automaton.advance(state, data) is not None), data


def test_ebnf_jump_forward_and_errors(compiler):
    g = compiler.compile_ebnf('start: "SELECT " NAME " FROM " NAME\nNAME: /[a-z]+/')
    m = g.matcher()
    assert m.find_jump_forward_string() == "SELECT "
    assert m.accept_string("SELECT x")
    assert m.find_jump_forward_string() == ""
    assert m.accept_string(" ")
    assert m.find_jump_forward_string() == "FROM "
    with pytest.raises(InvalidConstraintError):
        compiler.compile_ebnf("start: undefined_rule")


def test_choices(compiler, hf_tokenizer, tokenizer_info):
    g = compiler.compile_choices(["yes", "no", "maybe (?)"])
    for text in ("yes", "no", "maybe (?)"):
        m = g.matcher()
        assert all(m.accept_token(t) for t in hf_tokenizer.encode(text)) and m.can_terminate()
    m = g.matcher()
    assert not m.accept_string("yesno")
    assert g.matcher().find_jump_forward_string() == ""
    assert compiler.compile_choices(["only"]).matcher().find_jump_forward_string() == "only"
    with pytest.raises(InvalidConstraintError):
        compiler.compile_choices([])
