"""Per-request sampling options (SGLang's names), validated once at submission."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from typing import Any

from sglang_lite.errors import InvalidRequest


@dataclass(slots=True)
class SamplingParams:
    max_new_tokens: int = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    n: int = 1
    seed: int | None = None
    regex: str | None = None
    json_schema: str | None = None
    ebnf: str | None = None
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    logit_bias: dict[int, float] | None = None  # token id -> added to its logit, in [-100, 100]
    # The constraint applies after a <think> block: "optional" (the output may open one) or
    # "open" (the prompt opened it; the output closes it first).
    reasoning_prefix: str | None = None
    choices: list[str] | None = None  # the output is exactly one of these strings
    stop_regex: list[str] = field(default_factory=list)  # stop where one of these matches

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SamplingParams:
        """Build and validate; every error is an InvalidRequest naming the field."""
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise InvalidRequest("sampling_params", f"unknown key {unknown[0]!r} (known: {sorted(known)})")
        if isinstance(d.get("stop"), str):
            d["stop"] = [d["stop"]]
        if d.get("stop") is None:
            d.pop("stop", None)
        if d.get("stop_token_ids") is None:
            d.pop("stop_token_ids", None)
        if isinstance(d.get("stop_regex"), str):
            d["stop_regex"] = [d["stop_regex"]]
        if d.get("stop_regex") is None:
            d.pop("stop_regex", None)
        if isinstance(d.get("logit_bias"), dict):  # OpenAI sends token ids as JSON object keys
            d["logit_bias"] = {_token_id_key(k): v for k, v in d["logit_bias"].items()}
        if isinstance(d.get("json_schema"), dict):
            d["json_schema"] = json.dumps(d["json_schema"])
        params = cls(**d)
        params.validate()
        return params

    def validate(self) -> None:
        _check_int("max_new_tokens", self.max_new_tokens, lo=0)
        _check_int("min_new_tokens", self.min_new_tokens, lo=0)
        if self.min_new_tokens > self.max_new_tokens:
            raise InvalidRequest("min_new_tokens", "must be <= max_new_tokens")
        _check_num("temperature", self.temperature, lo=0.0)
        _check_num("top_p", self.top_p, lo=0.0, lo_open=True, hi=1.0)
        _check_int("top_k", self.top_k, lo=-1, hi=INT32_MAX)
        if self.top_k == 0:
            raise InvalidRequest("top_k", "must be -1 (disabled) or >= 1, got 0")
        _check_num("min_p", self.min_p, lo=0.0, hi=1.0)
        _check_num("frequency_penalty", self.frequency_penalty, lo=-2.0, hi=2.0)
        _check_num("presence_penalty", self.presence_penalty, lo=-2.0, hi=2.0)
        _check_num("repetition_penalty", self.repetition_penalty, lo=0.0, lo_open=True, hi=2.0)
        check_n(self.n)
        if self.seed is not None:
            _check_int("seed", self.seed, lo=0, hi=INT64_MAX)
        if not isinstance(self.stop, list) or not all(isinstance(s, str) and s for s in self.stop):
            raise InvalidRequest("stop", "must be a non-empty string or a list of non-empty strings")
        if len(self.stop) > 16:
            raise InvalidRequest("stop", "at most 16 stop strings")
        if not isinstance(self.stop_token_ids, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= INT32_MAX for t in self.stop_token_ids):
            raise InvalidRequest("stop_token_ids", "must be a list of non-negative integers")
        if len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS:
            raise InvalidRequest("stop_token_ids", f"at most {MAX_STOP_TOKEN_IDS} token ids")
        if self.logit_bias is not None:
            if not isinstance(self.logit_bias, dict) or len(self.logit_bias) > MAX_LOGIT_BIAS:
                raise InvalidRequest("logit_bias", f"must map at most {MAX_LOGIT_BIAS} token ids to numbers")
            for token, bias in self.logit_bias.items():
                _check_int("logit_bias", token, lo=0)
                if not isinstance(bias, (int, float)) or isinstance(bias, bool) or not -100 <= bias <= 100:
                    raise InvalidRequest("logit_bias", f"the bias of token {token} must be a number in "
                                     f"[-100, 100], got {bias!r}")
        _check_stop_regex(self.stop_regex)
        constraints = [k for k in _CONSTRAINT_KINDS if getattr(self, k) is not None]
        if len(constraints) > 1:
            raise InvalidRequest(constraints[1], "only one of regex, json_schema, ebnf, choices per request")
        for k in constraints:
            if k == "choices":
                _check_choices(self.choices)
            elif not isinstance(getattr(self, k), str):
                raise InvalidRequest(k, "must be a string")
        if self.reasoning_prefix not in (None, "optional", "open"):
            raise InvalidRequest("reasoning_prefix", f"must be 'optional' or 'open', got {self.reasoning_prefix!r}")

    def check_limits(self, vocab_size: int, context_length: int) -> None:
        """The checks that need the model: token counts within the context, token ids
        within the vocabulary (so no value reaches a tensor it does not fit)."""
        _check_int("max_new_tokens", self.max_new_tokens, hi=context_length)
        _check_int("min_new_tokens", self.min_new_tokens, hi=context_length)
        _check_int("top_k", self.top_k, hi=vocab_size)
        bad = [t for t in self.stop_token_ids if t >= vocab_size]
        if bad:
            raise InvalidRequest("stop_token_ids", f"token id {bad[0]} is not in [0, {vocab_size})")
        if self.logit_bias and max(self.logit_bias) >= vocab_size:
            raise InvalidRequest("logit_bias", f"token id {max(self.logit_bias)} is not in [0, {vocab_size})")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def uses_penalties(self) -> bool:
        return bool(self.frequency_penalty or self.presence_penalty or self.repetition_penalty != 1.0)

    @property
    def constraint(self) -> tuple[str, str] | None:
        """(kind, spec); the spec of ``choices`` is the list of strings."""
        for kind in _CONSTRAINT_KINDS:
            spec = getattr(self, kind)
            if spec is not None:
                return kind, spec
        return None


MAX_N = 128


def check_n(n: Any) -> int:
    """``n`` (choices per prompt) as every API takes it: an integer in [1, MAX_N]."""
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_N:
        raise InvalidRequest("n", f"must be an integer in [1, {MAX_N}], got {n!r}")
    return n


def choice_seeds(seed: Any, n: int) -> list[Any]:
    """The seed of each of a prompt's ``n`` choices, the one place ``n`` is expanded: seed,
    seed + 1, ... when seeded (distinct and reproducible), else ``seed`` (None: each choice
    draws its own) for every choice."""
    if isinstance(seed, int) and not isinstance(seed, bool):
        return [seed + j for j in range(n)]
    return [seed] * n


MAX_LOGIT_BIAS = 1024
MAX_STOP_TOKEN_IDS = 1024
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1  # seeds become int64 tensors
MAX_STOP_REGEX = 16
_CONSTRAINT_KINDS = ("regex", "json_schema", "ebnf", "choices")


def _check_choices(choices: Any) -> None:
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) and c for c in choices):
        raise InvalidRequest("choices", "must be a non-empty list of non-empty strings")


def _check_stop_regex(patterns: Any) -> None:
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        raise InvalidRequest("stop_regex", "must be a non-empty string or a list of non-empty strings")
    if len(patterns) > MAX_STOP_REGEX:
        raise InvalidRequest("stop_regex", f"at most {MAX_STOP_REGEX} patterns")
    from sglang_lite.stop_regex import compile_stop_regex

    for p in patterns:
        compile_stop_regex(p)


def _token_id_key(key: Any) -> Any:
    if isinstance(key, str):
        try:
            return int(key)
        except ValueError:
            raise InvalidRequest("logit_bias", f"keys must be token ids, got {key!r}") from None
    return key


def _check_int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidRequest(name, f"must be an integer, got {value!r}")
    if lo is not None and value < lo:
        raise InvalidRequest(name, f"must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise InvalidRequest(name, f"must be <= {hi}, got {value}")


def _check_num(name: str, value: Any, lo: float, hi: float | None = None, lo_open: bool = False) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        raise InvalidRequest(name, f"must be a finite number, got {value!r}")
    if value < lo or (lo_open and value == lo):
        raise InvalidRequest(name, f"must be {'>' if lo_open else '>='} {lo}, got {value}")
    if hi is not None and value > hi:
        raise InvalidRequest(name, f"must be <= {hi}, got {value}")
