"""Budget-aware closing on small regexes over a tiny vocabulary, against brute force: the
fewest tokens to finish from every reachable state, and walks that only sample budget rows
always finish within the budget."""

from __future__ import annotations

import functools
import gc
import json
import math
import weakref
from pathlib import Path

import numpy as np
import pytest

from constraints import GrammarCompiler, TokenizerInfo, allocate_token_bitmask
from constraints.bitmask import unpack_bitmask
from constraints.closing import MARGIN, ClosingDistance, closing_for

EOS = 0
VOCAB = [b"", b"a", b"b", b"ab", b"abab", b"x", b"y", b"1", b"2", b"12", b"{", b"}", b'"', b'{"',
         b'"}', b":", b'":', b"\xe6\x97", b"\xa5", "日".encode(), b" ", b"c"]
# Fewest-byte completions that are also fewest-token ones: the bound is exact everywhere.
EXACT = [r'\{"(a|b)+":[0-9]+\}', r"(ab)*日?c", r"x|12", r"a{3,6}", r"(ab|x)+y", r'"[a-c]*"']
# Fewer tokens through more bytes ("abab" is one token): exact only with lookahead.
LONGER_IS_FEWER = [r"xy|abab", r"xyxy|abababab"]


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    return GrammarCompiler(TokenizerInfo(list(VOCAB) + [b""] * 10, (EOS,), frozenset({EOS})))


def _tokens(info: TokenizerInfo) -> list[int]:
    return [t for t, data in enumerate(info.token_bytes) if data]


def _exact_distances(automaton) -> dict:
    """Fewest tokens to termination for every reachable state (Bellman-Ford on the token graph)."""
    info = automaton.info
    edges, todo = {}, [automaton.initial]
    while todo:
        s = todo.pop()
        if s in edges:
            continue
        edges[s] = [n for n in (automaton.advance(s, info.token_bytes[t]) for t in _tokens(info))
                    if n is not None]
        todo += edges[s]
    dist = {s: _termination(automaton, s) for s in edges}
    for _ in range(len(edges)):
        for s, nxt in edges.items():
            dist[s] = min([dist[s]] + [1 + dist[n] for n in nxt])
    return dist


def _termination(automaton, s) -> float:
    if not automaton.is_accepting(s):
        return math.inf
    return 1 if automaton.can_continue(s) else 0


@pytest.mark.parametrize("pattern", EXACT)
def test_bound_is_the_fewest_tokens_from_every_state(compiler, pattern):
    auto = compiler.compile_regex(pattern).automaton
    closing = closing_for(auto)
    exact = _exact_distances(auto)
    assert {s: closing.bound(s) for s in exact} == exact


@pytest.mark.parametrize("pattern", LONGER_IS_FEWER)
def test_bound_never_below_the_fewest_and_exact_at_the_start(compiler, pattern):
    auto = compiler.compile_regex(pattern).automaton
    closing = closing_for(auto)
    exact = _exact_distances(auto)
    assert closing.bound(auto.initial) == exact[auto.initial]  # "abab" tokens, not x, y
    assert all(closing.bound(s) >= d for s, d in exact.items())


def _fitting(auto, exact, s, budget) -> set[int]:
    """Brute force: tokens after which the output can finish within ``budget`` tokens."""
    info = auto.info
    out = {t for t in _tokens(info)
           if (n := auto.advance(s, info.token_bytes[t])) is not None and exact[n] <= budget - 1}
    return out | ({EOS} if auto.is_accepting(s) else set())


@pytest.mark.parametrize("pattern", EXACT)
def test_budget_rows_keep_exactly_the_tokens_that_fit(compiler, pattern):
    grammar = compiler.compile_regex(pattern)
    auto, closing = grammar.automaton, closing_for(grammar.automaton)
    exact = _exact_distances(auto)
    for s, d in exact.items():
        if d == 0:
            continue
        plain = set(np.nonzero(unpack_bitmask(auto.mask_row(s), auto.info.vocab_size))[0].tolist())
        for budget in range(int(d), int(d) + 4):
            row = closing.budget_row(s, budget)
            got = plain if row is None else set(np.nonzero(unpack_bitmask(row, grammar.vocab_size))[0].tolist())
            assert got == _fitting(auto, exact, s, budget), (s, budget)
            assert (row is None) == (got == plain)


