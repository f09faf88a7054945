"""Model-free walk of a JSON-schema constraint: a fixed pseudo-model picks tokens from each mask.

The same rule drives every engine, so outputs differ only where the engines' masks differ.

Pseudo-model. Each token t has a fixed score base[t] ~ N(0, 2^2) drawn once from a seeded RNG
over the vocabulary (seed 0). At every step, over the allowed tokens only:
- EOS, when allowed, gets +50: the walk stops as soon as the grammar lets it.
- Inside a string that has run 6 or more tokens, tokens containing `"` get +1 per token past 5.
- Outside strings, a bare value (number, literal) that has run 4 or more tokens since the last
  structural byte gives tokens containing `,` `}` `]` +1 per token past 3.
- After 64 tokens, tokens containing `}` or `]` get +0.1 per token past 63 (containers close).
- Outside strings, whitespace-only tokens get -12 (a JSON-emitting model rarely pads).
The next token is argmax(score + Gumbel noise) from a per-walk RNG seeded by the caller (the
schema's path), i.e. a sample from softmax(score) over the allowed set. The walk stops at EOS,
when the matcher reports termination, when no token is allowed, or after max_tokens (default
384; the output is then incomplete, hence invalid). Each fill is told the tokens left; an
engine that closes within a budget (ours: constraints.closing, as the engine runs it) uses it,
the peers have no such option and ignore it.

Validation: `jsonschema.validators.validator_for(schema, default=Draft202012Validator)` with that
draft's own FORMAT_CHECKER (date-time, uri, hostname, ... need jsonschema[format-nongpl]).
"""

from __future__ import annotations

import json
import re
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import regex
from jsonschema.exceptions import ValidationError
from jsonschema.validators import Draft202012Validator, extend, validator_for

MAX_TOKENS = 384
EOS_BONUS = 50.0
WHITESPACE_PENALTY = -12.0


