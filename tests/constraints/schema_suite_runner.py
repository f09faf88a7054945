"""Runs JSON-Schema-Test-Suite groups through the compiler on a byte-level vocabulary."""

from __future__ import annotations

import json
from pathlib import Path

from constraints import ConstraintError, GrammarCompiler, TokenizerInfo, allocate_token_bitmask
from constraints.bitmask import unpack_bitmask

SUITE_DIR = Path(__file__).resolve().parents[3] / "shared/data/json-schema-test-suite/tests/draft2020-12"
OUTCOMES = ("under-constrained", "unsupported", "over-constrained", "pass")  # worst first
EOS = 256


def byte_vocab_info() -> TokenizerInfo:
    """One token per byte plus EOS: masks are cheap, tokenization is exact."""
    return TokenizerInfo([bytes([b]) for b in range(256)] + [b""], (EOS,), frozenset({EOS}))


def iter_groups(suite_dir: Path = SUITE_DIR):
    for path in sorted(suite_dir.glob("*.json")):
        for i, group in enumerate(json.loads(path.read_text())):
            yield f"{path.name}#{i}", group


def _order(schema, out: dict, keyword: str = "properties") -> dict:
    """First-occurrence order of every property name in the schema (the compiler's order):
    declared ones (``properties``), then those dependentRequired names, each name before
    the ones it needs (json_compound.emit_object writes them so)."""
    if isinstance(schema, dict):
        for k, v in schema.items():
            if k == keyword and isinstance(v, dict):
                for name, sub in v.items():
                    needed = sub if keyword == "dependentRequired" and isinstance(sub, list) else []
                    for n in (name, *needed):
                        out.setdefault(n, len(out))
            _order(v, out, keyword)
    elif isinstance(schema, list):
        for v in schema:
            _order(v, out, keyword)
    return out


def _reorder(value, order: dict, ints: bool):
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (order.get(k, len(order)), list(value).index(k)))
        return {k: _reorder(value[k], order, ints) for k in keys}
    if isinstance(value, list):
        return [_reorder(v, order, ints) for v in value]
    if ints and isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    return value


def serializations(instance, schema) -> list[bytes]:
    order = _order(schema, _order(schema, {}), "dependentRequired")
    out = []
    for ordered in (False, True):
        for ints in (False, True):
            v = _reorder(instance, order if ordered else {}, ints)
            text = json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()
            if text not in out:
                out.append(text)
    return out


def accepted_by_masks(grammar, text: bytes) -> bool:
    """Every byte-token allowed by the mask, then EOS allowed and accepted."""
    m = grammar.matcher()
    bm = allocate_token_bitmask(1, grammar.vocab_size)
    for b in list(text) + [EOS]:
        m.fill_next_token_bitmask(bm, 0)
        allowed = bool(unpack_bitmask(bm[0], grammar.vocab_size)[b])
        if allowed != m.accept_token(b):
            raise AssertionError(f"mask and accept_token disagree on byte {b} of {text!r}")
        if not allowed:
            return False
    return m.is_terminated()


def accepted_by_tokens(grammar, hf_tokenizer, text: str) -> bool:
    """``text`` tokenized by a real tokenizer: every token allowed by the mask and accepted
    (a disallowed one must be refused), then EOS accepted at the end."""
    m = grammar.matcher()
    bm = allocate_token_bitmask(1, grammar.vocab_size)
    for tok in hf_tokenizer.encode(text):
        m.fill_next_token_bitmask(bm, 0)
        if not unpack_bitmask(bm[0], grammar.vocab_size)[tok]:
            assert not m.accept_token(tok)
            return False
        assert m.accept_token(tok)
    return m.can_terminate() and m.accept_token(grammar.automaton.info.eos_token_ids[0])


def group_outcome(compiler: GrammarCompiler, group: dict) -> str:
    try:
        grammar = compiler.compile_json_schema(group["schema"])
    except ConstraintError:
        return "unsupported"
    over = False
    for test in group["tests"]:
        ok = any(accepted_by_masks(grammar, t) for t in serializations(test["data"], group["schema"]))
        if ok and not test["valid"]:
            return "under-constrained"
        over |= test["valid"] and not ok
    return "over-constrained" if over else "pass"


def run_suite(suite_dir: Path = SUITE_DIR) -> dict[str, str]:
    compiler = GrammarCompiler(byte_vocab_info(), max_states=20_000, compile_timeout_s=10.0)
    return {key: group_outcome(compiler, group) for key, group in iter_groups(suite_dir)}