@pytest.mark.parametrize("pattern", EXACT)
def test_a_budget_with_no_slack_keeps_tokens_of_a_fewest_completion_without_a_vocabulary_walk(
        compiler, pattern):
    """Budget == bound: the row is found along the way the bound came from (no budget rows
    built, and not the state's own mask either), holds at least one token, and only tokens
    that fit (the brute-force set)."""
    auto = compiler.compile_regex(pattern).automaton
    exact = _exact_distances(auto)
    fresh = ClosingDistance(auto)  # nothing cached yet
    auto._rows.clear()  # (the compile made the start state's mask)
    auto._words.clear()
    checked = 0
    for s, d in exact.items():
        row = None if d == 0 else fresh.budget_row(s, int(d))
        if row is None:
            continue
        assert s not in auto._rows and s not in auto._words
        got = set(np.nonzero(unpack_bitmask(row, auto.info.vocab_size))[0].tolist())
        assert got and got <= _fitting(auto, exact, s, int(d)), (s, d)
        checked += 1
    assert checked and not fresh._levels


@pytest.mark.parametrize("pattern", EXACT + LONGER_IS_FEWER)
def test_every_walk_through_budget_rows_finishes_within_the_budget(compiler, pattern):
    """Exhaustive over every token choice: from the minimum budget up, a matcher fed only
    tokens from its budget rows is finished before the budget runs out."""
    _assert_every_walk_finishes(compiler.compile_regex(pattern), extra_budgets=3)


def _assert_every_walk_finishes(grammar, extra_budgets: int) -> None:
    start = grammar.matcher().min_tokens_to_finish()
    bitmask = allocate_token_bitmask(1, grammar.vocab_size)

    @functools.cache
    def finishes(history: tuple[int, ...], budget: int) -> bool:
        m = grammar.matcher()
        assert all(m.accept_token(t) for t in history)
        if m.is_terminated():
            return True
        if budget == 0:
            return False
        m.fill_next_token_bitmask(bitmask, 0, max_tokens=budget)
        allowed = np.nonzero(unpack_bitmask(bitmask[0], grammar.vocab_size))[0].tolist()
        return bool(allowed) and all(finishes(history + (t,), budget - 1) for t in allowed)

    for budget in range(int(start), int(start) + extra_budgets):
        assert finishes((), budget), budget


def test_min_tokens_to_finish_follows_the_matcher(compiler):
    m = compiler.compile_regex(r'\{"(a|b)+":[0-9]+\}').matcher()
    assert m.min_tokens_to_finish() == 5  # {"  a  ":  1  }
    for t in (VOCAB.index(b'{"'), VOCAB.index(b"ab"), VOCAB.index(b'":')):
        assert m.accept_token(t)
    assert m.min_tokens_to_finish() == 2  # 1  }
    assert m.accept_token(VOCAB.index(b"12")) and m.accept_token(VOCAB.index(b"}"))
    assert m.is_terminated() and m.min_tokens_to_finish() == 0


@pytest.mark.parametrize("pattern", EXACT + LONGER_IS_FEWER)
def test_finishes_within_answers_as_the_bound_and_searches_only_near_it(compiler, pattern):
    """The admission check: ``finishes_within(n)`` is ``bound <= n`` in every state, for every
    n around the bound; a budget at or above the fewest bytes plus EOS is answered without a
    search (no bound cached, no budget rows built)."""
    auto = compiler.compile_regex(pattern).automaton
    exact = _exact_distances(auto)
    fresh = closing_for(compiler.compile_regex(pattern + "|").automaton)  # a new automaton: nothing cached
    generous = fresh.automaton.min_bytes_to_accept(fresh.automaton.initial, fresh._single_bytes) + 1
    assert fresh.finishes_within(fresh.automaton.initial, generous)
    assert not fresh._bounds and not fresh._levels
    closing = closing_for(auto)
    for s in exact:
        bound = closing.bound(s)
        for n in range(max(int(bound) - 2, 0), int(bound) + 3):
            assert closing.finishes_within(s, n) == (n >= bound), (s, n, bound)


def test_a_budget_below_the_bound_keeps_the_closest_tokens(compiler):
    """Past the guarantee (budget already short), rows still head for the nearest finish."""
    grammar = compiler.compile_regex(r"a{3,6}|x")
    closing = closing_for(grammar.automaton)
    a = grammar.automaton.advance(grammar.automaton.initial, b"a")
    assert closing.bound(a) == 3  # a, a, EOS
    row = closing.budget_row(a, 1)
    assert np.nonzero(unpack_bitmask(row, grammar.vocab_size))[0].tolist() == [VOCAB.index(b"a")]


