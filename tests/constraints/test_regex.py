"""Regex languages as accept/reject sets (byte level, UTF-8), and compile bounds."""

from __future__ import annotations

import itertools
import random
import re
import time

import numpy as np
import pytest

from constraints import CompileTimeoutError, GrammarTooComplexError, InvalidConstraintError
from constraints.budget import CompileBudget
from constraints.fsm import DEAD, ByteDFA, trim_and_minimize
from constraints.regex import regex_to_dfa, search_dfa

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
    # ECMA-262 escapes JSON Schema patterns use: code points, surrogate pairs, general categories
    (r"\u00e9+\u{1F600}", ["é😀", "éé😀"], ["e😀", "é"]),
    (r"[\u0041-\u0043\-]+", ["AB-C"], ["AD", "a"]),
    (r"\uD83D\uDE00", ["😀"], ["x", "\ufffd"]),
    (r"\\u0041", ["\\u0041"], ["A"]),  # an escaped backslash, then the letters
    (r"[^\s\p{Cc}]+", ["AB", "é日"], ["A B", "A\x01", "\x85", "\x7f"]),  # CircleCI's orb names
    (r"\p{Lu}\p{Ll}+", ["Ába", "Ωμ"], ["aba", "ÁB", "A1"]),
    (r"\P{L}+", ["12 !", "٣"], ["a1", "日"]),
    (r"\p{General_Category=Decimal_Number}\p{gc=Letter}", ["٣a", "7日"], ["a7", "½a"]),
    (r"^\p{ASCII}+$", ["a~\x7f"], ["é", "a日"]),  # binary properties of a fixed range (AWS's KMS ids)
    (r"^\P{ASCII}\p{Any}$", ["éa", "日😀"], ["aa"]),
    (r"\A[a-z]{1,3}\Z", ["ab"], ["abcd", ""]),  # Python's string anchors (AWS's schemas)
    (r"^(^\$\{P\.[a-z]+\}$)$", ["${P.ab}"], ["x${P.ab}", "${P.ab}x"]),  # anchors repeated inside (AWS)
    (r"^(?:(^a|b\$))$", ["a", "b$"], ["ba"]),  # an escaped dollar is not an anchor
    # UTF-16 code units in a class (AWS MediaConnect): no character is one; no "-" added either
    (r"[a-z\uD83C-\uDBFF\uDC00-\uDFFF]+", ["ab"], ["😀", "-", "a-b"]),
    (r"^[a-z]+\Z$", ["ab"], ["a1"]),
    (r"^a\\Z$", ["a\\Z"], ["a"]),  # an escaped backslash, then Z
]


@pytest.mark.parametrize("pattern,accepts,rejects", CASES)
def test_regex_accepts_and_rejects(pattern, accepts, rejects):
    dfa = regex_to_dfa(pattern, CompileBudget())
    for text in accepts:
        assert dfa.matches(text.encode()), (pattern, text)
    for text in rejects:
        assert not dfa.matches(text.encode()), (pattern, text)


@pytest.mark.parametrize("pattern", [r"\p{Latin}", r"[\P{L}x]", r"\u{110000}", r"\uDE00"])
def test_unicode_escapes_we_do_not_read_are_a_clear_error(pattern):
    """Scripts (not general categories), a negated property inside a class, a code point past
    Unicode or a lone surrogate: refused, never read as something else."""
    with pytest.raises(InvalidConstraintError, match="unsupported or invalid regex"):
        regex_to_dfa(pattern, CompileBudget())


def test_invalid_utf8_never_accepted():
    dfa = regex_to_dfa(r".+", CompileBudget())
    assert dfa.matches("日".encode())
    assert not dfa.matches(b"\xe6\x97")  # truncated character
    assert not dfa.matches(b"\xed\xa0\x80")  # encoded surrogate
    assert not dfa.matches(b"\xc0\xaf")  # overlong


def test_groups_of_lookaheads_in_a_row_are_built_once_each():
    """Each alternative of a group shares the rest after it: built once, not once per way
    through the groups before (2^24 sequences here, past any compile budget)."""
    dfa = regex_to_dfa("((?=a)a|b)" * 24, CompileBudget())
    assert dfa.matches(b"ab" * 12) and not dfa.matches(b"ab" * 11) and not dfa.matches(b"c" * 24)


