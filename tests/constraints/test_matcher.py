"""Matcher behaviour: bitmask layout vs brute force, EOS, rollback, jump-forward, vocabularies."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from constraints import (
    GrammarCompiler,
    TokenizerInfo,
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    bitmask_words,
)
from constraints.bitmask import unpack_bitmask

SMALL_VOCAB = [b"", b"{", b"}", b'"', b"a", b"b", b"ab", b'{"', b'"}', b":", b"1", b"12", b"2",
               b" ", b"\xe6\x97", b"\xa5", "日".encode(), b"x", b'":', b"abab"]
EOS = 0


@pytest.fixture
def small_compiler() -> GrammarCompiler:
    info = TokenizerInfo(list(SMALL_VOCAB) + [b""] * 13, (EOS,), frozenset({EOS}))
    return GrammarCompiler(info)


def _brute_force_row(grammar, matcher_state_text: bytes) -> np.ndarray:
    auto = grammar.automaton
    info = auto.info
    state = auto.advance(auto.initial, matcher_state_text)
    expect = np.zeros(info.vocab_size, dtype=bool)
    for t, data in enumerate(info.token_bytes):
        if data:
            expect[t] = auto.advance(state, data) is not None
    for eos in info.eos_token_ids:
        expect[eos] = auto.is_accepting(state)
    return expect


@pytest.mark.parametrize("pattern", [r'\{"(a|b)+":[0-9]+\}', r"(ab)*日?", r"x|12"])
def test_bitmask_matches_brute_force(small_compiler, pattern):
    g = small_compiler.compile_regex(pattern)
    m = g.matcher()
    bm = allocate_token_bitmask(2, g.vocab_size)
    assert bm.shape == (2, bitmask_words(g.vocab_size)) and bm.dtype == torch.int32
    text = b""
    for _ in range(8):
        m.fill_next_token_bitmask(bm, 1)
        got = unpack_bitmask(bm[1], g.vocab_size)
        assert (got == _brute_force_row(g, text)).all()
        allowed = [t for t in np.nonzero(got)[0].tolist() if t != EOS]
        if not allowed:
            break
        tok = random.Random(len(text)).choice(allowed)
        assert m.accept_token(tok)
        text += SMALL_VOCAB[tok]


def test_bit_layout_is_little_endian_words(small_compiler):
    g = small_compiler.compile_regex("b")
    bm = allocate_token_bitmask(1, g.vocab_size)
    g.matcher().fill_next_token_bitmask(bm, 0)
    assert bm[0, 0].item() == 1 << 5  # only token 5 (b"b")
    assert bm[0, 1].item() == 0


def test_eos_only_where_constraint_can_end(small_compiler):
    g = small_compiler.compile_regex("ab(ab)?")
    m = g.matcher()
    assert not m.accept_token(EOS)
    assert m.accept_token(6) and m.can_terminate() and not m.is_terminated()
    assert m.accept_token(6)
    assert m.is_terminated()  # complete and nothing may follow
    assert not m.accept_token(4)
    assert m.accept_token(EOS) and m.is_terminated()
    bm = allocate_token_bitmask(1, g.vocab_size)
    m.fill_next_token_bitmask(bm, 0)
    assert not bm.any()


def test_rejected_token_leaves_state_unchanged(small_compiler):
    m = small_compiler.compile_regex("ab").matcher()
    assert not m.accept_token(5)
    assert not m.accept_token(31)  # padding id past the tokenizer: never allowed
    assert m.accept_token(4) and m.accept_token(5) and m.can_terminate()


def test_rollback_restores_previous_states(small_compiler):
    m = small_compiler.compile_regex("(ab)+").matcher()
    for tok in (6, 6, EOS):
        assert m.accept_token(tok)
    assert m.is_terminated()
    m.rollback(1)
    assert not m.is_terminated() and m.accept_token(4)
    m.rollback(2)
    assert m.num_accepted == 1 and m.accept_token(19)
    with pytest.raises(ValueError):
        m.rollback(5)


def test_jump_forward_string(small_compiler):
    m = small_compiler.compile_regex(r'\{"name":"(ab|日本)"\}').matcher()
    assert m.find_jump_forward_string() == '{"name":"'
    assert m.accept_string('{"name":"')
    assert m.find_jump_forward_string() == ""
    assert m.accept_string("日")
    assert m.find_jump_forward_string() == '本"}'
    m.rollback(1)
    assert m.accept_token(16) and m.find_jump_forward_string() == '本"}'


def test_jump_forward_stops_inside_a_character(small_compiler):
    m = small_compiler.compile_regex("日|旦").matcher()
    # Both start with byte 0xE6, but a lone lead byte is not a whole character.
    assert m.find_jump_forward_string() == ""


def test_apply_token_bitmask_inplace_reference():
    vocab = 70
    logits = torch.zeros(3, vocab)
    bm = allocate_token_bitmask(2, vocab)
    bm[0].zero_()
    bm[0, 0] = (1 << 3) | -(1 << 31)  # bit 31 is the int32 sign bit
    bm[0, 2] = 1 << 5  # token 69
    apply_token_bitmask_inplace(logits, bm, torch.tensor([2, 0]))
    allowed = torch.isfinite(logits[2]).nonzero().flatten().tolist()
    assert allowed == [3, 31, 69]
    assert torch.isfinite(logits[0]).all() and torch.isfinite(logits[1]).all()


def test_sentencepiece_byte_fallback_vocab():
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "\u2581hello": 3, "▁": 4, "lo": 5,
             **{f"<0x{b:02X}>": 6 + b for b in range(256)}}
    tok = SimpleNamespace(get_vocab=lambda: vocab, added_tokens_decoder={},
                          all_special_ids=[0, 1, 2], eos_token_id=2)
    info = TokenizerInfo.from_huggingface(tok, vocab_size=300)
    assert info.vocab_size == 300 and info.eos_token_ids == (2,)
    assert info.token_bytes[3] == b" hello" and info.token_bytes[4] == b" "
    assert info.token_bytes[6 + 0xE6] == b"\xe6" and info.token_bytes[0] == b""
    g = GrammarCompiler(info).compile_regex(" hello日")
    m = g.matcher()
    assert m.accept_token(3)
    for byte in "日".encode():
        assert m.accept_token(6 + byte)
    assert m.accept_token(2) and m.is_terminated()


def test_smollm2_vocab_bytes(hf_tokenizer, tokenizer_info):
    text = ' {"city": "Zürich", "n": [1, 2]}\n日本'
    ids = hf_tokenizer.encode(text)
    assert b"".join(tokenizer_info.token_bytes[i] for i in ids) == text.encode()
    assert tokenizer_info.eos_token_ids == (hf_tokenizer.eos_token_id,)
    assert all(tokenizer_info.token_bytes[i] == b"" for i in hf_tokenizer.all_special_ids)


def test_smollm2_mask_matches_brute_force_on_sample(compiler, hf_tokenizer, tokenizer_info):
    g = compiler.compile_regex(r'\{"name": "[^"]{1,12}", "tags": \["[a-z]+"(, "[a-z]+")*\]\}')
    text = '{"name": "Zoë", "tags": ["ab", "cd"]}'
    sample = random.Random(0).sample(range(tokenizer_info.vocab_size), 3000)
    m = g.matcher()
    bm = allocate_token_bitmask(1, g.vocab_size)
    prefix = b""
    for tok in hf_tokenizer.encode(text):
        m.fill_next_token_bitmask(bm, 0)
        got = unpack_bitmask(bm[0], g.vocab_size)
        state = g.automaton.advance(0, prefix)
        for t in sample + [tok]:
            data = tokenizer_info.token_bytes[t]
            want = bool(data) and g.automaton.advance(state, data) is not None
            assert got[t] == want, (prefix, data)
        assert m.accept_token(tok)
        prefix += tokenizer_info.token_bytes[tok]
    assert m.can_terminate() and m.accept_token(tokenizer_info.eos_token_ids[0])


@pytest.mark.parametrize("kind", ["regex", "json_schema"])
def test_the_start_mask_is_part_of_the_compile(small_compiler, kind):
    """The first fill reads the start state's row computed at compile (off the scheduler
    thread), and that row is the brute-force one."""
    grammar = (small_compiler.compile_regex(r"(ab)+") if kind == "regex"
               else small_compiler.compile_json_schema({"type": "object", "properties": {"a": {"type": "integer"}}}))
    auto = grammar.automaton
    assert auto.num_cached_masks == 1 and auto.initial in auto._words
    mask = allocate_token_bitmask(1, auto.info.vocab_size)
    grammar.matcher().fill_next_token_bitmask(mask, 0)
    assert auto.num_cached_masks == 1
    got = unpack_bitmask(mask[0], auto.info.vocab_size)
    assert np.array_equal(got, _brute_force_row(grammar, b""))


def test_a_compiled_grammar_survives_the_compile_workers_pickle(small_compiler):
    """The compile worker sends grammars back pickled (with the tokenizer as a reference): a
    pushdown automaton whose start mask, and so its C walker, was built at compile pickles,
    and the copy gives the original's masks along a walk."""
    from constraints.compile_worker import dumps_grammar, loads_grammar

    info = small_compiler.info
    grammar = small_compiler.compile_json_schema({"type": "object", "properties": {"a": {"type": "integer"}},
                                                  "required": ["a"]})
    grammar.matcher().fill_next_token_bitmask(allocate_token_bitmask(1, info.vocab_size), 0)
    copy = loads_grammar(dumps_grammar(grammar, info), info)
    assert copy.automaton.info is info
    one, two = grammar.matcher(), copy.matcher()
    a, b = allocate_token_bitmask(1, info.vocab_size), allocate_token_bitmask(1, info.vocab_size)
    for token in [7, 4, 18, 10, 11, 2]:  # {"  a  ":  1  12  }
        one.fill_next_token_bitmask(a, 0)
        two.fill_next_token_bitmask(b, 0)
        assert torch.equal(a, b) and unpack_bitmask(a[0], info.vocab_size)[token]
        assert one.accept_token(token) and two.accept_token(token)
    assert one.is_terminated() == two.is_terminated()


