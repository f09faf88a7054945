"""Incremental detokenization: deltas add up to the full decode and never carry a broken
UTF-8 character, even when one character spans several byte-level tokens."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from sglang_lite.detokenizer import IncrementalDetokenizer


@pytest.fixture(scope="module")
def tok(model_dir):
    return AutoTokenizer.from_pretrained(str(model_dir))


@pytest.mark.parametrize("text", ["Hello world, plain ASCII.", "Emoji 🐱🚀 and café, naïve, 日本語です。",
                                  "Mixed: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∑ x² ≤ ∞"])
def test_deltas_reassemble_the_text_without_broken_characters(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    # At least one character must really be split across tokens for the non-ASCII cases.
    if not text.isascii():
        assert any("\ufffd" in tok.decode([i]) for i in ids)
    detok = IncrementalDetokenizer(tok, prompt_ids=tok.encode("Prompt:"))
    deltas = [detok.step([i]) for i in ids]
    deltas.append(detok.flush())
    assert "".join(deltas) == tok.decode(ids)
    assert all("\ufffd" not in d for d in deltas)


def test_flush_emits_a_dangling_partial_character(tok):
    ids = tok.encode("🐱", add_special_tokens=False)
    detok = IncrementalDetokenizer(tok, prompt_ids=[])
    assert detok.step(ids[:1]) == ""  # half a character: held back
    assert detok.flush() == tok.decode(ids[:1])  # generation ended there: emit what we have


def test_special_tokens_are_skipped(tok):
    eos = tok.eos_token_id
    detok = IncrementalDetokenizer(tok, prompt_ids=[], skip_special_tokens=True)
    text = "".join(detok.step([i]) for i in tok.encode("Hi", add_special_tokens=False) + [eos])
    assert text == "Hi"