@pytest.mark.parametrize("pattern", [r"(?<=a)b", r"x(?<!y).", r"^(?:(?!--)[a-z-])+$"])
def test_lookbehinds_and_quantified_lookaheads_are_a_clear_error(pattern):
    with pytest.raises(InvalidConstraintError):
        regex_to_dfa(pattern, CompileBudget())


@pytest.mark.parametrize("pattern", [
    r"a(?=b)b", r"x(?!y).", r"^(a|(?!ab)[a-z]{2})$", r"[a-z]+(?=.*q$)[a-z.]*",
    r"^(\*\.)?(?![-.*])[^*]{1,}\.(\*|(?!.*--)(?=.*[a-zA-Z])[^*]{1,}[^*-])$",  # CloudFormation's domains
    r"(?!ab)[a-c]+", r"b(?=a)", r"^(?=.*\.)[a-z.]+(?!q)$",
])
def test_lookaheads_anywhere_match_python_re(pattern):
    """A lookahead past the start tests the rest of the text (past the groups it sits in),
    so a search's own padding counts too: full matches and searches as Python's re."""
    full, search = regex_to_dfa(pattern, CompileBudget()), search_dfa(pattern, CompileBudget())
    want = re.compile(pattern)
    rng = random.Random(1)
    texts = {"".join(rng.choice("abcq.*-xyZ") for _ in range(rng.randint(0, 8))) for _ in range(6000)}
    wrong = [t for t in texts if full.matches(t.encode()) != (want.fullmatch(t) is not None)
             or search.matches(t.encode()) != (want.search(t) is not None)]
    assert not wrong, wrong[:5]