class WalkMatcher(Protocol):
    """One engine's matcher for one walk; `row` is the packed int32 mask fill() writes."""

    row: np.ndarray

    def fill(self, tokens_left: int) -> None: ...

    def accept(self, token_id: int) -> bool: ...

    def is_terminated(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Schema:
    split: str
    name: str
    text: str  # canonical: json.dumps of the parsed file, key order kept

    @property
    def key(self) -> str:
        return f"{self.split}/{self.name}"


def load_schemas(root: Path) -> list[Schema]:
    """Every <split>/<file>.json under root, in a fixed order (split, then file name)."""
    out = []
    for split in sorted(p for p in root.iterdir() if p.is_dir()):
        for path in sorted(split.glob("*.json")):
            out.append(Schema(split.name, path.name, json.dumps(json.loads(path.read_text()))))
    if not out:
        raise FileNotFoundError(f"no <split>/*.json schemas under {root}")
    return out


class PseudoModel:
    """Fixed per-token scores plus the context bonuses of the module docstring."""

    def __init__(self, token_bytes: list[bytes], eos_token_ids: tuple[int, ...], seed: int = 0):
        self.token_bytes = token_bytes
        self.vocab_size = len(token_bytes)
        self.base = np.random.default_rng(seed).normal(0.0, 2.0, self.vocab_size)
        self.is_eos = _flags(self.vocab_size, eos_token_ids)
        self.has_quote = self._contains(b'"')
        self.has_closer = self._contains(b"}") | self._contains(b"]")
        self.ends_value = self.has_closer | self._contains(b",")
        self.whitespace_only = np.array([bool(b) and not b.strip() for b in token_bytes])

    def _contains(self, needle: bytes) -> np.ndarray:
        return np.array([needle in b for b in self.token_bytes])

    def choose(self, allowed: np.ndarray, scan: JsonScan, rng: np.random.Generator) -> int:
        score = self.base[allowed] + EOS_BONUS * self.is_eos[allowed]
        if scan.in_string and scan.string_tokens >= 6:
            score += (scan.string_tokens - 5) * self.has_quote[allowed]
        if not scan.in_string:
            score += WHITESPACE_PENALTY * self.whitespace_only[allowed]
            if scan.bare_tokens >= 4:
                score += (scan.bare_tokens - 3) * self.ends_value[allowed]
        if scan.tokens >= 64:
            score += 0.1 * (scan.tokens - 63) * self.has_closer[allowed]
        return int(allowed[np.argmax(score + rng.gumbel(size=len(allowed)))])


@dataclass(slots=True)
class JsonScan:
    """Just enough lexing of the output so far for the pseudo-model's bonuses."""

    tokens: int = 0
    in_string: bool = False
    escaped: bool = False
    string_tokens: int = 0  # tokens since the current string opened
    bare_tokens: int = 0  # tokens since the last structural byte outside strings

    def feed(self, data: bytes) -> None:
        self.tokens += 1
        structural = False
        for byte in data:
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif byte == 0x5C:  # backslash
                    self.escaped = True
                elif byte == 0x22:
                    self.in_string = False
                    structural = True
            elif byte == 0x22:
                self.in_string, self.string_tokens = True, 0
                structural = True
            elif byte in b"{}[],:":
                structural = True
        self.string_tokens += self.in_string
        self.bare_tokens = 0 if structural or self.in_string else self.bare_tokens + 1


@dataclass(slots=True)
class Walk:
    token_ids: list[int] = field(default_factory=list)
    mask_s: list[float] = field(default_factory=list)
    stop: str = "max_tokens"  # eos | terminated | no_tokens | rejected | max_tokens

    @property
    def complete(self) -> bool:
        return self.stop in ("eos", "terminated")


def walk(matcher: WalkMatcher, model: PseudoModel, seed: int,
         max_tokens: int = MAX_TOKENS) -> Walk:
    """Fill the mask (timed), pick a token with the pseudo-model, accept it; repeat."""
    rng = np.random.default_rng(seed)
    scan, out = JsonScan(), Walk()
    row_bytes = matcher.row.view(np.uint8)
    while len(out.token_ids) < max_tokens:
        if matcher.is_terminated():
            out.stop = "terminated"
            return out
        t0 = time.perf_counter()
        matcher.fill(max_tokens - len(out.token_ids))
        out.mask_s.append(time.perf_counter() - t0)
        bits = np.unpackbits(row_bytes, bitorder="little")[: model.vocab_size]
        allowed = np.flatnonzero(bits)
        if not len(allowed):
            out.stop = "no_tokens"
            return out
        token = model.choose(allowed, scan, rng)
        if not matcher.accept(token):
            out.stop = "rejected"
            return out
        out.token_ids.append(token)
        if model.is_eos[token]:
            out.stop = "eos"
            return out
        scan.feed(model.token_bytes[token])
    if matcher.is_terminated():  # the last token allowed finished the output
        out.stop = "terminated"
    return out


def output_text(model: PseudoModel, token_ids: list[int]) -> bytes:
    return b"".join(model.token_bytes[t] for t in token_ids if not model.is_eos[t])


def check_output(schema_text: str, walk_result: Walk, model: PseudoModel) -> str:
    """valid | invalid | unparsable | incomplete | validator_error (the schema broke the validator)."""
    if not walk_result.complete:
        return "incomplete"
    return validate_text(schema_text, output_text(model, walk_result.token_ids))


def validate_text(schema_text: str, text: bytes | str) -> str:
    """valid | invalid | unparsable | validator_error, with the schema's draft's format checker."""
    try:
        value = json.loads(text.decode("utf-8") if isinstance(text, bytes) else text)
    except ValueError:
        return "unparsable"
    schema = json.loads(schema_text)
    try:
        cls = validator_for(schema, default=Draft202012Validator)
        ok = cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(value)
    except re.error:  # a pattern `re` cannot parse (`\p{...}`): checked with `regex` instead
        try:
            ok = _with_regex_patterns(cls)(schema, format_checker=cls.FORMAT_CHECKER).is_valid(value)
        except Exception:  # noqa: BLE001 - e.g. the same pattern under additionalProperties
            return "validator_error"
    except Exception:  # noqa: BLE001 - unresolvable $ref, ...
        return "validator_error"
    return "valid" if ok else "invalid"


def _with_regex_patterns(cls):
    r"""``cls`` with ``pattern`` and ``patternProperties`` searched by the ``regex`` module,
    which reads the Unicode classes (``\p{L}``, ``\p{Cc}``) JSON Schema's ECMA-262 patterns
    use and Python's ``re`` rejects. Used only where ``re`` raised: every other schema is
    checked by ``re`` as before."""
    def pattern(validator, patrn, instance, schema):
        if validator.is_type(instance, "string") and not regex.search(patrn, instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(validator, patterns, instance, schema):
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in patterns.items():
            for key, item in instance.items():
                if regex.search(patrn, key):
                    yield from validator.descend(item, subschema, path=key, schema_path=patrn)

    return extend(cls, {"pattern": pattern, "patternProperties": pattern_properties})


def schema_seed(schema: Schema) -> int:
    """Walk seed from the schema's path: the same for every engine and every run."""
    return zlib.crc32(schema.key.encode())


def _flags(size: int, ids: tuple[int, ...]) -> np.ndarray:
    flags = np.zeros(size, dtype=bool)
    flags[list(ids)] = True
    return flags



class WalkEngine(Protocol):
    name: str

    def compile(self, schema_text: str) -> object: ...

    def matcher(self, compiled: object) -> WalkMatcher: ...


@dataclass(slots=True)
class SchemaResult:
    """One schema through one engine. outcome: check_output's, or refused | walk_error."""

    key: str
    split: str
    declared: bool
    outcome: str
    error: str = ""  # exception type (refused / walk_error)
    detail: str = ""  # its message, shortened
    compile_ms: float = 0.0
    mask_us: list[float] = field(default_factory=list)
    tokens: int = 0
    stop: str = ""


def run_schema(engine: WalkEngine, schema: Schema, model: PseudoModel) -> SchemaResult:
    """Compile (timed; an exception = not declared), walk, validate the output."""
    t0 = time.perf_counter()
    try:
        compiled = engine.compile(schema.text)
    except Exception as e:  # noqa: BLE001 - every refusal is recorded by type
        return SchemaResult(schema.key, schema.split, False, "refused", _error_kind(e),
                            str(e)[:160], (time.perf_counter() - t0) * 1e3)
    compile_ms = (time.perf_counter() - t0) * 1e3
    try:
        result = walk(engine.matcher(compiled), model, schema_seed(schema))
    except Exception as e:  # noqa: BLE001 - a crash inside the engine's matcher
        return SchemaResult(schema.key, schema.split, True, "walk_error", type(e).__name__,
                            str(e)[:160], compile_ms)
    return SchemaResult(schema.key, schema.split, True, check_output(schema.text, result, model),
                        compile_ms=compile_ms, mask_us=[t * 1e6 for t in result.mask_s],
                        tokens=len(result.token_ids), stop=result.stop)


def _error_kind(error: Exception) -> str:
    """Exception type, with the keyword or short reason an engine attaches (for tallies)."""
    reason = getattr(error, "keyword", "") or getattr(error, "kind", "")
    return f"{type(error).__name__}({reason})" if reason else type(error).__name__
