"""Token masks on real schemas against brute force: at states met on seeded random walks
through the masks, the row allows exactly the tokens the automaton advances on (each token's
bytes tried one by one) and EOS exactly where it accepts. Covers the shared leaf walks (string
bodies, formats, patterns with length bounds, counted strings), the structural trie walk and
the token walks that leave a leaf. The closing search's guided descent is checked against the
breadth-first search it replaces: the same shortest way length from every sampled state."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from constraints import GrammarCompiler
from constraints.bitmask import unpack_bitmask
from constraints.closing import ClosingDistance

DATA = Path(__file__).resolve().parents[3] / "shared/data"
BENCH = DATA / "jsonschemabench-dev"
SUITE = DATA / "json-schema-test-suite/tests/draft2020-12"
BENCH_SCHEMAS = ["Github-Medium/o65427.json", "Snowplow/sp_353_Normalized.json",
                 "GlaiveAI-2K/book_flight_e9f45f3c.json", "Kubernetes/kb_1015_Normalized.json",
                 "WashingtonPost/wp_101_Normalized.json", "Github-Easy/o10337.json"]
SUITE_SCHEMAS = [
    {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "minLength": 2, "maxLength": 40},
    # A pattern under a long maxLength: its leaf positions share walks (equivalent_within).
    {"type": "string", "pattern": "^[\\w /-]+\\.[0-9a-zA-Z]+$", "minLength": 1, "maxLength": 300},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
                                      "mail": {"type": "string", "format": "email"},
                                      "n": {"type": "integer", "minimum": -5, "maximum": 900}},
     "required": ["when", "mail", "n"]},
]
SUITE_FILES = ["minLength.json", "pattern.json", "ref.json", "items.json", "anyOf.json"]
STEPS = 24
SAMPLED = (0, 1, 2, 3, 5, 8, 13, 23)


def _schemas() -> list:
    out = [pytest.param(json.dumps(s), id=f"inline{i}") for i, s in enumerate(SUITE_SCHEMAS)]
    out += [pytest.param(name, id=name) for name in BENCH_SCHEMAS]
    out += [pytest.param(f"suite:{name}", id=f"suite-{name}") for name in SUITE_FILES]
    return out


def _load(spec: str) -> list[str]:
    if spec.startswith("{"):
        return [spec]
    if spec.startswith("suite:"):
        path = SUITE / spec.split(":", 1)[1]
        if not path.is_file():
            pytest.skip(f"{path} not present")
        return [json.dumps(g["schema"]) for g in json.loads(path.read_text())[:3]]
    path = BENCH / spec
    if not path.is_file():
        pytest.skip(f"{path} not present")
    return [path.read_text()]


def _brute_force_row(automaton, state) -> np.ndarray:
    info = automaton.info
    bits = np.zeros(info.vocab_size, dtype=bool)
    for t, data in enumerate(info.token_bytes):
        if data and automaton.advance(state, data) is not None:
            bits[t] = True
    if automaton.is_accepting(state):
        bits[list(info.eos_token_ids)] = True
    return bits


def _walk_states(automaton, seed: int) -> list:
    rng = np.random.default_rng(seed)
    state, states = automaton.initial, []
    for step in range(STEPS):
        if step in SAMPLED:
            states.append(state)
        ids = automaton.allowed_token_ids(state)
        if not len(ids):
            break
        state = automaton.advance(state, automaton.info.token_bytes[int(rng.choice(ids))])
    return states


@pytest.mark.parametrize("spec", _schemas())
def test_masks_equal_brute_force_on_real_schemas(tokenizer_info, spec):
    compiler = GrammarCompiler(tokenizer_info, compile_timeout_s=30.0)  # fresh automata
    checked = 0
    for k, text in enumerate(_load(spec)):
        try:
            automaton = compiler.compile_json_schema(text).automaton
        except Exception:  # noqa: BLE001 - refused schemas have no masks to check
            continue
        for state in _walk_states(automaton, seed=k):
            got = unpack_bitmask(automaton.mask_row(state), tokenizer_info.vocab_size)
            want = _brute_force_row(automaton, state)
            assert np.array_equal(got, want), np.nonzero(got != want)[0][:10]
            checked += 1
    if not checked:
        pytest.skip("no schema of this group compiles")


def test_counted_string_masks_at_every_count(tokenizer_info):
    """A string with both length bounds, written one character at a time: at every count the
    row equals brute force. The tokens that leave the string (a closing quote and what
    follows) depend on the characters still needed and those still allowed, both: a row
    kept for one count must not serve another."""
    compiler = GrammarCompiler(tokenizer_info, compile_timeout_s=30.0)
    schema = {"type": "object", "required": ["s", "n"], "properties": {
        "s": {"type": "string", "minLength": 2, "maxLength": 6}, "n": {"type": "integer"}}}
    automaton = compiler.compile_json_schema(json.dumps(schema)).automaton
    state = automaton.advance(automaton.initial, b'{"s":"')
    for ch in b"abcdef":
        got = unpack_bitmask(automaton.mask_row(state), tokenizer_info.vocab_size)
        assert np.array_equal(got, _brute_force_row(automaton, state)), chr(ch)
        state = automaton.advance(state, bytes([ch]))
    got = unpack_bitmask(automaton.mask_row(state), tokenizer_info.vocab_size)
    want = _brute_force_row(automaton, state)
    assert np.array_equal(got, want)
    assert want[tokenizer_info.token_bytes.index(b'",')]  # the string may close at six


@pytest.mark.parametrize("spec", BENCH_SCHEMAS[:4])
def test_guided_closing_search_finds_a_shortest_way(tokenizer_info, spec):
    compiler = GrammarCompiler(tokenizer_info, compile_timeout_s=30.0)
    automaton = compiler.compile_json_schema(_load(spec)[0]).automaton
    closing = ClosingDistance(automaton)
    for state in _walk_states(automaton, seed=1):
        sid = closing._graph.intern(state)
        guided = closing._guided_path(sid)
        breadth_first = closing._shortest_bytes(sid, closing._single_bytes)
        assert guided is not None and breadth_first is not None
        assert len(guided[0]) == len(breadth_first[0])
        assert automaton.is_accepting(automaton.advance(state, guided[0]) if guided[0] else state)


@pytest.mark.parametrize("fmt,pattern,hi", [("uri", None, None), ("email", None, None),
                                            (None, "^[a-z]+(-[a-z]+)*$", 40)])
def test_grouped_leaf_walks_equal_token_by_token_walks(tokenizer_info, fmt, pattern, hi, monkeypatch):
    """Leaf walks over token groups (the Python walk, a leaf's third wide walk on) give the
    same tokens, exits, character counts and ends as walking every token; the walk the
    grammars read (the C row walk where it builds) keeps the same tokens and exits."""
    from constraints import native
    from constraints.json_leaves import string_dfa
    from constraints.leaves import _GROUP_AFTER, _spellings, _walk, _walked, leaf_walk

    dfa = string_dfa(0, hi, pattern, fmt)
    for _ in range(_GROUP_AFTER):
        _spellings(tokenizer_info, dfa, None)
    assert _spellings(tokenizer_info, dfa, None) is not None  # grouping is what is tested
    layout = tokenizer_info.layout
    for q in range(min(dfa.num_states, 10)):
        walk = leaf_walk(tokenizer_info, dfa, q)
        first = layout.starting_with(np.nonzero(dfa.trans[q, :256] >= 0)[0])
        inside, exits = _walk(layout, dfa, q, None, first)
        with monkeypatch.context() as m:
            m.setattr(native, "module", lambda: None)
            pos, count, closes, exit_pos, exit_col, exit_count = _walked(tokenizer_info, dfa, q, None)
        assert sorted(zip(pos.tolist(), count.tolist(), closes.tolist())) == sorted(zip(*(a.tolist() for a in inside)))
        assert sorted(zip(exit_pos.tolist(), exit_col.tolist(), exit_count.tolist())) == \
            sorted(zip(*(a.tolist() for a in exits)))
        assert sorted(zip(walk.exit_pos.tolist(), walk.exit_col.tolist())) == \
            sorted(zip(exits[0].tolist(), exits[1].tolist()))
        ids = np.nonzero(unpack_bitmask(walk.inside, tokenizer_info.vocab_size))[0]
        assert sorted(ids.tolist()) == sorted(layout.token_ids[inside[0]].tolist())


def test_successor_is_above_every_extension_and_below_the_rest():
    # The trie walk's forced runs cut the sorted vocabulary at successor(prefix).
    from bisect import bisect_left

    from constraints.pda_trie import successor

    assert successor(b"\xff\xff") is None
    words = sorted([b"ab", b"ab\xff", b"ab\xff\xff1", b"abc", b"ac", b"a\xff", b"b", b"aa"])
    for prefix in (b"a", b"ab", b"ab\xff", b"a\xff"):
        start = bisect_left(words, prefix)
        end = bisect_left(words, successor(prefix))
        assert words[start:end] == [w for w in words if w.startswith(prefix)]


def test_prefix_index_is_the_sorted_vocabulary_bisected(tokenizer_info):
    # The key runs read prefix_starts where they used to bisect: every token prefix maps to
    # the first sorted token with it, and a prefix no token has is absent.
    from bisect import bisect_left

    tokens = tokenizer_info.layout.lexicographic()[0]
    starts = tokenizer_info.layout.prefix_starts()
    prefixes = {t[:n] for t in tokens for n in range(1, len(t) + 1)}
    assert set(starts) == prefixes
    rng = np.random.default_rng(0)
    sample = [tokens[i][:n] for i in rng.choice(len(tokens), 3000).tolist()
              for n in {1, max(1, len(tokens[i]) // 2), len(tokens[i])}]
    for p in sample:
        assert starts[p] == bisect_left(tokens, p)
    for p in (b"\x00\x00\x00zz", b'":{"zzqx', bytes([0xff]) * 3):
        assert p not in starts


@pytest.mark.parametrize("first", [[], [34], [34, 44, 93, 125], list(range(48, 58)), list(range(32, 127)),
                                   list(range(256))])
def test_starting_with_gives_the_tokens_of_those_first_bytes_ascending(tokenizer_info, first):
    # Either way it takes (groups joined and sorted, or one scan of the first byte column).
    layout = tokenizer_info.layout
    got = layout.starting_with(np.array(first, dtype=np.int64))
    assert np.array_equal(got, np.nonzero(np.isin(layout.columns[0], first))[0])


@pytest.mark.parametrize("count", [0, 1, 7, 23, 24, 25, 400])
def test_packed_rows_set_exactly_the_given_ids(count):
    # Under 24 ids bits are set one at a time in a bytearray, above by numpy packing.
    from constraints.bitmask import pack_token_ids

    vocab = 49152
    ids = np.sort(np.random.default_rng(count).choice(vocab, count, replace=False))
    row = pack_token_ids(ids, vocab)
    assert row.dtype == np.int32 and row.shape == ((vocab + 31) // 32,)
    assert np.nonzero(unpack_bitmask(row, vocab))[0].tolist() == ids.tolist()
    row |= 1  # writable (rows are OR-ed into new arrays, and copied into torch)


_SHORT = {"type": "string", "maxLength": 10}
_TWO_CALLERS = {"anyOf": [  # after "a" one branch needs "b", the other may close
    {"type": "object", "properties": {"a": _SHORT, "b": {"type": "integer"}}, "required": ["a", "b"],
     "additionalProperties": False},
    {"type": "object", "properties": {"a": _SHORT}, "required": ["a"], "additionalProperties": False}]}


@pytest.mark.parametrize("schema,prefix,texts", [
    (None, b'{"manifest_version":2,"name":"', (b"", b"Sci", b"x" * 30, b"y" * 44)),
    (_TWO_CALLERS, b'{"a":"', (b"", b"x", b"xyz" * 3)),
], ids=["chrome-manifest", "two-callers"])
def test_configurations_of_one_counted_string_under_several_callers(tokenizer_info, schema, prefix, texts):
    # Chrome's manifest: "name" (maxLength 45) may be followed by any of several property
    # orders, so inside its value the state holds one counted configuration per caller, all
    # with one count: their rows are built together (pushdown._counted_row) and must still
    # allow exactly the tokens the automaton advances on, each caller's exits included.
    if schema is None:
        path = BENCH / "Github-Hard/o58639.json"
        if not path.is_file():
            pytest.skip(f"{path} not present")
        schema = path.read_text()
    automaton = GrammarCompiler(tokenizer_info, compile_timeout_s=30.0).compile_json_schema(schema).automaton
    state = automaton.advance(automaton.initial, prefix)
    for text in texts:
        here = automaton.advance(state, text) if text else state
        counted = [c for c in here if automaton._in_counted_of[c[1]]]
        assert len(counted) > 1 and len({(c[1], c[0][-1]) for c in counted}) < len(counted)
        got = unpack_bitmask(automaton.mask_row(here), tokenizer_info.vocab_size)
        want = _brute_force_row(automaton, here)
        assert np.array_equal(got, want), np.nonzero(got != want)[0][:10]
