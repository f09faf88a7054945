"""The C vocabulary walks (constraints/native.c) give exactly the masks of the Python walks,
fall back where they give up, and the package works without a C compiler."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from constraints import GrammarCompiler, allocate_token_bitmask, native
from constraints.bitmask import pack_token_ids, unpack_bitmask

ROOT = Path(__file__).resolve().parents[2]
DEV = ROOT.parent / "shared/data/jsonschemabench-dev"
needs_c = pytest.mark.skipif(native.module() is None, reason="no C compiler or Python.h: Python walks only")

SCHEMAS = [
    # counted strings (minLength/maxLength), formats, a pattern, nested objects and arrays
    {"type": "object", "properties": {
        "id": {"type": "string", "minLength": 2, "maxLength": 6},
        "when": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,8}$"}, "maxItems": 3},
        "n": {"type": "integer", "minimum": -5}, "x": {"type": "number"},
        "sub": {"type": "object", "properties": {"k": {"enum": ["a", "bb", None]}}, "required": ["k"]}},
     "required": ["id", "sub"]},
    # tokens that leave one counted string and run on into the next (",\"abc): counted in C
    {"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 3}},
    {"type": "object", "properties": {"a": {"type": "string", "maxLength": 1}, "b": {"type": "string", "minLength": 3}}},
    # recursion: a tree of named nodes
    {"$defs": {"node": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 4},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["name"]}},
     "$ref": "#/$defs/node"},
    # branches that stay ambiguous for a while (several configurations alive)
    {"anyOf": [{"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
               {"type": "object", "properties": {"a": {"type": "string"}, "c": {"type": "boolean"}}}]},
]


def _dev_schemas(n_per_split: int) -> list[str]:
    if not DEV.is_dir():
        return []
    out = []
    for split in sorted(p for p in DEV.iterdir() if p.is_dir()):
        out += [json.dumps(json.loads(p.read_text())) for p in sorted(split.glob("*.json"))[:n_per_split]]
    return out


def _walk_both(info, schema, seed: int, steps: int = 60) -> int:
    """Walk two compilations of ``schema`` together, one with the C walks and one without,
    along random allowed tokens; every mask must be equal. Returns the fills compared."""
    native_side = GrammarCompiler(info, cache_size=0).compile_json_schema(schema)
    python_side = GrammarCompiler(info, cache_size=0).compile_json_schema(schema)
    python_side.automaton._walker = None  # never the C walks
    a, b = native_side.matcher(), python_side.matcher()
    ma, mb = allocate_token_bitmask(1, info.vocab_size), allocate_token_bitmask(1, info.vocab_size)
    rng = np.random.default_rng(seed)
    for step in range(steps):
        if a.is_terminated():
            return step
        a.fill_next_token_bitmask(ma, 0)
        b.fill_next_token_bitmask(mb, 0)
        assert torch.equal(ma, mb), f"masks differ at step {step} of {json.dumps(schema)[:80]}"
        allowed = np.flatnonzero(unpack_bitmask(ma[0], info.vocab_size))
        allowed = allowed[~np.isin(allowed, info.eos_token_ids)]
        if not len(allowed):
            return step
        token = int(rng.choice(allowed))
        assert a.accept_token(token) and b.accept_token(token)
    return steps


@needs_c
@pytest.mark.parametrize("schema", SCHEMAS, ids=["counted-formats", "counted-array", "counted-object", "recursive", "ambiguous"])
def test_c_walks_give_the_python_masks(tokenizer_info, schema):
    assert sum(_walk_both(tokenizer_info, schema, seed) for seed in range(4)) > 20


@needs_c
def test_c_walks_raise_a_pattern_leafs_count_as_python_does(tokenizer_info):
    """A pattern leaf whose count rises by two at a separator (a "-" needs one more letter
    after it, json_leaves.counted_pattern): the C walks and steps against Python's, masks
    and the states each allowed token ends in, at every step of random walks."""
    schema = {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "maxLength": 9}}
    pda = GrammarCompiler(tokenizer_info, cache_size=0).compile_json_schema(schema).automaton
    assert [int(c.starts_char.max()) for c in pda._counted if c is not None] == [2]
    assert sum(_walk_both(tokenizer_info, schema, seed) for seed in range(6)) > 40
    reference = GrammarCompiler(tokenizer_info, cache_size=0).compile_json_schema(schema).automaton
    reference._walker = None  # its steps are Python's
    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(3):
        state = pda.initial
        for _ in range(25):
            walk = pda.token_ends(state)
            token_ids, index = walk.by_token()
            if not len(token_ids):
                break
            for t, k in zip(token_ids.tolist(), index.tolist()):
                data = tokenizer_info.token_bytes[t]
                want = state
                for b in data:
                    want = reference._step(want, b)
                assert walk.ends[k] == want, data
                checked += 1
            state = pda.advance(state, tokenizer_info.token_bytes[int(rng.choice(token_ids))])
    assert checked > 1000


@needs_c
def test_c_walks_give_the_python_masks_on_real_schemas(tokenizer_info):
    schemas = _dev_schemas(3)
    if not schemas:
        pytest.skip(f"{DEV} not present")
    compared = 0
    for i, schema in enumerate(schemas):
        try:
            compared += _walk_both(tokenizer_info, schema, seed=i, steps=40)
        except Exception as e:  # noqa: BLE001 - a refused schema is not this test's concern
            if "masks differ" in str(e) or isinstance(e, AssertionError):
                raise
    assert compared > 300


@needs_c
def test_a_state_met_again_fills_from_its_live_words_as_from_its_row(tokenizer_info):
    """fill_words keeps a row of few live words as native.sparse_row's pairs (a leaf's state
    as the leaf's shared row and such pairs) and writes a state met again from them: into a
    row holding garbage, every fill (first and again) equals mask_words, for every form."""
    automaton = GrammarCompiler(tokenizer_info, cache_size=0).compile_json_schema(SCHEMAS[0]).automaton
    rng, state, kinds = np.random.default_rng(3), automaton.initial, set()
    out = np.empty((2, (tokenizer_info.vocab_size + 31) // 32), dtype=np.int32)
    for _ in range(40):
        for _ in range(2):
            out.fill(-1)
            automaton.fill_words(state, out, 1)
            assert np.array_equal(out[1], automaton.mask_words(state)) and (out[0] == -1).all()
        kinds.add(type(automaton._sparse[state]))
        allowed = np.flatnonzero(unpack_bitmask(automaton.mask_words(state), tokenizer_info.vocab_size))
        allowed = allowed[~np.isin(allowed, tokenizer_info.eos_token_ids)]
        if not len(allowed):
            break
        state = automaton.advance(state, tokenizer_info.token_bytes[int(rng.choice(allowed))])
    # live words alone, and a leaf's shared row with the live words of the tokens leaving it
    assert {bytes, tuple} <= kinds, kinds
    mod, row = native.module(), np.zeros(8, dtype=np.int32)
    row[[1, 6]] = [5, -7]
    assert mod.sparse_row(row, 1) is None  # more live words than asked for
    pairs = mod.sparse_row(row, 2)
    assert np.frombuffer(pairs, dtype=np.int32).tolist() == [1, 5, 6, -7]
    base, out = np.arange(8, dtype=np.int32), np.full((2, 8), 9, dtype=np.int32)
    mod.fill_sparse(out, 0, pairs + pairs[:8], base)  # a copy of base, the pairs ORed in
    assert out[0].tolist() == (base | row).tolist() and (out[1] == 9).all()
    with pytest.raises(ValueError, match="one row of the rows' width"):
        mod.fill_sparse(out, 0, pairs, base[:7])
    with pytest.raises(ValueError, match="outside the row"):
        mod.fill_sparse(np.zeros((2, 4), dtype=np.int32), 1, pairs)
    with pytest.raises(ValueError, match="no such row"):
        mod.fill_sparse(np.zeros((2, 8), dtype=np.int32), 2, pairs)  # no row 2


@needs_c
def test_a_walk_past_the_configuration_cap_falls_back_to_python(tokenizer_info):
    """With a cap of 0 configurations every C walk gives up (None); the automaton then walks
    in Python, and its masks are those of an automaton that never had the C walks."""
    schema = SCHEMAS[0]
    pda = GrammarCompiler(tokenizer_info, cache_size=0).compile_json_schema(schema).automaton
    assert pda._native_walker().trie([((), 0)], True) is not None
    pda._walker = pda._build_walker(native.module(), max_configs=0)
    assert pda._walker.trie([((), 0)], True) is None
    assert _walk_both_with(pda, tokenizer_info, schema) > 10


@needs_c
def test_a_row_too_small_for_the_vocabulary_is_refused_not_overrun(tokenizer_info):
    """The C walks write one bit per token id: a row shorter than the vocabulary's is a
    ValueError before any walk (it was accepted from 4 bytes on), and the distinct end
    states need no row at all."""
    pda = GrammarCompiler(tokenizer_info, cache_size=0).compile_json_schema(SCHEMAS[0]).automaton
    walker = pda._native_walker()
    mod, configs = native.module(), [((), 0)]
    short = np.zeros(walker._words - 1, dtype=np.int32)
    with pytest.raises(ValueError, match="too short"):
        walker.trie_kept(configs, True, short[None], 0, 64)
    with pytest.raises(ValueError, match="too small"):
        mod.walk_ends(walker._pda, walker._vocab, configs, short, None)
    index = np.zeros(1, dtype=np.int64)
    with pytest.raises(ValueError, match="too small"):
        mod.walk_list(walker._pda, walker._vocab, configs, index, index, np.zeros(1, dtype=bool), short)
    assert walker.end_states(configs) == walker.token_ends(configs)[0]


@needs_c
def test_a_walk_kept_writes_its_row_and_its_live_words_in_one_call(tokenizer_info):
    """walk_trie_kept zeroes one row of a bitmask, walks into it and gives that row's live
    words: the row equals trie's, the pairs equal sparse_row's (None past ``most``), the
    other rows stay as they were; a row outside the bitmask is a ValueError, not a write."""
    pda = GrammarCompiler(tokenizer_info, cache_size=0).compile_json_schema(SCHEMAS[0]).automaton
    walker, mod = pda._native_walker(), native.module()
    kinds = set()
    for prefix in (b"", b'{"', b'{"id":"ab",', b'{"id":"ab","tags":["a'):
        for config in pda._closure(pda.advance(pda.initial, prefix)):
            want = walker.trie([config], True)
            out = np.full((3, walker._words), -1, dtype=np.int32)
            got = walker.trie_kept([config], True, out, 1, 64)
            assert got[0] == want[1] and np.array_equal(out[1], want[0]), (prefix, config)
            assert got[1] == mod.sparse_row(want[0], 64) and (out[[0, 2]] == -1).all()
            kinds.add(got[1] is None)
            live = np.count_nonzero(want[0])
            if 0 < live <= 256:  # one live word more than asked for
                assert walker.trie_kept([config], True, out, 0, live - 1)[1] is None
    assert kinds == {True, False}  # rows of few live words and dense rows both met
    with pytest.raises(ValueError, match="no such row"):
        walker.trie_kept([((), 0)], True, np.zeros((2, walker._words), dtype=np.int32), 2, 64)
    with pytest.raises(ValueError, match="too short"):
        walker.trie_kept([((), 0)], True, np.zeros((2, walker._words - 1), dtype=np.int32), 0, 64)


# An object told apart by which of its properties are required (JSONSchemaBench o21112's
# shape): every branch parses every key, so each state holds one configuration per branch.
_BRANCHES = {"type": "object", "additionalProperties": False,
             "properties": {"x": {"type": "boolean"}, "name": {"type": "string", "maxLength": 5},
                            "tags": {"type": "array", "items": {"enum": ["a", "b"]}}, "n": {"type": "integer"}},
             "anyOf": [{"required": ["x"]}, {"required": ["name"]}, {"required": ["tags"]}, {"required": ["n"]}]}


@needs_c
def test_a_state_of_several_parses_walks_the_vocabulary_once(tokenizer_info, monkeypatch):
    """A state with several structural configurations is walked as one trie walk of them
    all (_joint_row) with the leaves they call from the leaves' rows; its masks are those of
    the Python walks configuration by configuration, along random walks that pass through
    keys, strings, arrays and numbers."""
    pda = GrammarCompiler(tokenizer_info, cache_size=0).compile_json_schema(_BRANCHES).automaton
    joint, tries = [], []
    real_joint, real_trie = type(pda)._joint_row, native.PdaWalker.trie

    def counted_joint(self, configs):
        out = real_joint(self, configs)
        joint.append(out is not None)
        return out

    def counted_trie(self, configs, close_first):
        tries.append(len(configs))
        return real_trie(self, configs, close_first)

    monkeypatch.setattr(type(pda), "_joint_row", counted_joint)
    monkeypatch.setattr(native.PdaWalker, "trie", counted_trie)
    for prefix in (b'{"', b'{"x":true,"', b'{"x":true,"name":"ab","'):
        state = pda.advance(pda.initial, prefix)
        assert len(state) >= 4, prefix  # a parse per branch
        joint.clear(), tries.clear()
        pda.mask_words(state)
        assert joint == [True] and len(tries) == 1 and tries[0] >= 4, (prefix, joint, tries)
    assert sum(_walk_both_with(pda, tokenizer_info, _BRANCHES, seed=seed) for seed in range(4)) > 40
    assert joint.count(True) > 20


def _walk_both_with(pda, info, schema, seed: int = 0) -> int:
    reference = GrammarCompiler(info, cache_size=0).compile_json_schema(schema)
    reference.automaton._walker = None
    a, b = pda, reference.automaton
    state_a, state_b = a.initial, b.initial
    rng = np.random.default_rng(seed)
    for step in range(40):
        wa, wb = a.mask_words(state_a), b.mask_words(state_b)
        assert np.array_equal(wa, wb), step
        allowed = np.flatnonzero(unpack_bitmask(wa, info.vocab_size))
        allowed = allowed[~np.isin(allowed, info.eos_token_ids)]
        if not len(allowed):
            return step
        data = info.token_bytes[int(rng.choice(allowed))]
        state_a, state_b = a.advance(state_a, data), b.advance(state_b, data)
    return 40


@pytest.mark.parametrize("env", [{"SGLANG_LITE_NATIVE": "0"}, {"CC": "/nonexistent/cc"}])
def test_without_the_c_walks_the_masks_are_computed_in_python(tmp_path, env):
    code = ("import json, numpy as np; from constraints import native, GrammarCompiler, TokenizerInfo; "
            "from constraints.bitmask import unpack_bitmask; "
            "info = TokenizerInfo([bytes([b]) for b in range(256)] + [b''], (256,), frozenset({256})); "
            "g = GrammarCompiler(info).compile_json_schema({'type': 'array', 'items': {'type': 'integer'}}); "
            "m = g.matcher(); m.accept_token(ord('[')); "
            "ok = sorted(np.flatnonzero(unpack_bitmask(g.automaton.mask_words(m._state), 257)).tolist()); "
            "print(json.dumps([native.module() is None, ok]))")
    run_env = dict(os.environ, SGLANG_LITE_CACHE=str(tmp_path), **env)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=run_env, timeout=120, check=True)
    off, allowed = json.loads(out.stdout.strip().splitlines()[-1])
    assert off
    assert allowed == sorted([ord("-"), ord("]")] + list(range(ord("0"), ord("9") + 1)))


def _as_sets(walked) -> tuple[set, set]:
    (ip, ic, ie), (xp, xc, xn) = walked
    return (set(zip(ip.tolist(), ic.tolist(), ie.tolist())), set(zip(xp.tolist(), xc.tolist(), xn.tolist())))


@needs_c
@pytest.mark.parametrize("leaf", ["uri", "email", "date-time", "^[a-z][a-z0-9_-]{2,12}$", "number", "counted",
                                  "plain", "chain", "^[a-z ]*x"])
def test_the_c_leaf_walk_gives_the_numpy_walk(tokenizer_info, leaf):
    """Every state of real leaves (formats, a pattern, a number, a counted plain string):
    the same tokens inside, with the same character counts and ends, and the same exits.
    A plain string body (a self-loop), a pattern under a maxLength (a chain of 30 states,
    shorter than some tokens) and a loop that may end anywhere (accepting states inside the
    run) are where the row walk sets whole subtrees without walking them."""
    from constraints import leaves
    from constraints.json_leaves import regex_leaf, string_dfa
    from constraints.numbers import NUMBER

    starts = None
    if leaf == "number":
        dfa = regex_leaf(NUMBER)
    elif leaf == "counted":
        counted = leaves.CountedLeaf.of_plain_string(string_dfa(0, None, None, None), 1, 4)
        dfa, starts = counted.dfa, counted.starts_char
    elif leaf == "plain":
        dfa = string_dfa(0, None, None, None)
    elif leaf == "chain":
        dfa = string_dfa(2, 30, "^[A-Za-z0-9 ,.'-]+$", None)
    elif leaf.startswith("^"):
        dfa = string_dfa(0, None, leaf, None)
    else:
        dfa = string_dfa(0, None, None, leaf)
    layout = tokenizer_info.layout
    walked = 0
    for q in range(dfa.num_states):
        first = layout.starting_with(np.nonzero(dfa.trans[q, :256] >= 0)[0])
        want = _as_sets(leaves._walk(layout, dfa, q, starts, first))
        got = _as_sets(native.leaf_walk(native.module(), dfa.trans, dfa.accept, starts,
                                        layout.lexicographic_arrays(), q))
        assert got == want, f"state {q}"
        walked += len(want[0]) + len(want[1])
        # the row walk: the same inside tokens packed, the same exits (and their counts)
        row, (exit_pos, exit_col, exit_count) = native.leaf_row(
            native.module(), dfa.trans, dfa.accept, layout.lexicographic_arrays(), q, tokenizer_info.vocab_size, starts)
        inside = np.array(sorted(layout.token_ids[p] for p, _, _ in want[0]), dtype=np.int64)
        assert np.array_equal(row, pack_token_ids(inside, tokenizer_info.vocab_size)), f"state {q}"
        assert set(zip(exit_pos.tolist(), exit_col.tolist(), exit_count.tolist())) == want[1], f"state {q}"
    assert walked > 50


# Every string of up to 5 bytes over a small alphabet (and a few longer runs): the trie's
# subtrees are wide and deep, so the row walk's whole-subtree shortcut is taken everywhere.
_SMALL_ALPHABET = [b"a", b"b", b"_", b";", b"\xc3\xa9"]
_SMALL_VOCAB = sorted({b"".join(t) for n in range(1, 6) for t in itertools.product(_SMALL_ALPHABET, repeat=n)}
                      | {b"a" * 12, b"ab" * 7, b"b" * 9 + b";", b"_" * 11}
                      # subtrees with only a and b below, deep in a pattern's way
                      | {p + b"".join(t) for p in (b"a_aaaa", b";aaaa") for n in (1, 2)
                         for t in itertools.product((b"a", b"b"), repeat=n)})


@needs_c
@pytest.mark.parametrize("pattern", [
    r"[ab]+(_[^;]*;)?",  # accepting states, then a run that is not: exits before a whole subtree
    r";aaaa[^;][^b;]*;",  # the class narrows after one step: a run keeps the bytes of every step
    r";aaaa[^;]+",  # a run into an accepting loop: exits on the way, never whole
    r"(ab)*;",  # a cycle of two states: no run beyond it
    r"[ab_]{0,3};",  # a chain shorter than the tokens: only shallow subtrees fit
    r"[ab][a]*_?b{0,6};",  # the classes narrow along the way: a run keeps the bytes of every step
    r"(a|\xe9|_)*;",  # a two-byte character inside the loop: non-ASCII bytes never run
])
def test_the_c_row_walk_sets_whole_subtrees_as_the_numpy_walk_finds_them(pattern):
    """On a vocabulary of every short string over a few bytes, every state of each leaf: the
    packed inside row and the exits of the C row walk are those of the numpy walk."""
    from constraints import TokenizerInfo, leaves
    from constraints.json_leaves import regex_leaf

    info = TokenizerInfo(_SMALL_VOCAB + [b"</s>"], (len(_SMALL_VOCAB),), frozenset({len(_SMALL_VOCAB)}))
    dfa = regex_leaf(pattern)
    layout = info.layout
    inside_total = 0
    # with counts too (a counted leaf's row walk): where each byte adds to the count is
    # random here; the exits' counts must be the listing walk's, whole subtrees or not
    for starts in (None, np.random.default_rng(len(pattern)).random((dfa.num_states, 256)) < 0.6):
        for q in range(dfa.num_states):
            first = layout.starting_with(np.nonzero(dfa.trans[q, :256] >= 0)[0])
            want = _as_sets(leaves._walk(layout, dfa, q, starts, first))
            row, (exit_pos, exit_col, exit_count) = native.leaf_row(
                native.module(), dfa.trans, dfa.accept, layout.lexicographic_arrays(), q, info.vocab_size, starts)
            inside = np.array(sorted(layout.token_ids[p] for p, _, _ in want[0]), dtype=np.int64)
            assert np.array_equal(row, pack_token_ids(inside, info.vocab_size)), f"state {q}"
            assert set(zip(exit_pos.tolist(), exit_col.tolist(), exit_count.tolist())) == want[1], f"state {q}"
            inside_total += len(inside)
            if starts is None:
                continue
            # the counts a row walk writes (whole subtrees only where their run rises alike),
            # bucketed: the listing walk's tokens by count, open and closing apart
            open_rows, closing_rows, most = native.leaf_rows_by_count(
                native.module(), dfa.trans, dfa.accept, starts, layout.lexicographic_arrays(), q, info.vocab_size)
            listed = [(layout.token_ids[p], c, e) for p, c, e in want[0]]
            assert most == max((c for _, c, _ in listed), default=0), f"state {q}"
            for c in range(most + 1):
                for rows, closes in ((open_rows, False), (closing_rows, True)):
                    ids = np.array(sorted(t for t, n, e in listed if n <= c and e == closes), dtype=np.int64)
                    assert np.array_equal(rows[c], pack_token_ids(ids, info.vocab_size)), (q, c, closes)
    assert inside_total > 10


@needs_c
@pytest.mark.parametrize("pattern", [r"[a-z]+@[a-z]+\.(com|org)", r"-?(0|[1-9][0-9]*)(\.[0-9]+)?", r'\{"a": ?"[^"]*"\}'])
def test_a_regex_automatons_masks_are_the_numpy_walks(tokenizer_info, pattern):
    from constraints.automaton import DFAAutomaton
    from constraints.token_walk import walk_vocab

    automaton = GrammarCompiler(tokenizer_info, cache_size=0).compile_regex(pattern).automaton
    assert isinstance(automaton, DFAAutomaton)
    allowed = 0
    for q in range(automaton.dfa.num_states):
        want = walk_vocab(automaton.dfa.trans, q, tokenizer_info.layout)[0]
        got = automaton.allowed_token_ids(q)
        assert sorted(got.tolist()) == sorted(want.tolist()), q
        allowed += len(got)
        eos = list(tokenizer_info.eos_token_ids) if automaton.dfa.accept[q] else []
        row = pack_token_ids(np.array(sorted(want.tolist()) + eos, dtype=np.int64), tokenizer_info.vocab_size)
        assert np.array_equal(automaton.mask_row(q).numpy(), row), q  # set in the row by the C walk
        assert automaton.can_continue(q) == bool(len(want))
    assert allowed > 20


def _python_only():
    """A context in which native.module() is None (the Python paths)."""
    import contextlib

    @contextlib.contextmanager
    def off():
        saved = native._loaded[:]
        native._loaded[:] = [None]
        try:
            yield
        finally:
            native._loaded[:] = saved
    return off()


def _random_nfa(rng, n: int, width: int):
    from constraints.budget import CompileBudget
    from constraints.nfa import NFA

    nfa = NFA(CompileBudget())
    for _ in range(n):
        nfa.new_state()
    for s in range(n):
        for _ in range(int(rng.integers(0, 4))):
            lo = int(rng.integers(0, width))
            hi = min(width - 1, lo + int(rng.choice([0, 1, 5, 40, 255])))
            nfa.add_edge(s, lo, hi, int(rng.integers(0, n)))
        for _ in range(int(rng.integers(0, 3))):
            nfa.add_eps(s, int(rng.integers(0, n)))
    return nfa


@needs_c
def test_the_c_subset_construction_and_minimization_give_the_python_automata():
    """Random NFAs (byte ranges, call columns past 256, epsilon cycles, absorbing states):
    the same DFA, state for state, and the same trimmed and minimized DFA (where every state
    stays and where some go)."""
    from constraints.budget import CompileBudget
    from constraints.fsm import determinize, trim_and_minimize

    rng = np.random.default_rng(11)
    compared = 0
    kept_whole = trimmed = 0  # C leaves the table as it is where every state stays
    for trial in range(300):
        n, width = int(rng.integers(2, 30)), int(rng.choice([256, 260]))
        nfa = _random_nfa(rng, n, width)
        absorbing = frozenset(rng.choice(n, size=int(rng.integers(0, 2)), replace=False).tolist())
        final = int(rng.integers(0, n))
        got = determinize(nfa, 0, final, CompileBudget(), width=width, absorbing=absorbing)
        with _python_only():
            want = determinize(nfa, 0, final, CompileBudget(), width=width, absorbing=absorbing)
        assert np.array_equal(got.trans, want.trans) and np.array_equal(got.accept, want.accept), trial
        for minimize in (True, False):
            a = trim_and_minimize(got, minimize)
            with _python_only():
                b = trim_and_minimize(want, minimize)
            assert np.array_equal(a.trans, b.trans) and np.array_equal(a.accept, b.accept), (trial, minimize)
            kept_whole += a.num_states == got.num_states
            trimmed += a.num_states < got.num_states
        compared += got.num_states
    assert compared > 1000 and kept_whole > 50 and trimmed > 50


@needs_c
def test_the_c_fewest_bytes_are_the_python_distances(tokenizer_info):
    """completion's Dijkstra in C against the Python one: random DFAs with call columns (some
    callees unreachable, some costing many bytes), random alphabets, and every rule of real
    schemas; the same distance at every state. A C walk that skipped a byte run's later bytes
    of a new target, or took an unreachable callee's edge, differs here."""
    from constraints.budget import CompileBudget
    from constraints.completion import UNREACHABLE, leaf_distances, rule_distances
    from constraints.fsm import determinize

    rng = np.random.default_rng(5)
    compared = finite = 0

    def both(dfa, alphabet, costs):
        nonlocal compared, finite
        got = rule_distances(dfa, alphabet, costs) if costs is not None else leaf_distances(dfa, alphabet)
        with _python_only():
            want = rule_distances(dfa, alphabet, costs) if costs is not None else leaf_distances(dfa, alphabet)
        assert np.array_equal(got, want)
        compared += len(got)
        finite += int((got < UNREACHABLE).sum())

    for _ in range(200):
        n, width = int(rng.integers(2, 30)), int(rng.choice([256, 262]))
        dfa = determinize(_random_nfa(rng, n, width), 0, int(rng.integers(0, n)), CompileBudget(), width=width)
        alphabet = rng.random(256) < rng.choice([1.0, 0.5, 0.05])
        costs = rng.integers(1, 40, size=width - 256)
        costs[rng.random(len(costs)) < 0.3] = UNREACHABLE
        both(dfa, alphabet, costs)
        both(dfa, alphabet, None)
    compiler = GrammarCompiler(tokenizer_info)
    for text in _dev_schemas(2):
        try:
            automaton = compiler.compile_json_schema(text).automaton
        except Exception:
            continue
        for rule in getattr(automaton, "rules", ()):
            both(rule, np.ones(256, dtype=bool), np.full(len(automaton.rules) - 1, 3))
    assert compared > 5000 and 0 < finite < compared


