"""Leaves as shared rules: length-bounded strings keep a count instead of a DFA per length,
and token walks through a leaf are reused by every grammar of the tokenizer."""

from __future__ import annotations

import json

import numpy as np
import pytest
from schema_suite_runner import accepted_by_masks, accepted_by_tokens, byte_vocab_info

from constraints import GrammarCompiler
from constraints.pushdown import PushdownAutomaton


@pytest.fixture(scope="module")
def byte_compiler() -> GrammarCompiler:
    return GrammarCompiler(byte_vocab_info(), cache_size=0)


def _text(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize("lo,hi", [(0, 4096), (22, 4096), (3, 3), (5, None), (1, 20)])
def test_length_bounds_are_exact_at_both_edges(byte_compiler, lo, hi):
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": lo,
              **({} if hi is None else {"maxLength": hi})}}, "required": ["s"]}
    grammar = byte_compiler.compile_json_schema(schema)
    assert max(d.num_states for d in grammar.automaton.rules) < 100  # no state per length
    top = hi if hi is not None else lo + 40
    for n in sorted({lo, top, max(lo - 1, 0), top + 1, (lo + top) // 2}):
        ok = lo <= n and (hi is None or n <= hi)
        # escapes and multi-byte characters count as one character each
        for body in ("a" * n, ("é\n" * n)[:n]):
            assert accepted_by_masks(grammar, _text({"s": body})) == ok, (n, body[:8])


def test_every_character_has_one_spelling(byte_compiler):
    """json.dumps's spelling only: a short escape where JSON has one, else \\u00xx in lower
    case for a control, the character itself otherwise; every control character is written."""
    grammar = byte_compiler.compile_json_schema({"type": "string", "maxLength": 1})
    for code in range(0x20):
        ch = chr(code)
        assert accepted_by_masks(grammar, json.dumps(ch).encode()), hex(code)
        others = {f'"\\u{code:04x}"', f'"\\u{code:04X}"'} - {json.dumps(ch)}
        assert not any(accepted_by_masks(grammar, t.encode()) for t in others), hex(code)
    assert not accepted_by_masks(grammar, b'"\\u0061"') and not accepted_by_masks(grammar, b'"\\/"')


def test_counted_strings_with_a_real_tokenizer(tokenizer_info, hf_tokenizer):
    compiler = GrammarCompiler(tokenizer_info, cache_size=0)
    grammar = compiler.compile_json_schema(
        {"type": "object", "properties": {"code": {"type": "string", "minLength": 6, "maxLength": 9}},
         "required": ["code"]})
    for n in range(4, 12):
        text = json.dumps({"code": "internationalization"[:n]}, separators=(",", ":"))
        assert accepted_by_tokens(grammar, hf_tokenizer, text) == (6 <= n <= 9), n


def test_a_new_schema_reuses_leaf_walks(tokenizer_info):
    """The second schema's string-body masks come from walks the first one computed."""
    compiler = GrammarCompiler(tokenizer_info, cache_size=0)
    text = '{"a":"hello world, this is text"}'
    for name in ("first", "second"):
        grammar = compiler.compile_json_schema(
            {"type": "object", "properties": {"a": {"type": "string"}, name: {"type": "integer"}},
             "required": ["a"]})
        assert isinstance(grammar.automaton, PushdownAutomaton)
        before = len(tokenizer_info.leaf_walks)
        m = grammar.matcher()
        assert m.accept_string(text[:6])
        grammar.automaton.mask_row(m._state)
        if name == "second":
            assert len(tokenizer_info.leaf_walks) == before  # nothing new inside the string


def test_a_pattern_under_a_long_max_length_walks_once_per_distinct_position(tokenizer_info):
    """Far from the maximum every length walks the vocabulary alike: a long string of the
    pattern computes a handful of leaf walks, not one per token, and the masks still end
    the string at exactly maxLength characters."""
    compiler = GrammarCompiler(tokenizer_info, cache_size=0)
    grammar = compiler.compile_json_schema(
        {"type": "string", "pattern": r"^[a-z ]+\.[a-z]+$", "maxLength": 400})
    m = grammar.matcher()
    before = len(tokenizer_info.leaf_walks)
    assert m.accept_string('"' + "an " * 60)  # 180 characters, about 60 tokens
    walks_in_string = 0
    for _ in range(40):
        grammar.automaton.mask_row(m._state)
        walks_in_string = len(tokenizer_info.leaf_walks) - before
        assert m.accept_string("an ")
    assert walks_in_string <= 8
    ok = grammar.matcher()
    assert ok.accept_string('"' + "a" * 397 + '.ab"') and ok.is_terminated()
    assert not grammar.matcher().accept_string('"' + "a" * 398 + '.ab"')


@pytest.mark.parametrize("lo,hi", [(3, None), (2, 6), (1, 1024)])
def test_patterned_strings_keep_their_length_bounds(byte_compiler, lo, hi):
    """A pattern with length bounds; a maxLength too long for one automaton is cut to one
    that fits, so every output is still within the schema's bounds."""
    schema = {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "minLength": lo,
              **({} if hi is None else {"maxLength": hi})}
    grammar = byte_compiler.compile_json_schema(schema)
    for n in range(0, 12):
        word = ("ab-c" * 4)[:n]
        ok = lo <= n <= (hi or n) and not word.endswith("-") and (n == 0 or word[0] != "-")
        ok = ok and n > 0
        assert accepted_by_masks(grammar, _text(word)) == ok, word
    if hi == 1024:
        assert not accepted_by_masks(grammar, _text("a" * 1025))


def test_a_pattern_with_long_length_bounds_keeps_them_all(byte_compiler):
    """An ARN pattern (50 states) under maxLength 128: its product with a character count
    has few reachable (state, count) pairs, so it is built exact; the old cut to the
    longest maximum that fit a full product (80 here) left no ARN at all."""
    arn = "^arn:(aws|aws-cn):datasync:[a-z\\-0-9]+:[0-9]{12}:agent/agent-[0-9a-z]{17}$"
    grammar = byte_compiler.compile_json_schema({"type": "string", "maxLength": 128, "minLength": 65, "pattern": arn})
    for n, ok in ((1, False), (4, False), (5, True), (9, True), (68, True), (69, False)):
        text = f"arn:aws:datasync:{'r' * n}:123456789012:agent/agent-0123456789abcdefg"  # 60 + n characters
        assert accepted_by_masks(grammar, _text(text)) == ok, (len(text), text)
    assert not accepted_by_masks(grammar, _text("arn:aws:datasync:r:1:agent/agent-0123456789abcdefg" + "x" * 20))


CLASS_RUNS = [
    ({"pattern": "^[0-9a-zA-Z_-]{1,255}$"}, (1, 255)),
    ({"pattern": "^[0-9a-zA-Z\\.\\-_]+$", "minLength": 3, "maxLength": 63}, (3, 63)),
    ({"pattern": "^[A-Fa-f\\d]{24}$"}, (24, 24)),
    ({"pattern": "^[a-zé-]{2,40}$", "maxLength": 12}, (2, 12)),
    ({"pattern": "^\\d*$", "minLength": 9}, (9, None)),
]


@pytest.mark.parametrize("schema,bounds", CLASS_RUNS, ids=lambda x: json.dumps(x)[:40])
def test_a_class_repeated_is_a_counted_leaf(byte_compiler, schema, bounds):
    """``^C{m,n}$`` with minLength/maxLength keeps one count over C* (a shared leaf of a few
    states, not a state per length), with the pattern's and the schema's bounds merged; the
    masks accept exactly what the validator does at every edge, multi-byte characters
    counted once."""
    import jsonschema

    schema = {"type": "string", **schema}
    grammar = byte_compiler.compile_json_schema({"type": "object", "properties": {"s": schema}, "required": ["s"]})
    counted = [(c.lo, c.hi) for c in grammar.automaton._counted if c is not None]
    assert counted == [bounds] and max(d.num_states for d in grammar.automaton.rules) < 12
    lo, hi = bounds
    top = hi if hi is not None else lo + 20
    for n in sorted({0, 1, lo - 1, lo, lo + 1, top - 1, top, top + 1, 300}):
        for ch in ("a", "é", "F.", "_", "0"):
            body = (ch * max(n, 0))[:max(n, 0)]
            ok = jsonschema.Draft202012Validator(schema).is_valid(body)
            assert accepted_by_masks(grammar, _text({"s": body})) == ok, (n, body[:6], ok)


def test_a_unicode_category_repeated_is_a_counted_leaf(byte_compiler):
    """``^\\p{Lu}{2,30}$`` under maxLength 20 (a category Python's re cannot read, so the
    expected answers are written out): counted, upper-case letters of any script only."""
    grammar = byte_compiler.compile_json_schema({"type": "string", "pattern": "^\\p{Lu}{2,30}$", "maxLength": 20})
    assert [(c.lo, c.hi) for c in grammar.automaton._counted if c is not None] == [(2, 20)]
    for text, ok in (("AB", True), ("ÉÀ", True), ("A" * 20, True), ("Ω" * 20, True), ("A" * 21, False),
                     ("A", False), ("Ab", False), ("A1", False), ("", False)):
        assert accepted_by_masks(grammar, _text(text)) == ok, text


def test_a_class_of_multi_byte_characters_only_stays_one_automaton(byte_compiler):
    """The grammar's distances count a character still needed as one byte: a class with no
    ASCII character keeps its automaton per length (still exact)."""
    schema = {"type": "string", "pattern": "^[éü]{1,30}$"}
    grammar = byte_compiler.compile_json_schema(schema)
    assert not any(c is not None for c in getattr(grammar.automaton, "_counted", ()))
    for n in (0, 1, 30, 31):
        assert accepted_by_masks(grammar, _text("é" * n)) == (1 <= n <= 30), n


def test_any_value_is_walked_whole_when_a_grammar_first_calls_it():
    """An unconstrained value ({}) is one shared leaf of hundreds of states: the first grammar
    of a tokenizer that calls it walks every state at compile, so no fill inside a value
    walks the vocabulary, however deep the output goes, and the masks stay exact."""
    info = byte_vocab_info()  # a tokenizer of its own: nothing walked before
    compiler = GrammarCompiler(info, cache_size=0)
    grammar = compiler.compile_json_schema({"type": "object", "properties": {"x": {}}, "required": ["x"]})
    walked = len(info.leaf_walks)
    assert walked > 300
    text = b'{"x":{"a":[1,{"b":"q\\n","c":-2.5e3}],"d":[true,null]}}'
    m = grammar.matcher()
    for i in range(len(text)):
        grammar.automaton.mask_row(m._state)
        assert m.accept_string(text[i:i + 1])
    assert m.can_terminate() and len(info.leaf_walks) == walked
    assert not accepted_by_masks(grammar, b'{"x":{"a":[1,}}')


def _generated_language(grammar, max_len: int) -> set[bytes]:
    """Every text the masks let through, EOS included, by exhaustive search over bytes."""
    from constraints import allocate_token_bitmask
    from constraints.bitmask import unpack_bitmask

    eos = grammar.automaton.info.eos_token_ids[0]
    bm = allocate_token_bitmask(1, grammar.vocab_size)
    out: set[bytes] = set()
    matcher = grammar.matcher()

    def visit(text: bytes) -> None:
        matcher.fill_next_token_bitmask(bm, 0)
        allowed = np.nonzero(unpack_bitmask(bm[0], grammar.vocab_size))[0].tolist()
        for t in allowed:
            if t == eos:
                out.add(text)
            elif len(text) < max_len:
                assert matcher.accept_token(t)
                visit(text + bytes([t]))
                matcher.rollback(1)

    visit(b"")
    return out


FINITE = [
    ({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"enum": ["x", "y", None]}},
      "required": ["a"], "additionalProperties": False},
     [{"a": a, **({} if b == "-" else {"b": b})} for a in (True, False) for b in ("-", "x", "y", None)]),
    ({"type": "array", "items": {"enum": [1, 2]}, "maxItems": 2},
     [[], [1], [2], [1, 1], [1, 2], [2, 1], [2, 2]]),
    ({"anyOf": [{"const": 1}, {"enum": [2, "a", "b"]}], "not": {"const": "a"}}, [1, 2, "a", "b"]),
    ({"oneOf": [{"type": "integer", "enum": [1, 2]}, {"type": "string", "enum": ["1"]}]}, [1, 2, "1"]),
    ({"type": "string", "pattern": "^[ab]*$", "maxLength": 2}, ["", "a", "b", "aa", "ab", "ba", "bb"]),
    ({"type": "string", "minLength": 1, "maxLength": 2, "enum": ["", "q", "qq", "qqq"]}, ["", "q", "qq", "qqq"]),
]


