"""Scoring ``select`` choices by their tokens' logprobs given the prefix (SGLang's methods).

A backend supplies each choice's token logprobs (``Backend.choice_logprobs``); the methods
here compare them. The default, ``token_choice_logprobs``, scores each choice from one
prefill-only request for ``prefix + choice`` with input logprobs; all choices go in one batch
so the radix cache computes the prefix once. The prefix is tokenized alone and with each
choice, and the choice's tokens start where the two stop agreeing, so a token merged across
the boundary is scored with the choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from frontend_dsl.backends.base import Backend


@dataclass(slots=True)
class ChoiceLogprobs:
    """Per choice, its tokens' logprobs given the prefix (and given nothing, if asked)."""

    conditional: list[list[float]]
    unconditional: list[list[float]] | None = None
    metas: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class SelectResult:
    index: int
    scores: list[float]  # what the method compared (higher is better)
    token_logprobs: list[list[float]]  # per choice, its tokens' conditional logprobs
    unconditional_logprobs: list[list[float]] | None = None
    metas: list[dict[str, Any]] = field(default_factory=list)

    def meta_info(self) -> dict[str, Any]:
        return {"normalized_prompt_logprobs": self.scores, "input_token_logprobs": self.token_logprobs,
                "unconditional_token_logprobs": self.unconditional_logprobs}


def choice_token_spans(backend: Backend, prefix: str, choices: list[str]) -> tuple[list[list[int]], list[int]]:
    """Token ids of ``prefix + choice`` for each choice, and where each choice's tokens start."""
    ids = backend.tokenize_many(([prefix] if prefix else []) + [prefix + c for c in choices])
    prefix_ids, full = (ids[0], ids[1:]) if prefix else ([], ids)
    starts = []
    for choice, choice_ids in zip(choices, full):
        start = _common_prefix_len(prefix_ids, choice_ids)
        if start >= len(choice_ids):
            raise ValueError(f"choice {choice!r} adds no tokens to the prefix")
        starts.append(start)
    return full, starts


def token_choice_logprobs(backend: Backend, prefix: str, choices: list[str],
                          unconditional: bool = False) -> ChoiceLogprobs:
    """The default ``choice_logprobs``: through ``tokenize`` and prefill-only ``score``."""
    full, starts = choice_token_spans(backend, prefix, choices)
    lo = min(starts)
    metas = backend.score(full, lo)
    cond = [_logprobs(meta, s - lo) for meta, s in zip(metas, starts)]
    if not unconditional:
        return ChoiceLogprobs(cond, None, metas)
    umetas = backend.score([ids[s:] for ids, s in zip(full, starts)], 0)
    # The first token has no unconditional logprob (nothing before it): count it as 0.
    uncond = [[lp or 0.0 for lp, _, _ in m["input_token_logprobs"]] for m in umetas]
    return ChoiceLogprobs(cond, uncond, metas + umetas)


def score_choices(backend: Backend, prefix: str, choices: list[str],
                  method: str = "token_length_normalized") -> SelectResult:
    unconditional = method == "unconditional_likelihood_normalized"
    lps = backend.choice_logprobs(prefix, choices, unconditional=unconditional)
    cond = lps.conditional
    if method == "token_length_normalized":
        scores = [sum(c) / len(c) for c in cond]
        return SelectResult(_argmax(scores), scores, cond, metas=lps.metas)
    if method == "greedy_token_selection":
        scores = [sum(c) / len(c) for c in cond]
        return SelectResult(_greedy_pick(cond), scores, cond, metas=lps.metas)
    if unconditional:
        uncond = lps.unconditional
        scores = [sum(c - u for c, u in zip(cl, ul)) / len(cl) for cl, ul in zip(cond, uncond)]
        return SelectResult(_argmax(scores), scores, cond, uncond, lps.metas)
    raise ValueError(f"choices_method: unknown method {method!r}")


def _logprobs(meta: dict[str, Any], skip: int) -> list[float]:
    entries = meta["input_token_logprobs"][skip:]
    lps = [lp for lp, _, _ in entries if lp is not None]  # position 0 has no logprob
    if not lps:
        raise ValueError("select: the engine returned no logprobs for a choice")
    return lps


def _greedy_pick(cond: list[list[float]]) -> int:
    """Compare the choices token by token, keeping the ties; a shorter choice is extended
    with its own mean logprob (SGLang's greedy token selection)."""
    width = max(len(lps) for lps in cond)
    padded = [lps + [sum(lps) / len(lps)] * (width - len(lps)) for lps in cond]
    alive = list(range(len(cond)))
    for j in range(width):
        best = max(padded[i][j] for i in alive)
        alive = [i for i in alive if padded[i][j] == best]
        if len(alive) == 1:
            break
    return alive[0]


def _argmax(xs: list[float]) -> int:
    return max(range(len(xs)), key=xs.__getitem__)


def _common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