def _chains(rng, chains: int, length: int, width: int):
    """A DFA of ``chains`` paths of ``length`` bytes over a small alphabet into accepting ends,
    with a few random cross edges: suffixes repeat, so telling states apart takes as many
    rounds of refinement as the longest shared suffix."""
    from constraints.fsm import DEAD, ByteDFA

    n = 1 + chains * length + 1
    trans = np.full((n, width), DEAD, dtype=np.int32)
    accept = np.zeros(n, dtype=bool)
    accept[n - 1] = True
    for c in range(chains):
        spell = rng.choice([97, 98], size=length)
        prev = 0
        for i in range(length):
            q = 1 + c * length + i
            trans[prev, spell[i] if prev else 100 + c] = q
            prev = q
        trans[prev, 99] = n - 1
        accept[prev] = bool(rng.random() < 0.2)
    for _ in range(chains):
        a, b = rng.integers(1, n - 1, size=2)
        trans[a, int(rng.choice([99, width - 1]))] = b
    return ByteDFA(trans, accept)


@needs_c
def test_the_c_minimization_gives_the_python_one_on_long_chains():
    """Long runs of alike states (the rule DFAs of objects whose property names share long
    suffixes): the worklist refinement in C against Moore's rounds in Python, state for
    state, and fewer states than trimming alone."""
    from constraints.fsm import trim_and_minimize

    rng = np.random.default_rng(3)
    merged = 0
    for trial in range(40):
        dfa = _chains(rng, int(rng.integers(2, 12)), int(rng.integers(5, 120)), int(rng.choice([256, 270])))
        got = trim_and_minimize(dfa)
        with _python_only():
            want = trim_and_minimize(dfa)
        assert np.array_equal(got.trans, want.trans) and np.array_equal(got.accept, want.accept), trial
        merged += trim_and_minimize(dfa, minimize=False).num_states - got.num_states
    assert merged > 100