def test_spellings_of_a_shared_suffix_are_reused_exactly(compiler):
    """Each suffix's fewest tokens are the same whether computed whole or continued from
    the last way spelled (the closing of one structure, met again from the next state)."""
    auto = compiler.compile_regex(r'\{"(a|b)+":[0-9]+\}').automaton
    rng = np.random.default_rng(0)
    pieces = [b"a", b"b", b"ab", b'"', b'":', b"1", b"2", b"}", b"{", b"x"]
    tail = b"".join(pieces[i] for i in rng.integers(0, len(pieces), 30))
    reused = ClosingDistance(auto)
    for _ in range(20):
        head = b"".join(pieces[i] for i in rng.integers(0, len(pieces), int(rng.integers(0, 6))))
        data = head + tail[int(rng.integers(0, 10)):]
        fresh = ClosingDistance(auto)._suffix_spellings(data)
        again = reused._suffix_spellings(data)
        assert np.array_equal(again[0], fresh[0]) and np.array_equal(again[1], fresh[1])
        tail = data


PUSHDOWN = [
    {"type": "object", "properties": {"ab": {"type": "string", "maxLength": 3}}, "required": ["ab"],
     "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "string", "minLength": 2}, "b": {"type": "integer"}},
     "required": ["b"], "additionalProperties": False},
    # a pattern under maxLength kept as a count of committed length (json_leaves.counted_pattern)
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[ab]+x[12]+$", "maxLength": 8}},
     "required": ["a"], "additionalProperties": False},
    # ... where an x raises the count by two (it needs one more letter after it)
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[ab]+(x[ab]+)*$", "maxLength": 8}},
     "required": ["a"], "additionalProperties": False},
    # ... with a minimum above the pattern's own (the count pads where a state loops)
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[ab]+x[12]*$", "minLength": 5,
                                            "maxLength": 9}}, "required": ["a"], "additionalProperties": False},
]


@pytest.mark.parametrize("schema", PUSHDOWN, ids=["maxLength", "minLength", "pattern", "pattern-rise", "pattern-min"])
def test_pushdown_budget_rows_keep_only_tokens_that_fit_and_never_run_dry(compiler, schema):
    """Budget rows of a pushdown automaton: at every reachable state and budget from its
    bound up, the row is non-empty and holds only tokens after which the output can still
    finish (brute force; a token into a dead end of the vocabulary stays out)."""
    auto = compiler.compile_json_schema(schema).automaton
    exact = _exact_distances(auto)
    fresh = ClosingDistance(auto)
    checked = 0
    for s, d in exact.items():
        if d == 0 or math.isinf(d):
            continue
        plain = set(np.nonzero(unpack_bitmask(auto.mask_row(s), auto.info.vocab_size))[0].tolist())
        for budget in range(int(d), int(d) + 3):
            row = fresh.budget_row(s, budget)
            got = plain | ({EOS} if auto.is_accepting(s) else set()) if row is None else \
                set(np.nonzero(unpack_bitmask(row, auto.info.vocab_size))[0].tolist())
            assert got and got <= _fitting(auto, exact, s, budget) | ({EOS} if auto.is_accepting(s) else set())
            checked += 1
    assert checked > 20


@pytest.mark.parametrize("schema", PUSHDOWN, ids=["maxLength", "minLength", "pattern", "pattern-rise", "pattern-min"])
def test_every_pushdown_walk_through_budget_rows_finishes_within_the_budget(compiler, schema):
    _assert_every_walk_finishes(compiler.compile_json_schema(schema), extra_budgets=2)


def _reachable_states(auto, limit: int) -> set:
    """States reached token by token from the start (depth first), up to ``limit``."""
    states, todo = {auto.initial}, [auto.initial]
    while todo and len(states) < limit:
        s = todo.pop()
        for t in _tokens(auto.info):
            n = auto.advance(s, auto.info.token_bytes[t])
            if n is not None and n not in states:
                states.add(n)
                todo.append(n)
    return states


