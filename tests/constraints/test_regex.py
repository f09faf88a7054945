"""Regex languages as accept/reject sets (byte level, UTF-8), and compile bounds."""

from __future__ import annotations

import time

import pytest

from constraints import CompileTimeoutError, GrammarTooComplexError, InvalidConstraintError
from constraints.budget import CompileBudget
from constraints.regex import regex_to_dfa

CASES = [
    (r"a[0-9]+b", ["a1b", "a0123b"], ["ab", "a1", "a1bb", "b1a"]),
    (r"(cat|dog)s?", ["cat", "dogs"], ["cats!", "do", ""]),
    (r"\d{3}-\d{4}", ["555-1234"], ["55-1234", "555-12345", "５５５-1234"]),
    (r"[A-Za-z_][A-Za-z0-9_]*", ["_x1", "Name"], ["1x", "", "a-b"]),
    (r"x{2,3}", ["xx", "xxx"], ["x", "xxxx"]),
    (r"(ab)*", ["", "ab", "abab"], ["a", "aba"]),
    (r"é|日本", ["é", "日本"], ["e", "日", "本日"]),
    (r"[^a]", ["b", "日", "\n", "😀"], ["a", "bb", ""]),
    (r".{2}", ["ab", "日本", "😀x"], ["a", "\n\n", "abc"]),
    (r"[α-ω]+", ["αβγ", "ω"], ["a", "Ω"]),
    (r"😀+", ["😀", "😀😀"], ["", "😁"]),
    (r"(?i)yes", ["YES", "yEs"], ["no", "ye"]),
    (r"^abc$", ["abc"], ["ab", "abcd"]),
    (r"\\\.", ["\\."], ["\\a", "."]),
    (r"[\w]+@[a-z]+\.com", ["joe_1@mail.com"], ["joe@mail.org", "@a.com"]),
    (r"-?(0|[1-9][0-9]*)(\.[0-9]+)?", ["0", "-12.5", "7"], ["01", "-", "1."]),
]


@pytest.mark.parametrize("pattern,accepts,rejects", CASES)
def test_regex_accepts_and_rejects(pattern, accepts, rejects):
    dfa = regex_to_dfa(pattern, CompileBudget())
    for text in accepts:
        assert dfa.matches(text.encode()), (pattern, text)
    for text in rejects:
        assert not dfa.matches(text.encode()), (pattern, text)


def test_invalid_utf8_never_accepted():
    dfa = regex_to_dfa(r".+", CompileBudget())
    assert dfa.matches("日".encode())
    assert not dfa.matches(b"\xe6\x97")  # truncated character
    assert not dfa.matches(b"\xed\xa0\x80")  # encoded surrogate
    assert not dfa.matches(b"\xc0\xaf")  # overlong


def test_lookaround_is_a_clear_error():
    with pytest.raises(InvalidConstraintError):
        regex_to_dfa(r"(?=a)b", CompileBudget())


def test_pathological_regex_fails_fast():
    alternation = "|".join("a" * i for i in range(1, 200))
    pattern = f"((({alternation}){{1,60}}b){{1,60}})*"
    t0 = time.perf_counter()
    with pytest.raises((GrammarTooComplexError, CompileTimeoutError)):
        regex_to_dfa(pattern, CompileBudget(max_states=5_000, timeout_s=2.0))
    assert time.perf_counter() - t0 < 5.0


def test_state_cap_is_enforced():
    with pytest.raises(GrammarTooComplexError):
        regex_to_dfa(r"[ab]*a[ab]{14}", CompileBudget(max_states=500, timeout_s=10.0))