def _bounded_product(rng, states: int, most: int):
    """A random DFA over a few bytes (cycles and all) run with a length counter of at most
    ``most`` bytes: state (q, n) reads a byte into (q', n + 1) while n < most, as a pattern
    under maxLength compiles. Its states differ by the room they have left, which the
    shortest way to acceptance alone does not tell apart."""
    from constraints.fsm import DEAD, ByteDFA

    inner = rng.integers(-1, states, size=(states, 5))
    inner_accept = rng.random(states) < 0.3
    inner_accept[-1] = True
    n = states * (most + 1)
    trans = np.full((n, 256), DEAD, dtype=np.int32)
    for q in range(states):
        for c in range(most):
            for b in range(5):  # the fifth byte counts two (a character of two bytes)
                step = 2 if b == 4 else 1
                if inner[q, b] >= 0 and c + step <= most:
                    trans[q * (most + 1) + c, 97 + b] = inner[q, b] * (most + 1) + c + step
    accept = np.repeat(inner_accept, most + 1)
    return ByteDFA(trans, accept)


@needs_c
def test_the_c_minimization_gives_the_python_one_on_length_bounded_products():
    """Patterns under a maxLength: the C refinement starts from the shortest and the longest
    way to acceptance (the longest is what tells the counts apart), Moore's rounds in Python
    from the shortest alone; state for state the same minimal DFA."""
    from constraints.fsm import trim_and_minimize

    rng = np.random.default_rng(5)
    bounded = 0
    for trial in range(30):
        dfa = _bounded_product(rng, int(rng.integers(2, 9)), int(rng.integers(3, 60)))
        got = trim_and_minimize(dfa)
        with _python_only():
            want = trim_and_minimize(dfa)
        assert np.array_equal(got.trans, want.trans) and np.array_equal(got.accept, want.accept), trial
        bounded += got.num_states > 1
    assert bounded > 20