def test_completion_segments_from_kept_frame_ways_equal_fresh_descents():
    """A Python descent stops at the first frame position whose way to the frame's end it kept
    from an earlier state: at every reachable state, in any order, the segments are those a
    descent with nothing kept gives, and they spell a fewest-byte completion."""
    schema = {"type": "object", "required": ["a", "b"], "additionalProperties": False,
              "properties": {"a": {"type": "array", "minItems": 1,
                                   "items": {"type": "object", "required": ["ab"],
                                             "properties": {"ab": {"type": "string", "minLength": 1}}}},
                             "b": {"type": "object", "required": ["ab"],
                                   "properties": {"ab": {"type": "integer"}}}}}
    vocab = list(VOCAB) + [b"[", b"]", b",", b"0", b'"ab"', b'":"', b"},{"]
    auto = GrammarCompiler(TokenizerInfo(vocab, (EOS,), frozenset({EOS}))).compile_json_schema(schema).automaton
    auto._walker = None  # the Python descent keeps frame ways (native.c's, its steps: test_native)
    alphabet = ClosingDistance(auto)._single_bytes
    states = _reachable_states(auto, 400)
    dist = auto._grammar_distances(alphabet)
    order = list(states)
    np.random.default_rng(0).shuffle(order)
    checked = 0
    for s in order:
        kept = auto.completion_segments(s, alphabet)
        saved, dist.frame_ways, dist.segments = dist.frame_ways, {}, {}
        fresh = auto.completion_segments(s, alphabet)
        dist.frame_ways = saved
        assert kept == fresh
        if kept is not None:
            end = auto.advance(s, b"".join(kept))
            assert end is not None and auto.is_accepting(end)
            assert len(b"".join(kept)) == auto.min_bytes_to_accept(s, alphabet)
            checked += 1
    assert checked > 25 and len(dist.frame_ways) > 5, (len(states), checked, len(dist.frame_ways))


def test_the_search_free_check_reads_end_states_without_a_per_token_walk(compiler):
    """Near the budget the search-free check (_most_after) needs only the distinct states
    tokens end in: it reads them from the walk that does not record which token ends where
    (the same states as the per-token walk's), and builds no per-token arrays; the budget
    rows, where it cannot spare them, walk per token once."""
    auto = compiler.compile_json_schema(PUSHDOWN[1]).automaton
    state = auto.advance(auto.initial, b'{"a":"x')
    for s in (auto.initial, state, auto.advance(auto.initial, b'{"b":1')):
        assert set(auto.end_states(s)) == set(auto.token_ends(s).ends) and len(auto.end_states(s))
    walks = []
    original = auto.token_ends
    auto.token_ends = lambda state: walks.append(state) or original(state)
    fresh = ClosingDistance(auto)
    sid = fresh._graph.intern(state)
    fresh._most_after(sid)
    assert walks == []
    levels = fresh._levels_of(sid, state)
    assert walks == [state] and len(levels.walk.ends)
    fresh._most_after(sid)
    assert walks == [state]  # the levels' walk is reused


def test_the_ends_along_a_states_way_take_their_bounds_from_it_without_a_search(compiler):
    """Building a state's budget rows bounds every end state; those a token along the
    state's way reaches (here 'a' of the key 'ab', not a cut of the way's fewest spelling)
    take the way's count from there, as a search of their own finds, and are not searched."""
    auto = compiler.compile_json_schema(PUSHDOWN[0]).automaton
    fresh = ClosingDistance(auto)
    state = auto.advance(auto.initial, b'{"')
    sid = fresh._graph.intern(state)
    fresh._bound(sid)
    after_a = fresh._graph.intern(auto.advance(state, b"a"))
    assert after_a not in fresh._bounds  # not a cut of the way's spelling
    searched = []
    original = fresh._search
    fresh._search = lambda s: searched.append(s) or original(s)
    fresh._levels_of(sid, state)
    assert after_a not in searched
    assert fresh._bounds[after_a] == ClosingDistance(auto).bound(auto.advance(state, b"a"))