@pytest.mark.parametrize("schema,candidates", FINITE, ids=lambda x: json.dumps(x)[:50])
def test_a_finite_language_is_generated_exactly(byte_compiler, schema, candidates):
    """The masks generate exactly the candidates the schema accepts (in compact form, keys
    in schema order): nothing invalid, nothing valid left out."""
    import jsonschema

    grammar = byte_compiler.compile_json_schema(schema)
    expected = {_text(c) for c in candidates if jsonschema.Draft202012Validator(schema).is_valid(c)}
    generated = _generated_language(grammar, 40)
    # A listed whole number is also spelled with ".0" (the same value): compare values.
    assert {_text(_whole(json.loads(t))) for t in generated} == expected
    assert all(jsonschema.Draft202012Validator(schema).is_valid(json.loads(t)) for t in generated)


def _whole(value):
    if isinstance(value, list):
        return [_whole(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    return int(value) if isinstance(value, float) and value.is_integer() else value


def test_a_listed_whole_number_is_spelled_both_ways(byte_compiler):
    """2 and 2.0 are one JSON value: const 2.0 accepts 2, enum [3] accepts 3.0, and nothing else."""
    assert _generated_language(byte_compiler.compile_json_schema({"const": -2.0}), 8) == {b"-2.0", b"-2"}
    assert _generated_language(byte_compiler.compile_json_schema({"enum": [3, 1.5, "4"]}), 8) == {
        b"3", b"3.0", b"1.5", b'"4"'}


def test_leaves_kept_by_content_keep_one_copy_of_a_leaf_walked_whole(monkeypatch):
    """A full registry of leaves loaded by content is cleared, but a leaf marked to be walked
    whole stays the one object: else every clearing would mark (and walk) another copy."""
    from constraints import leaves

    monkeypatch.setattr(leaves, "_SAME", {})
    monkeypatch.setattr(leaves, "_WALKED_WHOLE", [])
    monkeypatch.setattr(leaves, "_same_bytes", 0)
    marked = leaves.same_leaf(np.full((3, 256), -1, np.int32), np.array([False, False, True]), True)
    monkeypatch.setattr(leaves, "_SAME_MAX", 2)
    for n in range(4, 9):
        plain = leaves.same_leaf(np.full((n, 256), -1, np.int32), np.zeros(n, dtype=bool))
        assert plain is leaves.same_leaf(plain.trans.copy(), plain.accept.copy())  # by content
    assert leaves.same_leaf(np.full((3, 256), -1, np.int32), np.array([False, False, True]), True) is marked
    assert sum(d is marked for d in leaves._WALKED_WHOLE) == 1


def test_a_pattern_under_several_length_bounds_is_parsed_once(byte_compiler, monkeypatch):
    """AWS writes its tag pattern under maxLength 128 (keys) and 256 (values): the pattern's
    strings are built once and cut to each bound, and each bound holds exactly."""
    import constraints.json_leaves as jl

    calls = []
    real = jl.search_dfa
    monkeypatch.setattr(jl, "search_dfa", lambda pattern, budget: calls.append(pattern) or real(pattern, budget))
    pattern = "^k[0-9]*z-once$"  # not met elsewhere in the suite (the leaf caches are per process)
    schema = {"type": "object", "properties": {
        "key": {"type": "string", "pattern": pattern, "maxLength": 9},
        "value": {"type": "string", "pattern": pattern, "maxLength": 12}}}
    grammar = byte_compiler.compile_json_schema(schema)
    assert calls == [pattern]
    for key, value, ok in [("k1z-once", "k1234z-once", True), ("k12z-once", "k12345z-once", True),
                           ("k123z-once", "k1z-once", False), ("k1z-once", "k123456z-once", False),
                           ("k1z-onc", "k1z-once", False)]:
        assert accepted_by_masks(grammar, _text({"key": key, "value": value})) is ok, (key, value)


PATTERN_COUNTS = [
    # (schema, the pattern's fewest characters, texts of a length: n -> strings to try)
    ({"pattern": "^[\\w /-]+\\.[0-9a-zA-Z]+$", "minLength": 1, "maxLength": 12}, 3,
     lambda n: ["a" * (n - 2) + ".b", "a b" + "-" * (n - 5) + ".z", "x." + "9" * (n - 2), "a" * n, ".b" + "c" * (n - 2)]),
    ({"pattern": "^arn:aws:iam::\\d{12}:role/.+$", "maxLength": 40}, 32,
     lambda n: ["arn:aws:iam::123456789012:role/" + "r" * (n - 31), "arn:aws:iam::12345678901:role/" + "é" * (n - 30),
                "arn:aws:iam::123456789012:role" + "/" * (n - 30)]),
    # bytes that raise the count by more than one: a detour (https against s3), a lost
    # partial match (an x not followed by a digit), a separator that needs one more character
    ({"pattern": "^(https|s3)://([^/]+)/?(.*)$", "maxLength": 16}, 6,
     lambda n: ["s3://" + "b" * (n - 5), "https://" + "h" * (n - 8), "https://a/" + "p" * (n - 10), "http://" + "x" * (n - 7)]),
    ({"pattern": "x[0-9]y", "maxLength": 10}, 3,
     lambda n: ["x1y" + "x" * (n - 3), "x" * (n - 3) + "x0y", "xx1" * (n // 3), "x5" + "y" * (n - 2)]),
    ({"pattern": "^[a-zA-Z0-9](-*[a-zA-Z0-9])*$", "minLength": 1, "maxLength": 9}, 1,
     lambda n: ["a" * n, "a" + "-" * (n - 2) + "b", "a-" * (n // 2) + "b", "a" + "-" * (n - 1)]),
    ({"pattern": "[0-9]", "maxLength": 9}, 1,  # a search: a digit anywhere
     lambda n: ["1" + "é" * (n - 1), "日" * (n - 1) + "0", "x" * n, "-x5y" + "x" * (n - 4)]),
    ({"pattern": "^[a-zé]+-[0-9]+$", "maxLength": 10}, 3,
     lambda n: ["é" * (n - 2) + "-1", "a-" + "0" * (n - 2), "é-" * (n // 2), "a" * n]),
    # a minimum above the pattern's own: every state loops on an ASCII character
    ({"pattern": "^[a-z]+[0-9]*$", "minLength": 4, "maxLength": 9}, 1,
     lambda n: ["a" * n, "a" + "1" * (n - 1), "ab" + "2" * (n - 2), "1" * n, "a1" + "b" * (n - 2)]),
    ({"pattern": ".*", "minLength": 3, "maxLength": 9}, 0,
     lambda n: ["x" * n, "日" * n, "ü" * n, "é" + "a" * (n - 1)]),
]


@pytest.mark.parametrize("schema,least,texts", PATTERN_COUNTS, ids=lambda x: json.dumps(x)[:40] if isinstance(x, dict) else "")
def test_a_pattern_under_a_max_length_is_a_counted_leaf(byte_compiler, schema, least, texts):
    """Any pattern under a maxLength whose count of committed length is exact (characters
    written plus the fewest still needed) is the unbounded pattern's leaf and one count, not
    a state per pattern state and length: the masks accept exactly what the validator does
    at every length around the maximum, multi-byte characters counted once."""
    import jsonschema

    schema = {"type": "string", **schema}
    grammar = byte_compiler.compile_json_schema({"type": "object", "properties": {"s": schema}, "required": ["s"]})
    counted = [(c.lo, c.hi) for c in grammar.automaton._counted if c is not None]
    assert counted == [(max(schema.get("minLength", 0) - least, 0), schema["maxLength"] - least)]
    assert max(d.num_states for d in grammar.automaton.rules) < 60
    hi = schema["maxLength"]
    seen = set()
    for n in range(max(min(least, schema.get("minLength", 0)) - 1, 1), hi + 3):
        for body in texts(n):
            ok = jsonschema.Draft202012Validator(schema).is_valid(body)
            seen.add(ok)
            assert accepted_by_masks(grammar, _text({"s": body})) == ok, (n, body, ok)
    assert seen == {True, False}


@pytest.mark.parametrize("pattern", ["^(a|bcdefgh)$", "x[0-9]yyyyy", "^(éé|abc)$"])
def test_a_pattern_whose_count_would_not_be_exact_stays_one_automaton(byte_compiler, pattern):
    """A byte that would raise the committed length by more than four (b against a; an x
    not followed by a digit, in a search for x<digit>yyyyy), or a fewest-bytes way that
    writes more characters than the fewest (abc against éé): the pattern and its length make
    one product automaton, still exact."""
    from constraints.json_leaves import counted_pattern

    assert counted_pattern(pattern, 0, 30) is None
    grammar = byte_compiler.compile_json_schema({"type": "string", "pattern": pattern, "maxLength": 30})
    assert all(c is None for c in getattr(grammar.automaton, "_counted", [None]))


def test_a_minimum_above_the_patterns_own_needs_room_to_grow_on_every_way():
    """With minLength above the pattern's fewest characters the count must be able to grow
    one character a byte on the way a completion takes: ^[a-z]+\\.com$ cannot after its dot
    (only "com" is left), ^[a-z]+[0-9]*$ can anywhere past its first letter."""
    from constraints.json_leaves import counted_pattern

    assert counted_pattern("^[a-z]+\\.com$", 0, 30) is not None
    assert counted_pattern("^[a-z]+\\.com$", 9, 30) is None
    assert counted_pattern("^[a-z]+[0-9]*$", 9, 30)[2:] == (8, 29)