@needs_c
def test_the_c_global_table_is_the_numpy_one(tokenizer_info):
    """The stacked table of real schemas' rules (leaves shared, call columns past 256 dropped),
    each position's only live byte and where it leads, in C and in numpy."""
    from constraints.pushdown import _global_table

    compiler = GrammarCompiler(tokenizer_info)
    rows = ones = 0
    for text in _dev_schemas(2):
        try:
            automaton = compiler.compile_json_schema(text).automaton
        except Exception:
            continue
        rules = getattr(automaton, "rules", None)
        if rules is None:
            continue
        offsets = np.concatenate(([0], np.cumsum([d.num_states for d in rules]))).tolist()
        got, got_one, got_next = _global_table(list(rules), offsets)
        with _python_only():
            want, want_one, want_next = _global_table(list(rules), offsets)
        assert np.array_equal(got, want) and np.array_equal(got_one, want_one)
        assert np.array_equal(got_next, want_next)
        rows += len(got)
        ones += int((got_one >= 0).sum())
    assert rows > 1000 and 0 < ones < rows


@needs_c
def test_the_c_product_is_the_python_one():
    """Intersections and differences, state for state: random DFAs, and the string leaves'
    own products (a plain body with formats, excluded formats and a pattern search)."""
    from constraints.budget import CompileBudget
    from constraints.fsm import determinize, product, trim_and_minimize
    from constraints.json_leaves import FORMATS, regex_leaf, search_dfa

    def both(a, b, mode):
        got = product(a, b, mode, CompileBudget())
        with _python_only():
            want = product(a, b, mode, CompileBudget())
        assert np.array_equal(got.trans, want.trans) and np.array_equal(got.accept, want.accept), mode
        return got.num_states

    rng = np.random.default_rng(9)
    states = 0
    for _ in range(100):
        a, b = (trim_and_minimize(determinize(_random_nfa(rng, int(rng.integers(2, 20)), 256), 0,
                                              int(rng.integers(0, 6)), CompileBudget())) for _ in range(2))
        states += both(a, b, "and") + both(a, b, "diff")
    plain = regex_leaf('[^"\\\\\\x00-\\x1f]*')
    for fmt in ("date-time", "email", "uri", "ipv4"):
        states += both(plain, regex_leaf(FORMATS[fmt]), "and") + both(plain, regex_leaf(FORMATS[fmt]), "diff")
    states += both(plain, search_dfa("^[A-Z][a-z]+(-[0-9]{2,4})?$", CompileBudget()), "and")
    assert states > 2000