def test_slack_above_the_segmented_bound_spares_the_states_own_search(compiler):
    """Near the budget but with slack (the state's segmented bound below the tokens left),
    every token fitting is proved from the end states alone: the state itself is not
    searched. With no slack the row keeps only the way's first token."""
    auto = compiler.compile_json_schema(PUSHDOWN[0]).automaton
    fresh = ClosingDistance(auto)
    state = auto.advance(auto.initial, b'{"')  # the way: ab ": " "} (4 tokens, terminated)
    assert fresh._segmented_tokens(state) == 5  # its segments plus EOS
    assert fresh.budget_row(state, 6) is None
    assert fresh._graph.intern(state) not in fresh._bounds
    row = fresh.budget_row(state, 4)
    kept = [t for t in range(auto.info.vocab_size) if row[t // 32] >> (t % 32) & 1]
    assert kept == [VOCAB.index(b"ab")]


NESTED = {"type": "object", "required": ["a", "b"], "additionalProperties": False,
          # "c" may be {}, but once its "ab" is begun it costs more than any state outside c:
          # the most fewest bytes are inside a string inside c, its callers' returns included.
          "properties": {"c": {"type": "object", "additionalProperties": False,
                               "properties": {"ab": {"type": "string", "minLength": 12}}},
                         "a": {"type": "array", "maxItems": 3,
                               "items": {"type": "object", "required": ["ab"], "additionalProperties": False,
                                         "properties": {"ab": {"type": "string", "minLength": 2}}}},
                         "b": {"type": "object", "required": ["ab"], "additionalProperties": False,
                               "properties": {"ab": {"type": "integer"}}}}}
# Every byte a token by itself, as in byte-level BPE: a string's multi-byte characters can
# finish one byte at a time, so every position's fewest bytes are finite.
NESTED_VOCAB = list(VOCAB) + [b"[", b"]", b",", b"0", b'"ab"', b'":"', b"},{"] + [
    bytes([b]) for b in range(256) if bytes([b]) not in VOCAB + [b"[", b"]", b",", b"0"]]


@pytest.mark.parametrize("schema", [NESTED, *PUSHDOWN], ids=["nested", "maxLength", "minLength", "pattern", "pattern-rise", "pattern-min"])
def test_the_grammars_most_fewest_bytes_bounds_every_reachable_state(schema):
    """max_bytes_to_accept is at least min_bytes_to_accept at every reachable state (the
    callers' returns and a counted string's missing characters included) and reached by
    one of them; None where a call recurses."""
    auto = GrammarCompiler(TokenizerInfo(NESTED_VOCAB, (EOS,), frozenset({EOS}))).compile_json_schema(schema).automaton
    alphabet = auto.info.single_byte_tokens
    most = auto.max_bytes_to_accept(alphabet)
    states = _reachable_states(auto, 800)
    if schema is NESTED:  # inside a multi-byte character of the counted string in "c"
        states |= {auto.advance(auto.initial, p) for p in (b'{"c":{"ab":"\xe6', b'{"c":{"ab":"x\xe6\x97')}
    fewest = [auto.min_bytes_to_accept(s, alphabet) for s in states]
    assert most is not None and len(fewest) > 20
    assert max(fewest) <= most and max(fewest) >= most - 2  # reached, give or take a return's slack
    recursive = {"type": "object", "properties": {"n": {"$ref": "#"}}, "additionalProperties": False}
    auto = GrammarCompiler(auto.info).compile_json_schema(recursive).automaton
    assert auto.max_bytes_to_accept(alphabet) is None


@pytest.mark.parametrize("schema", [NESTED, *PUSHDOWN, EXACT[0]],
                         ids=["nested", "maxLength", "minLength", "pattern", "pattern-rise", "pattern-min", "regex"])
def test_budget_rows_are_the_same_with_the_grammar_wide_shortcut(schema):
    """Far from the budget the closing answers 'every token fits' from the grammar's most
    fewest bytes, without a per-state bound: at every reachable state and at budgets around
    that threshold, the rows equal those of a closing without the shortcut (a pushdown
    grammar's bound, and a regex DFA's)."""
    info = TokenizerInfo(NESTED_VOCAB, (EOS,), frozenset({EOS}))
    compiler = GrammarCompiler(info)
    auto = (compiler.compile_regex(schema) if isinstance(schema, str) else compiler.compile_json_schema(schema)).automaton
    with_it, without = ClosingDistance(auto), ClosingDistance(auto)
    without._every_state_fits = lambda: math.inf
    edge = with_it._every_state_fits()
    assert not math.isinf(edge)
    compared = 0
    for s in _reachable_states(auto, 300):
        for remaining in (1, 3, 8, int(edge) - 1, int(edge), int(edge) + 1, 2 * int(edge)):
            a, b = with_it.budget_row(s, remaining), without.budget_row(s, remaining)
            assert (a is None) == (b is None) and (a is None or np.array_equal(a.numpy(), b.numpy()))
            compared += 1
    assert compared > (50 if isinstance(schema, str) else 200)


def test_admission_finds_the_far_from_budget_threshold_so_no_fill_does():
    """The grammar-wide threshold (the most fewest bytes over every reachable state) costs a
    walk of the call graph: the admission check computes it, and a later fill far from the
    budget reads it without computing it again."""
    info = TokenizerInfo(NESTED_VOCAB, (EOS,), frozenset({EOS}))
    grammar = GrammarCompiler(info).compile_json_schema(NESTED)
    auto = grammar.automaton
    calls = []
    most = type(auto).max_bytes_to_accept

    def counted(self, alphabet):
        calls.append(1)
        return most(self, alphabet)

    auto.max_bytes_to_accept = counted.__get__(auto)
    assert grammar.matcher().finishes_within(500)
    assert calls == [1]
    matcher = grammar.matcher()
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 0, max_tokens=500)
    assert matcher.accept_token(info.ids_by_bytes[b"{"])
    matcher.fill_next_token_bitmask(bitmask, 0, max_tokens=499)
    assert calls == [1]  # read, not computed again
    assert closing_for(auto)._every_state_fits() == most(auto, auto.info.single_byte_tokens) + 1 + closing_for(auto)._margin


def test_the_far_threshold_a_fill_reads_rises_with_the_margin():
    """A budgeted fill skips budget_row while max_tokens - 1 >= closing.far, the threshold
    budget_row checks first. Building a state's rows may raise the margin (here "y" commits
    to 40 more tokens after "x", which could end with EOS): far rises with it, else fills
    between the old and the new threshold would keep tokens budget_row would drop."""
    compiler = GrammarCompiler(TokenizerInfo(list(VOCAB), (EOS,), frozenset({EOS})))  # its own
    grammar = compiler.compile_regex("x|xy{40}")  # (the automaton is marked pruned below)
    closing = closing_for(grammar.automaton)
    info = grammar.automaton.info
    matcher, bitmask = grammar.matcher(), allocate_token_bitmask(1, grammar.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 0, max_tokens=300)
    first = closing.far
    assert first == closing._most_bytes + 1 + MARGIN
    assert matcher.accept_token(info.ids_by_bytes[b"x"])
    matcher.fill_next_token_bitmask(bitmask, 0, max_tokens=30)  # near: this state's rows are built
    assert not unpack_bitmask(bitmask[0], grammar.vocab_size)[info.ids_by_bytes[b"y"]]
    assert closing._margin > MARGIN
    assert closing.far == first - MARGIN + closing._margin
    # Once steps dropped parses (pruned) the fewest bytes are unknown: no fill skips the check.
    asked = []
    closing.budget_row = lambda state, remaining: asked.append(remaining)
    matcher.fill_next_token_bitmask(bitmask, 0, max_tokens=1000)
    assert asked == []
    grammar.automaton.pruned = True
    matcher.fill_next_token_bitmask(bitmask, 0, max_tokens=1000)
    assert asked == [1000]


@pytest.mark.parametrize("schema", [NESTED, *PUSHDOWN, *LONGER_IS_FEWER, *EXACT])
def test_every_cached_bound_keeps_a_witness_after_walks_near_the_budget(schema):
    """Walks that stay near their budget search from state after state, each way entered
    only until it meets a state a cheaper or equal way entered before: afterwards every
    cached bound still has a witness (the state terminates at that cost, or an allowed token
    leads to a state whose cached bound is at most one less)."""
    import random

    info = TokenizerInfo(NESTED_VOCAB, (EOS,), frozenset({EOS}))
    if isinstance(schema, str):
        info = TokenizerInfo(list(VOCAB) + [b""] * 10, (EOS,), frozenset({EOS}))
        grammar = GrammarCompiler(info).compile_regex(schema)
    else:
        grammar = GrammarCompiler(info).compile_json_schema(schema)
    auto = grammar.automaton
    closing = closing_for(auto)
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    start = int(grammar.matcher().min_tokens_to_finish())
    for seed in range(12):
        rng, m = random.Random(seed), grammar.matcher()
        budget = start + seed % 4
        while not m.is_terminated() and budget > 0:
            m.fill_next_token_bitmask(bitmask, 0, max_tokens=budget)
            allowed = np.nonzero(unpack_bitmask(bitmask[0], info.vocab_size))[0].tolist()
            token = rng.choice(allowed)
            if token == EOS:
                break
            assert m.accept_token(token)
            budget -= 1
    index = {s: sid for sid, s in enumerate(closing._graph.states)}
    checked = 0
    for sid, bound in closing._bounds.items():
        if math.isinf(bound):
            continue
        state = closing._graph.states[sid]
        if _termination(auto, state) <= bound:
            continue
        after = (auto.advance(state, info.token_bytes[t]) for t in _tokens(info))
        assert any(n is not None and closing._bounds.get(index.get(n), math.inf) <= bound - 1 for n in after), sid
        checked += 1
    assert checked >= (2 if isinstance(schema, str) else 10)


@pytest.mark.parametrize("schema", [NESTED, r"(ab)*日?c"])
def test_an_automaton_is_freed_once_its_grammar_and_matchers_are_gone(schema):
    """closing_for's cache is keyed weakly by the automaton: after an admission check and
    budgeted fills near the budget, dropping the grammar and its matchers frees the automaton
    and its closing by reference counting alone (a server compiling many distinct schemas
    kept every one for good, ~1 MB each)."""
    info = TokenizerInfo(NESTED_VOCAB, (EOS,), frozenset({EOS}))
    compiler = GrammarCompiler(info)
    grammar = (compiler.compile_json_schema(schema) if schema is NESTED
               else compiler.compile_regex(schema))
    matcher = grammar.matcher()
    assert matcher.finishes_within(40)
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    for left in (40, 6, 2):
        matcher.fill_next_token_bitmask(bitmask, 0, max_tokens=left)
    closing = closing_for(grammar.automaton)
    assert closing.automaton is grammar.automaton
    automaton, closing_ref = weakref.ref(grammar.automaton), weakref.ref(closing)
    enabled = gc.isenabled()
    gc.disable()  # freed by reference counting, not by a collection of cycles
    try:
        del grammar, matcher, closing
        compiler.clear_cache()
        assert automaton() is None and closing_ref() is None
    finally:
        if enabled:
            gc.enable()


DEV_SCHEMAS = Path(__file__).resolve().parents[2].parent / "shared/data/jsonschemabench-dev"
# Mutual recursion whose costs settle only after a rule is done again: B needs A, and A's
# way out (an integer) is found after B was first done without it.
MUTUAL = {"$defs": {"A": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#/$defs/B"}}]},
                    "B": {"type": "object", "properties": {"x": {"$ref": "#/$defs/A"}}, "required": ["x"],
                          "additionalProperties": False}},
          "type": "object", "properties": {"b": {"$ref": "#/$defs/B"}, "a": {"$ref": "#/$defs/A"}},
          "required": ["b", "a"], "additionalProperties": False}


def test_grammar_distances_from_the_kept_call_graph_are_those_from_the_tables(tokenizer_info):
    """The automaton hands GrammarDistances the call graph it keeps (which rules each rule
    calls) instead of reading it off the rule tables: the distances at every position are
    the same, on recursive grammars (a rule whose callee's cost drops is done again) and real
    schemas. A call graph with a caller left out leaves that caller unreachable here."""
    from constraints.completion import GrammarDistances
    from constraints.pushdown import _has_calls

    schemas = [MUTUAL, {"type": "object", "properties": {"n": {"$ref": "#"}, "v": {"type": "integer"}},
                        "required": ["v"], "additionalProperties": False}]
    dev = sorted((p for p in DEV_SCHEMAS.glob("*/*.json")), key=str)[::12] if DEV_SCHEMAS.is_dir() else []
    schemas += [json.loads(p.read_text()) for p in dev]
    compiler = GrammarCompiler(tokenizer_info, cache_size=0)
    compared = recursive = 0
    for schema in schemas:
        try:
            auto = compiler.compile_json_schema(schema).automaton
        except Exception:
            continue
        if not hasattr(auto, "_grammar_distances"):
            continue
        alphabet = tokenizer_info.single_byte_tokens
        kept = auto._grammar_distances(alphabet).dist
        leaf = [bool(k) and not _has_calls(d) for k, d in enumerate(auto.rules)]
        chars = [0 if c is None else c.lo for c in auto._counted]
        read = GrammarDistances(auto.rules, leaf, chars, alphabet, {}).dist
        assert np.array_equal(kept, read), schema
        compared += len(kept)
        recursive += auto.max_bytes_to_accept(alphabet) is None
    assert compared > (1000 if dev else 50) and recursive >= 2