@pytest.mark.parametrize("pattern", [
    r"(?!^[-+.]*$)[+-]?0*\d*\.?\d*",  # Pydantic's Decimal pattern
    r"(?=.*[0-9])(?=.*[a-z])[a-z0-9.]{2,6}",  # password-style rules
    r"(?!ab)[ab.]*",
    r"(?=a|b.)(?!(bb|aa)$)[ab]{0,4}",
])
def test_leading_lookaheads_match_python_re(pattern):
    # Lookaheads at the start narrow the language: an intersection (?=) or difference (?!).
    dfa = regex_to_dfa(pattern, CompileBudget())
    want = re.compile(pattern)
    alphabet = "ab01.+-z9"
    rng = random.Random(0)
    texts = {"", "."} | {"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 7))) for _ in range(3000)}
    wrong = [t for t in texts if dfa.matches(t.encode()) != (want.fullmatch(t) is not None)]
    assert not wrong, wrong[:5]


@pytest.mark.parametrize("pattern", [
    r"^(?!.*\bnative\b)[a-zA-Z][a-zA-Z0-9_]*(\.[a-zA-Z][a-zA-Z0-9_]*)+$",  # Expo's Android package names
    r"\bab\b", r"a\b", r"\b", r"\Ba\B", r"x\B.", r"(a|\.)\b(b|\.)", r"^\b(ab|\.)+$", r"[\b]a",
    r"^(?!.*\bab\b)[abx_. ]+", r"(x|a\b)(\.|b)",
])
def test_word_boundaries_match_python_re(pattern):
    """\\b where the characters either side differ in being word characters (ASCII letters,
    digits, _; the text's ends and other characters are not), \\B where they do not: full
    matches and searches as Python's re with ASCII classes (ECMA-262's \\w); inside a
    class, \\b is a backspace."""
    full, search = regex_to_dfa(pattern, CompileBudget()), search_dfa(pattern, CompileBudget())
    want = re.compile(pattern, re.ASCII)
    rng = random.Random(2)
    texts = {"", "com.native.app", "my.native", "x.native_b", "native"} | {
        "".join(rng.choice(["a", "b", "x", "_", ".", " ", "é", "\b", "native"]) for _ in range(rng.randint(0, 6)))
        for _ in range(4000)}
    wrong = [t for t in texts if full.matches(t.encode()) != (want.fullmatch(t) is not None)
             or search.matches(t.encode()) != (want.search(t) is not None)]
    assert not wrong, wrong[:5]


@pytest.mark.parametrize("pattern", [r"(\ba)+", r"x(?=.*\bq)", r"x(?=a)b\b", r"(?!.*\bab\b)[ab]+"])
def test_word_boundaries_we_cannot_read_exactly_are_a_clear_error(pattern):
    """Under a quantifier, or in or after a lookahead past the text's start (whose product
    does not see the characters before it; an unanchored search tests its lookaheads
    wherever a match starts)."""
    with pytest.raises(InvalidConstraintError, match="word boundary"):
        regex_to_dfa(pattern, CompileBudget())
        search_dfa(pattern, CompileBudget())


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


def test_minimizing_an_all_accepting_automaton_keeps_its_language():
    # Every state accepts, yet two states differ ('b' is allowed only before the first 'a'):
    # the refinement must start from one class, not from "accepting" and an empty "rejecting".
    trans = np.full((2, 256), DEAD, dtype=np.int32)
    trans[0, ord("a")], trans[0, ord("b")], trans[1, ord("a")] = 1, 0, 1
    dfa = trim_and_minimize(ByteDFA(trans, np.array([True, True])))
    assert dfa.num_states == 2
    for text, ok in [(b"", True), (b"bba", True), (b"aaa", True), (b"ab", False)]:
        assert dfa.matches(text) == ok, text


_TIME_ZONES = "UTC|" + "|".join(f"({area}/[A-Za-z]+)" for area in (
    "Africa", "America", "Antarctica", "Arctic", "Asia", "Atlantic", "Australia", "Europe",
    "Indian", "Pacific"))


@pytest.mark.parametrize("pattern", [_TIME_ZONES, r"^ab|cd$|x+y+", r"ab$|^c", r"(foo|bar)[0-9]+|baz", r"[a-c]\Z", r"\Ab[a-c]",
                                     r"(^ab[a-c]*$)", r"(?:^c[a-z]$)", r"(^a\$)",
                                     r"(^ab[a-c]*$)|(^c[a-z]$)|^$|[/é]", r"(^foo)|(baz$)|(?:^xy$)"])
def test_search_patterns_match_python_re_search(pattern):
    # JSON Schema's pattern is a search. Once an unanchored-end alternative has matched, any
    # text may follow: the search automaton stays small however many looping alternatives it
    # is still inside (the time-zone pattern of a real schema was over 20,000 states).
    dfa = search_dfa(pattern, CompileBudget(max_states=2_000, timeout_s=5.0))
    assert dfa.num_states < 200
    want = re.compile(pattern)
    rng = random.Random(1)
    pieces = ["UTC", "Asia/", "Europe/Paris", "ab", "cd", "xy", "foo7", "baz", "c", "é", " ", "/"]
    texts = {"".join(rng.choice(pieces) for _ in range(rng.randint(0, 5))) for _ in range(3000)}
    texts |= {t[:k] for t in list(texts)[:500] for k in range(len(t))}
    wrong = [t for t in texts if dfa.matches(t.encode()) != (want.search(t) is not None)]
    assert not wrong, wrong[:5]


def test_minimization_is_exact_when_every_refinement_key_collides(monkeypatch):
    # Refinement keys are int64 hashes; a collision must not merge states that differ.
    from constraints import fsm

    pattern = r"(ab|cd)[0-9]{2,4}(x|yz)?"
    want = regex_to_dfa(pattern, CompileBudget())
    monkeypatch.setattr(fsm, "_hashed_keys", lambda cls, succ: np.zeros(len(cls), dtype=np.int64))
    got = regex_to_dfa(pattern, CompileBudget())
    assert got.num_states == want.num_states
    rng = random.Random(2)
    texts = {"".join(rng.choice("abcd0189xyz") for _ in range(rng.randint(0, 9))) for _ in range(4000)}
    assert all(got.matches(t.encode()) == (re.fullmatch(pattern, t) is not None) for t in texts)


def test_heap_and_level_distances_agree(monkeypatch):
    # Small graphs take a heap, large ones Dial's buckets: the same distances either way.
    from constraints import completion

    monkeypatch.setattr(completion, "_HEAP_MAX_EDGES", -1)  # backward_distances: buckets
    rng = np.random.default_rng(3)
    for n in (5, 60, 400):
        src = rng.integers(0, n, size=3 * n)
        dst = rng.integers(0, n, size=3 * n)
        weight = rng.integers(0, 5, size=3 * n)  # zero weights too (json_leaves.counted_pattern)
        accept = rng.random(n) < 0.1
        heap = completion._heap_distances(n, src, dst, weight, accept)
        levels = completion.backward_distances(n, src, dst, weight, accept)
        assert (heap == levels).all()
        assert (heap[accept] == 0).all()


def test_subset_moves_partition_the_bytes_by_target_set():
    # determinize's byte ranges: each byte maps to exactly the NFA targets of the edges
    # covering it, and bytes no edge covers appear in no range.
    from constraints.fsm import _moves
    from constraints.nfa import NFA

    rng = random.Random(4)
    for _ in range(500):
        nfa = NFA(CompileBudget())
        for _ in range(5):
            nfa.new_state()
        for s in range(5):
            for _ in range(rng.randint(0, 4)):
                lo = rng.randint(0, 255)
                nfa.add_edge(s, lo, min(255, lo + rng.choice([0, 2, 30, 255])), rng.randint(0, 4))
        members = frozenset(rng.sample(range(5), rng.randint(1, 3)))
        edges, _ = nfa.adjacency()
        want = [frozenset(d for s in members for lo, hi, d in edges[s] if lo <= b <= hi) for b in range(256)]
        got = [frozenset()] * 256
        for lo, hi, targets in _moves(edges, members):
            assert targets
            for b in range(lo, hi + 1):
                got[b] = targets
        assert got == want


def test_a_lookahead_belongs_to_its_own_alternative():
    """^(?![0-9_])\\w+$|^_\\w*[a-z0-9]\\w*$ (an AWS name): the lookahead tests the first
    alternative only; each alternative is built on its own and their union taken."""
    pattern = r"^(?![0-9_])\w+$|^_\w*[a-zA-Z0-9]\w*$"
    dfa = search_dfa(pattern, CompileBudget())
    texts = ["abc", "1ab", "_a", "_", "__", "a_1", "_1", "", "a b", "_9_"]
    assert [dfa.matches(t.encode()) for t in texts] == [re.search(pattern, t) is not None for t in texts]


@pytest.mark.parametrize("pattern", [r"(?!^[0-9]+$)([a-zA-Z0-9-_' ']+)", r"(?=^a)b*", r"(?!^ab)(?!^c$)[a-c]c"])
def test_an_unanchored_lookahead_that_begins_with_a_caret(pattern):
    """AWS's resource names: a lookahead anchored at the start holds only where the search
    starts at 0, so the search is the anchored pattern's, or, past the first character (a
    negative lookahead then always holds), the rest's alone; as Python's re.search."""
    dfa = search_dfa(pattern, CompileBudget())
    texts = ["".join(t) for n in range(4) for t in itertools.product("a1bc !é", repeat=n)]
    wrong = [t for t in texts if dfa.matches(t.encode()) != (re.search(pattern, t) is not None)]
    assert not wrong, wrong[:5]



def test_the_unicode_category_table_is_unicodedata_in_maximal_runs():
    """\\p{..} reads one table of runs per category (built once a process): every code point
    but the surrogates in exactly one category's runs, each run's ends of that category and
    its neighbours not, and each major class (L, N, ...) the union of its categories."""
    import unicodedata

    from constraints.regex import _categories

    table = _categories()
    minor = {k: v for k, v in table.items() if len(k) == 2}
    covered = np.zeros(0x110000, dtype=np.int32)
    for runs in minor.values():
        for a, b in runs:
            covered[a:b + 1] += 1
    assert (covered[:0xD800] == 1).all() and (covered[0xE000:] == 1).all()
    assert not covered[0xD800:0xE000].any()
    for k, runs in minor.items():
        for a, b in runs:
            assert unicodedata.category(chr(a)) == k == unicodedata.category(chr(b))
            for p in (a - 1, b + 1):
                if 0 <= p < 0x110000 and not 0xD800 <= p < 0xE000:
                    assert unicodedata.category(chr(p)) != k
    for major in {k[0] for k in minor}:
        want, got = np.zeros(0x110000, dtype=bool), np.zeros(0x110000, dtype=bool)
        for k, runs in minor.items():
            for a, b in runs if k[0] == major else ():
                want[a:b + 1] = True
        for a, b in table[major]:
            got[a:b + 1] = True
        assert (want == got).all(), major


@pytest.mark.parametrize("pattern", [r"^\P{C}*$", r"^\P{Cn}{1,3}$", r"a\P{L}b"])
def test_a_negated_category_is_the_class_of_everything_else(pattern):
    """\\P{X} of a category holding most code points is written as the class of the characters
    outside it (interegular lists a class's every character); the automaton is the one of
    [^X] spelled out over X's ranges."""
    from constraints.regex import _category_ranges, _class_char

    def spelled(m: re.Match) -> str:
        ranges = _category_ranges(m.group(1))
        return "[^" + "".join(_class_char(a) + ("" if a == b else "-" + _class_char(b)) for a, b in ranges) + "]"

    budget = CompileBudget(50_000, 60)
    got = trim_and_minimize(regex_to_dfa(pattern, budget))
    want = trim_and_minimize(regex_to_dfa(re.sub(r"\\P\{(\w+)\}", spelled, pattern), budget))
    assert np.array_equal(got.trans, want.trans) and np.array_equal(got.accept, want.accept)


def test_ranges_of_chars_sorts_and_merges_any_set():
    from constraints.utf8 import ranges_of_chars

    rng = random.Random(4)
    for _ in range(50):
        points = {rng.choice([rng.randrange(0x80), rng.randrange(0x110000)]) for _ in range(rng.randrange(1, 300))}
        points |= {p + 1 for p in list(points)[:20] if p + 1 < 0x110000}
        ranges = ranges_of_chars({chr(p) for p in points})
        assert [p for a, b in ranges for p in range(a, b + 1)] == sorted(points)
        assert all(b + 1 < c for (_, b), (c, _) in zip(ranges, ranges[1:]))


@pytest.mark.parametrize("lo, hi", [(0x41, 0x5A), (0x70, 0x90), (0x7F0, 0x810), (0xD7F0, 0xE010),
                                    (0xFFF0, 0x10010), (0x10FF00, 0x10FFFF), (0xE9, 0xE9)])
def test_utf8_sequences_spell_exactly_the_range(lo, hi):
    """Every byte string the sequences allow is a code point of lo..hi (surrogates skipped),
    each once, and asking again (the kept answer) gives the same."""
    from constraints.utf8 import utf8_sequences

    seqs = utf8_sequences(lo, hi)
    spelled = [bytes(p) for seq in seqs for p in itertools.product(*(range(a, b + 1) for a, b in seq))]
    assert sorted(spelled) == sorted(chr(c).encode() for c in range(lo, hi + 1) if not 0xD800 <= c <= 0xDFFF)
    assert utf8_sequences(lo, hi) == seqs


@pytest.mark.parametrize("pattern", [r"^Enrich:((?<Env>[a-zA-Z_]\w*)|(?<Index>\d*))$",
                                     r"^(?P<year>\d{4})-(?<month>0[1-9]|1[0-2])$",
                                     r"^\(?<a>[(?<b>]x$", r"(?<tag>ab)+c"])
def test_named_groups_match_as_plain_groups(pattern):
    """ECMA-262's (?<name>...) and Python's (?P<name>...) match as the group does without
    its name, as Python's re has it (ECMA's spelled the Python way); an escaped paren or a
    class holding the same characters is read as written."""
    python = re.compile(re.sub(r"\(\?<(?=[A-Za-z_])", "(?P<", pattern.replace(r"\(?<a>", r"\(?\<a\>")))
    dfa = search_dfa(pattern, CompileBudget())
    texts = ["Enrich:abc", "Enrich:12", "Enrich:", "Enrich:1a", "Enrich:_x9", "2024-01", "2024-13", "2024-1",
             "(<a>?x", "<a><x", "(<a>bx", "<a>x", "abc", "ababc", "xabcx", "ac", "Enrich:a-b"]
    for text in texts:
        assert dfa.matches(text.encode()) == bool(python.search(text)), (pattern, text)