@needs_c
def test_the_c_product_keeps_the_budget():
    from constraints import GrammarTooComplexError
    from constraints.budget import CompileBudget
    from constraints.fsm import product
    from constraints.json_leaves import FORMATS, regex_leaf

    a, b = regex_leaf("[0-9tT:.zZ+-]*"), regex_leaf(FORMATS["date-time"])
    assert product(a, b, "diff", CompileBudget()).num_states > 20
    with pytest.raises(GrammarTooComplexError):
        product(a, b, "diff", CompileBudget(max_states=20))


@needs_c
def test_emptiness_in_c_is_the_python_reachability():
    """ByteDFA.is_empty through the C fewest-bytes search against the Python reachability:
    random DFAs (some with call columns, some accepting nothing reachable)."""
    from constraints.budget import CompileBudget
    from constraints.fsm import ByteDFA, determinize

    rng = np.random.default_rng(13)
    seen = {True: 0, False: 0}
    for trial in range(300):
        n, width = int(rng.integers(2, 25)), int(rng.choice([256, 262]))
        dfa = determinize(_random_nfa(rng, n, width), 0, int(rng.integers(0, n)), CompileBudget(), width=width)
        if trial % 3 == 0:  # keep few accepting states, often out of reach
            dfa = ByteDFA(dfa.trans, dfa.accept & (rng.random(dfa.num_states) < 0.2))
        got = dfa.is_empty()
        with _python_only():
            assert dfa.is_empty() == got, trial
        seen[got] += 1
    assert min(seen.values()) > 20