def test_grammars_from_a_compile_worker_share_their_leaves():
    """Two grammars sent back by a compile worker use the loading process's one object per
    leaf content (the string body, any value), so the walks cached for one serve the other
    instead of each grammar walking the vocabulary for its leaves anew; the any-value leaf,
    marked to be walked whole, is walked in the loading process when it first arrives."""
    from schema_suite_runner import byte_vocab_info

    from constraints.compile_worker import dumps_grammar, loads_grammar

    worker, parent = byte_vocab_info(), byte_vocab_info()  # the two processes' tokenizers
    worker.walks_leaves_whole = False  # as compile_worker.serve sets it
    compiler = GrammarCompiler(worker, cache_size=0)
    sent = [compiler.compile_json_schema({"type": "object", "properties": {name: {"type": "string"}, "x": {}},
                                          "required": [name]}) for name in ("first", "second")]
    assert len(worker.leaf_walks) < 300  # the worker left the any-value leaf to the parent
    one, two = (loads_grammar(dumps_grammar(g, worker), parent) for g in sent)
    shared = [r for r in one.automaton.rules if any(r is s for s in two.automaton.rules)]
    assert len(shared) >= 2  # the string body and the any-value leaf at least
    walked = len(parent.leaf_walks)
    assert walked > 300  # the any-value leaf's states, walked at the first load
    for grammar, name in ((one, "first"), (two, "second")):
        m = grammar.matcher()
        assert m.accept_string(f'{{"{name}":"some text')
        grammar.automaton.mask_row(m._state)
        if name == "first":
            walked = len(parent.leaf_walks)
    assert len(parent.leaf_walks) == walked  # the second grammar's string reused the first's walk