@needs_c
def test_the_c_subset_construction_keeps_the_budget():
    from constraints import CompileTimeoutError, GrammarTooComplexError
    from constraints.budget import CompileBudget
    from constraints.fsm import determinize
    from constraints.regex import regex_to_dfa

    with pytest.raises(GrammarTooComplexError):
        regex_to_dfa("(a|b)*a(a|b){14}", CompileBudget(max_states=1000))
    from constraints.nfa import NFA
    from constraints.regex import emit_regex, parse_regex

    nfa = NFA(CompileBudget())
    start = nfa.new_state()
    end = emit_regex(nfa, start, parse_regex("(a|b)*a(a|b){14}"))  # 2**15 DFA states
    budget = CompileBudget(max_states=10**7, timeout_s=0.05)
    with pytest.raises(CompileTimeoutError):
        determinize(nfa, start, end, budget)  # the C loop checks the deadline itself


@needs_c
@pytest.mark.parametrize("schema", SCHEMAS[:2], ids=["counted-formats", "counted-array"])
def test_token_ends_are_the_states_advance_gives(tokenizer_info, schema):
    """The one-walk end states (the closing's budget rows read them): every allowed token,
    and for each the state the automaton's own steps reach."""
    pda = GrammarCompiler(tokenizer_info, cache_size=0).compile_json_schema(schema).automaton
    rng = np.random.default_rng(3)
    state, checked = pda.initial, 0
    for _ in range(12):
        walk = pda.token_ends(state)
        (token_ids, index), ends = walk.by_token(), walk.ends
        allowed = np.flatnonzero(unpack_bitmask(pda.mask_words(state), tokenizer_info.vocab_size))
        allowed = allowed[~np.isin(allowed, tokenizer_info.eos_token_ids)]
        assert sorted(token_ids.tolist()) == allowed.tolist()
        for t, k in zip(token_ids.tolist(), index.tolist()):
            assert pda.advance(state, tokenizer_info.token_bytes[t]) == ends[k]
            checked += 1
        if not len(token_ids):
            break
        state = pda.advance(state, tokenizer_info.token_bytes[int(rng.choice(token_ids))])
    assert checked > 100


@needs_c
def test_a_string_reached_under_two_stacks_walks_as_one(tokenizer_info):
    """Two branches of an anyOf inside the same string: two configurations at one looping
    position. The C walks take the subtrees below them whole (each configuration loops on
    every byte below), and still give the Python walk's row, and for every token the state
    the automaton's own steps reach."""
    schema = json.dumps({"anyOf": [
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False},
        {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
         "required": ["a", "b"], "additionalProperties": False}]})
    pda = GrammarCompiler(tokenizer_info, cache_size=0).compile_json_schema(schema).automaton
    reference = GrammarCompiler(tokenizer_info, cache_size=0).compile_json_schema(schema).automaton
    reference._walker = None
    state = pda.advance(pda.initial, b'{"a":"xy')
    assert len(state) == 2 and len({g for _, g in state}) == 1
    walker = pda._native_walker()
    row, _ = walker.trie(list(state), True)
    assert np.array_equal(row, reference.mask_words(state))
    walk = pda.token_ends(state)
    (token_ids, index), ends = walk.by_token(), walk.ends
    assert sorted(token_ids.tolist()) == np.flatnonzero(unpack_bitmask(row, tokenizer_info.vocab_size)).tolist()
    assert len(token_ids) > 40000 and state in ends  # most tokens stay in the string, both stacks kept
    rng = np.random.default_rng(5)
    quoted = [i for i, t in enumerate(token_ids.tolist()) if b'"' in tokenizer_info.token_bytes[t]]
    for i in set(rng.choice(len(token_ids), 1500).tolist()) | set(quoted):
        t = int(token_ids[i])
        assert pda.advance(state, tokenizer_info.token_bytes[t]) == ends[int(index[i])], t
    assert set(walker.end_states(list(state))) == set(ends)


@needs_c
def test_counted_rows_from_the_rows_by_count_are_the_filtered_walks(tokenizer_info, monkeypatch):
    """A counted plain string's inside rows for every (need, room) read from the cumulative
    rows built in C (a listing walk bucketed there, never listed in Python) are the tokens
    the character counts allow, packed one by one; far from both bounds the row walk's row,
    the same tokens, without listing them."""
    from constraints import leaves
    from constraints.json_leaves import string_dfa

    counted = leaves.CountedLeaf.of_plain_string(string_dfa(0, None, None, None), 1, 4)
    layout, checked, bucketed = tokenizer_info.layout, 0, 0
    monkeypatch.setattr(tokenizer_info, "leaf_walks", {})  # walked anew here, not shared with
    monkeypatch.setattr(tokenizer_info, "leaf_languages", {})  # walks of earlier tests
    for q in range(counted.dfa.num_states):
        walk = leaves.leaf_walk(tokenizer_info, counted.dfa, q, counted.starts_char)
        far = walk.inside_row(0, layout.columns.shape[0] + 1, tokenizer_info)  # far from both bounds
        rooms = [-1, 0, 1, 2, 5, 9, 17, 40, 79, 80, 81, walk.max_inside_count]
        cases = [(need, room) for need in range(0, 19, 3) for room in rooms]
        got = {case: walk.inside_row(*case, tokenizer_info) for case in cases}
        # a state that keeps many tokens (the body): the row walk and the C buckets answered,
        # no per-token lists; one that keeps a few was listed (cheaper there)
        assert bool(walk._listed) == (leaves._bits(walk.inside) < leaves._BUCKET_FROM), q
        bucketed += not walk._listed
        pos, count, closes, most = walk._listing(tokenizer_info)
        assert not len(count) or most == walk._by_count[2], q
        assert np.array_equal(far, pack_token_ids(layout.token_ids[pos], tokenizer_info.vocab_size)), q
        for need, room in cases:
            fits = (count <= room) & (~closes | (count >= need))
            want = pack_token_ids(layout.token_ids[pos[fits]], tokenizer_info.vocab_size)
            assert np.array_equal(got[need, room], want), (q, need, room)
            checked += int(fits.sum())
    assert checked > 100_000 and bucketed >= 1
    # A body whose bytes rise unevenly (random counts): its subtrees cannot be counted whole,
    # so the row walk counts them byte by byte; the buckets are still the listing's.
    body = int(counted.dfa.trans[0, ord('"')])
    uneven = np.random.default_rng(0).integers(0, 2, size=counted.starts_char.shape).astype(np.uint8)
    lex = layout.lexicographic_arrays()
    (pos, count, closes), _ = native.leaf_walk(native.module(), counted.dfa.trans, counted.dfa.accept, uneven, lex, body)
    open_rows, closing_rows, most = native.leaf_rows_by_count(
        native.module(), counted.dfa.trans, counted.dfa.accept, uneven, lex, body, tokenizer_info.vocab_size)
    assert most == int(count.max()) and len(count) > 40_000
    assert native.leaf_rows_by_count(native.module(), counted.dfa.trans, counted.dfa.accept, uneven * 4, lex, body,
                                     tokenizer_info.vocab_size) is None  # a count past 127: the listing's rows
    for c in (0, 1, 2, 5, 9, most):
        for rows, ends in ((open_rows, False), (closing_rows, True)):
            ids = layout.token_ids[pos[(count <= c) & (closes == ends)]]
            assert np.array_equal(rows[c], pack_token_ids(ids, tokenizer_info.vocab_size)), (c, ends)


@needs_c
@pytest.mark.parametrize("schema", SCHEMAS + [{"type": "array", "items": {"type": "string"}},
                                              {"type": "object", "additionalProperties": {"type": "string"}}])
def test_token_ends_equal_the_byte_graph_walk(tokenizer_info, schema):
    """The C walk's end states (where a plain string body's subtrees are taken whole, every
    token of one ending where it began) against the closing's byte-table walk of the
    vocabulary, at every state of random walks: the same tokens, each ending in the same
    state."""
    from constraints.closing import ClosingDistance

    pda = GrammarCompiler(tokenizer_info, cache_size=0).compile_json_schema(schema).automaton
    graph = ClosingDistance(pda)._graph
    compared = 0
    for seed in range(3):
        rng, state = np.random.default_rng(seed), pda.initial
        for _ in range(10):
            walk = pda.token_ends(state)
            (token_ids, index), ends = walk.by_token(), walk.ends
            want_ids, want_ends = graph.walk_vocab(graph.intern(state))
            order = np.argsort(want_ids)
            assert np.array_equal(np.sort(token_ids), want_ids[order])
            got = dict(zip(token_ids.tolist(), (ends[k] for k in index.tolist())))
            assert all(got[t] == graph.states[e] for t, e in zip(want_ids.tolist(), want_ends.tolist()))
            compared += len(token_ids)
            if not len(token_ids):
                break
            state = pda.advance(state, tokenizer_info.token_bytes[int(rng.choice(token_ids))])
    assert compared > 50


@needs_c
def test_token_rows_by_end_group_are_the_tokens_of_those_ends(tokenizer_info, monkeypatch):
    """The closing's budget rows packed in C from a walk's end indices (TokenEnds.rows): row g
    holds exactly the allowed tokens whose end state is in group g, as the per-token lists
    and numpy's packing give them (a string body's state: ~48k tokens, whole subtrees)."""
    from constraints.token_ends import TokenEnds

    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    pda = GrammarCompiler(tokenizer_info, cache_size=0).compile_json_schema(schema).automaton
    vocab = tokenizer_info.vocab_size
    checked = 0
    for prefix in (b'{"a":"x', b'{"a":"x"', b'{"b":1', b'{'):
        walk = pda.token_ends(pda.advance(pda.initial, prefix))
        token_ids, index = walk.by_token()
        for group in (np.arange(len(walk.ends)) % 2, np.full(len(walk.ends), -1) + (np.arange(len(walk.ends)) == 0)):
            rows = walk.rows(group, 2, vocab)
            for g in range(2):
                want = pack_token_ids(token_ids[group[index] == g], vocab)
                assert np.array_equal(rows[g], want), (prefix, g)
                checked += int((group[index] == g).sum())
            listed = TokenEnds(walk.ends, token_ids, index.astype(np.int32))  # the Python walk's form
            assert np.array_equal(listed.rows(group, 2, vocab), rows)
            monkeypatch.setattr(native, "module", lambda: None)  # numpy's packing
            assert np.array_equal(walk.rows(group, 2, vocab), rows)
            monkeypatch.undo()
    assert checked > 40_000
    with pytest.raises(ValueError, match="out of range"):
        walk.rows(np.full(len(walk.ends), 5), 2, vocab)


@needs_c
@pytest.mark.parametrize("schema", SCHEMAS, ids=["counted-formats", "counted-array", "two-counted", "recursion", "ambiguous"])
def test_the_c_advance_over_many_bytes_is_the_python_steps(tokenizer_info, schema):
    """A state after a long byte string (a closing's completion, runs of allowed tokens,
    strings that die on the way), stepped in C, is the state the automaton's own steps give
    (counts, calls and returns on the stack included), or None alike."""
    pda = GrammarCompiler(tokenizer_info, cache_size=0).compile_json_schema(schema).automaton
    walker = pda._native_walker()

    def python_steps(state, data):
        for b in data:
            state = pda._step(state, b)
            if state is None:
                return None
        return state

    rng = np.random.default_rng(5)
    compared = dead = 0
    for _ in range(4):
        state = pda.initial
        for _ in range(25):
            allowed = np.flatnonzero(unpack_bitmask(pda.mask_words(state), tokenizer_info.vocab_size))
            allowed = allowed[~np.isin(allowed, tokenizer_info.eos_token_ids)]
            if not len(allowed):
                break
            tokens = [int(t) for t in rng.choice(allowed, size=6)]
            data = b"".join(tokenizer_info.token_bytes[t] for t in tokens)  # often dies after the first
            completion = pda.shortest_completion(state, tokenizer_info.single_byte_tokens) or b""
            for probe in (data, completion, completion + b" ", data[:1] + completion):
                if not probe:
                    continue
                got = walker.advance(list(state), probe)
                assert got is not False and got == python_steps(state, probe)
                compared += 1
                dead += got is None
            state = pda.advance(state, tokenizer_info.token_bytes[tokens[0]])
    assert compared > 40 and 0 < dead < compared


@needs_c
def test_the_c_suffix_spellings_are_the_python_ones(tokenizer_info):
    """The closing's fewest-token spelling of every suffix (cost and first token's end) in C
    equals the Python program over the vocabulary's dict of spellings: on JSON-like ways,
    random bytes (suffixes no token spells: inf alike) and, continuing a shared tail, only
    the head."""
    from constraints.closing import ClosingDistance

    pda = GrammarCompiler(tokenizer_info).compile_json_schema(SCHEMAS[0]).automaton
    rng = np.random.default_rng(11)
    ways = [b'"}],"tags":["ab"]}', b'0,"sub":{"k":null}}', "é\"}]}\n".encode() * 3,
            bytes(rng.integers(0, 256, size=40, dtype=np.uint8)), b"\xff\xfe" + b"a" * 90]
    ways += [bytes(rng.choice(list(b'{}[]":,0123 abcXYZ\\n'), size=30)) for _ in range(30)]
    unspelled = 0
    for data in ways:
        native_side, python_side = ClosingDistance(pda), ClosingDistance(pda)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(native, "module", lambda: None)
            want = python_side._suffix_spellings(data)
            want_tail = python_side._suffix_spellings(b"x" + data)  # only the new head computed
        for got, expected in ((native_side._suffix_spellings(data), want),
                              (native_side._suffix_spellings(b"x" + data), want_tail)):
            assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
        unspelled += sum(math.isinf(c) for c in want[0])
    assert unspelled > 0


def _real_grammars(info):
    """(schema, automaton) of the test schemas and one dev schema per split that compiles."""
    for schema in SCHEMAS + _dev_schemas(1):
        try:
            yield schema, GrammarCompiler(info, cache_size=0).compile_json_schema(schema).automaton
        except Exception:  # noqa: BLE001 - a refused schema is not these tests' concern
            continue


@needs_c
def test_the_c_segment_descent_is_the_python_one(tokenizer_info):
    """A frame's way to its end (the closing's segmented bounds read it for every new state)
    from states along random walks of real grammars (counted strings, recursion, calls): the
    C descent gives the Python one's bytes, stack and position, and None where it does."""
    rng = np.random.default_rng(11)
    checked = counted = 0
    for schema, pda in _real_grammars(tokenizer_info):
        reference = GrammarCompiler(tokenizer_info, cache_size=0).compile_json_schema(schema).automaton
        reference._walker = None
        alphabet = tokenizer_info.single_byte_tokens
        dist, ref_dist = pda._grammar_distances(alphabet), reference._grammar_distances(alphabet)
        state = pda.initial
        for _ in range(30):
            for stack, g in state:
                for limit in (3, 400):  # the way cut short (None) and whole
                    got = pda._segment(stack, g, dist, alphabet, limit)
                    ref_dist.frame_ways.clear()
                    assert got == reference._segment(stack, g, ref_dist, alphabet, limit), (schema[:40], stack, g)
                    checked += 1
                    counted += pda._in_counted_of[g]
            allowed = np.flatnonzero(unpack_bitmask(pda.mask_words(state), tokenizer_info.vocab_size))
            allowed = allowed[~np.isin(allowed, tokenizer_info.eos_token_ids)]
            if not len(allowed):
                break
            state = pda.advance(state, tokenizer_info.token_bytes[int(rng.choice(allowed))])
    assert checked > 300 and counted > 10


@needs_c
def test_the_c_descent_byte_is_the_numpy_one(tokenizer_info):
    """The completion descent's next byte (one closer to the rule's end; in a counted leaf
    still short of characters, one that starts a character and keeps the distance) from
    every position of real grammars, counting and not, over two alphabets: C equals numpy."""
    from constraints import pushdown

    narrow = tokenizer_info.single_byte_tokens.copy()
    narrow[[ord(c) for c in " !#$%&'()*+0"]] = False  # a counted string's first choices
    alphabets = [tokenizer_info.single_byte_tokens, np.ones(256, dtype=bool), narrow]
    checked = moved = 0
    for _, pda in _real_grammars(tokenizer_info):
        for alphabet in alphabets:
            dist = pda._grammar_distances(alphabet)
            for g in range(len(pda._final)):
                for counting in (False, True):
                    dist.moves.clear()
                    got = pda._descent_move(g, counting, dist, alphabet)
                    dist.moves.clear()
                    with pytest.MonkeyPatch.context() as mp:
                        mp.setattr(pushdown.native, "module", lambda: None)
                        want = pda._descent_move(g, counting, dist, alphabet)
                    assert got == want, (g, counting)
                    checked += 1
                    moved += want is not None and want[0] >= 0
    assert checked > 1000 and moved > 200


def _after(dfa, text: bytes) -> int:
    q = 0
    for b in text:
        q = int(dfa.trans[q, b])
        assert q >= 0, text
    return q


@needs_c
def test_leaf_states_of_one_language_share_one_walk(tokenizer_info, monkeypatch):
    """A plain string's body and the body of a string of at least two characters once two are
    written accept the same language (any characters, then the closing quote), and so do two
    patterns' bodies after their different prefixes: numbered alike though their state numbers
    differ, each pair takes one walk, the walk the second would have computed. A body that
    forbids one letter, or counts one byte differently, is told apart (exactly, not by the
    hash)."""
    from constraints import leaves
    from constraints.json_leaves import string_dfa

    mod, lex = native.module(), tokenizer_info.layout.lexicographic_arrays()
    plain, two = string_dfa(0, None, None, None), string_dfa(2, None, None, None)
    ab, cd, no_z = (string_dfa(0, None, p, None) for p in ("^ab", "^cd", "^ab[^z]*$"))
    body, body_two = _after(plain, b'"'), _after(two, b'"ab')
    after_ab, after_cd, after_no_z = _after(ab, b'"ab'), _after(cd, b'"cd'), _after(no_z, b'"ab')
    assert two.num_states != plain.num_states and body_two != body  # renamed, not copied

    def tables(dfa, starts=None):
        return (dfa.trans, dfa.accept, starts)

    for (a, qa), (b, qb) in [((plain, body), (two, body_two)), ((ab, after_ab), (cd, after_cd))]:
        found = mod.right_hash(*tables(a), qa, 64)
        assert found == mod.right_hash(*tables(b), qb, 64) and found[1] >= 2  # (hash, states reached)
        assert mod.same_right(*tables(a), qa, *tables(b), qb)
    assert not mod.same_right(*tables(ab), after_ab, *tables(no_z), after_no_z)
    assert mod.right_hash(*tables(no_z), after_no_z, 64) != mod.right_hash(*tables(ab), after_ab, 64)
    assert not mod.same_right(*tables(plain), body, *tables(ab), after_ab)
    counts = leaves._char_starts(plain).astype(np.uint8)
    other = counts.copy()
    other[body, ord("q")] = 2
    assert mod.same_right(*tables(plain, counts), body, *tables(plain, counts), body)
    assert not mod.same_right(*tables(plain, counts), body, *tables(plain, other), body)
    assert not mod.same_right(*tables(plain, counts), body, *tables(plain), body)
    assert mod.right_hash(*tables(plain), body, 1) is None  # more states than asked for

    monkeypatch.setattr(tokenizer_info, "leaf_walks", {})  # walks of earlier tests aside
    monkeypatch.setattr(tokenizer_info, "leaf_languages", {})
    for (a, qa), (b, qb), (c, qc) in [((plain, body), (two, body_two), (ab, after_ab)),
                                      ((ab, after_ab), (cd, after_cd), (no_z, after_no_z))]:
        first = leaves.leaf_walk(tokenizer_info, a, qa)
        shared = leaves.leaf_walk(tokenizer_info, b, qb)
        assert shared is first
        row, (exit_pos, exit_col, _) = native.leaf_row(mod, b.trans, b.accept, lex, qb, tokenizer_info.vocab_size)
        assert np.array_equal(shared.inside, row)
        assert sorted(zip(shared.exit_pos.tolist(), shared.exit_col.tolist())) == sorted(
            zip(exit_pos.tolist(), exit_col.tolist()))
        assert leaves.leaf_walk(tokenizer_info, c, qc) is not first
    # every hash alike: the exact comparison alone keeps different languages apart
    monkeypatch.setattr(tokenizer_info, "leaf_walks", {})
    monkeypatch.setattr(tokenizer_info, "leaf_languages", {})
    monkeypatch.setattr(mod, "right_hash", lambda *args: (7, 1))
    first = leaves.leaf_walk(tokenizer_info, ab, after_ab)
    assert leaves.leaf_walk(tokenizer_info, cd, after_cd) is first
    assert leaves.leaf_walk(tokenizer_info, no_z, after_no_z) is not first
