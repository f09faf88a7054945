"""From logits to next tokens: grammar bitmask -> penalties -> min-tokens -> logprobs ->
temperature / top-k / top-p / min-p sampling (``sglang_lite_kernels.sampling``: Triton on CUDA,
torch on CPU), seeded per request by (seed, step)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sglang_lite.request import Req
from sglang_lite_kernels.sampling import sample


@dataclass(slots=True)
class SampleOutput:
    next_ids: list[int]
    logprobs: list[float] | None  # logprob of each chosen token (rows wanting it; else 0.0)
    top_logprobs: list[list[tuple[float, int]]] | None


class Sampler:
    def __init__(self, vocab_size: int, eos_token_ids: tuple[int, ...]):
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids

    def __call__(self, logits: torch.Tensor, reqs: list[Req], bitmask: torch.Tensor | None = None,
                 params: RowParams | None = None) -> SampleOutput:
        # logits: [B, V] fp32, one row per request in ``reqs``; ``params``: ``row_params(reqs)``
        # built before the forward pass (where a request's bad data fails the step early)
        device = logits.device
        if bitmask is not None and bitmask.device != device:
            bitmask = bitmask.to(device, non_blocking=True)
        raw = logits
        penalties = any(r.sampling.uses_penalties for r in reqs)
        early = any(len(r.output_ids) < r.sampling.min_new_tokens for r in reqs)
        bias = _logit_bias(reqs, device)
        if penalties or early or bias is not None:  # edited in place: never the caller's tensor
            logits = logits.clone()
            if bias is not None:
                logits.index_put_(bias[:2], bias[2], accumulate=True)
            if penalties:
                Penalties(reqs, self.vocab_size, device).apply(logits)
            self._mask_early_stop(logits, reqs)
        next_ids = (params or RowParams.of(reqs, device)).sample(logits, bitmask)
        out = SampleOutput(next_ids.tolist(), None, None)
        if any(r.return_logprob for r in reqs):
            self._logprobs(raw, next_ids, reqs, out)
        return out

    @staticmethod
    def row_params(reqs: list[Req], device: torch.device) -> RowParams:
        """The rows' sampling parameters as device tensors; raises (OverflowError, ...) if a
        request's values do not fit them, before any request state has changed."""
        return RowParams.of(reqs, device)

    def continuous(self, reqs: list[Req], device: torch.device) -> ContinuousSampler:
        """A sampler for back-to-back decode steps of ``reqs`` (all ``can_sample_on_device``)."""
        return ContinuousSampler(reqs, device, self.vocab_size, self.eos_token_ids)

    @staticmethod
    def can_sample_on_device(req: Req) -> bool:
        """Nothing in this request's sampling needs the host between steps: no grammar."""
        return req.grammar is None

    def _mask_early_stop(self, logits: torch.Tensor, reqs: list[Req]) -> None:
        """Before min_new_tokens, neither EOS nor a stop token may be sampled."""
        for i, r in enumerate(reqs):
            banned = _early_stop_ids(r, self.eos_token_ids)
            if banned:
                logits[i, banned] = float("-inf")

    def _logprobs(self, raw: torch.Tensor, next_ids: torch.Tensor, reqs: list[Req], out: SampleOutput) -> None:
        chosen, top = _token_logprobs(raw, next_ids, max(r.top_logprobs_num for r in reqs))
        out.logprobs = chosen.tolist()
        if top is not None:
            out.top_logprobs = _top_rows(top[0].tolist(), top[1].tolist(), reqs)


class ContinuousSampler:
    """Samples back-to-back decode steps of ``reqs`` without a host sync between them: each
    call takes one step's logits [B, V], applies logit_bias and penalties, samples, and
    advances the rows' step counters and penalty counts on the device, so draws equal those
    of one step at a time. Logprobs (of the logits before any edit, as one step at a time
    reports them) stay on the device until ``logprobs`` reads them after the run."""

    def __init__(self, reqs: list[Req], device: torch.device, vocab_size: int,
                 eos_token_ids: tuple[int, ...] = ()):
        self.reqs = reqs
        self.params = RowParams.of(reqs, device)
        self.bias = _logit_bias(reqs, device)
        self.penalties = (Penalties(reqs, vocab_size, device)
                          if any(r.sampling.uses_penalties for r in reqs) else None)
        self.early = _EarlyStop.of(reqs, eos_token_ids, device)
        self.want_logprobs = any(r.return_logprob for r in reqs)
        self.top_k = max(r.top_logprobs_num for r in reqs)
        self._chosen: list[torch.Tensor] = []  # per step [B]
        self._top: list[tuple[torch.Tensor, torch.Tensor]] = []  # per step ([B, k], [B, k])

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        edits = self.bias is not None or self.penalties is not None or self.early is not None
        raw = logits.clone() if self.want_logprobs and edits else logits
        if self.bias is not None:  # logits: this step's own buffer, free to edit
            logits.index_put_(self.bias[:2], self.bias[2], accumulate=True)
        if self.penalties is not None:
            self.penalties.apply(logits)
        if self.early is not None:
            self.early.apply(logits)
        ids = self.params.sample(logits)
        self.params.steps.add_(1)
        if self.penalties is not None:
            self.penalties.add(ids)
        if self.want_logprobs:
            chosen, top = _token_logprobs(raw, ids, self.top_k)
            self._chosen.append(chosen)
            if top is not None:
                self._top.append(top)
        return ids

    def logprobs(self) -> tuple[list[list[float]], list[list[list[tuple[float, int]]]] | None] | None:
        """After the run: (per request, per step) chosen-token logprobs and top logprobs."""
        if not self.want_logprobs:
            return None
        chosen = torch.stack(self._chosen, 1).tolist()  # [B, steps]
        if not self._top:
            return chosen, None
        vals = torch.stack([v for v, _ in self._top], 1).tolist()  # [B, steps, k]
        ids = torch.stack([i for _, i in self._top], 1).tolist()
        return chosen, [_top_rows(vs, ts, [r] * len(vs)) for r, vs, ts in zip(self.reqs, vals, ids)]


def _early_stop_ids(req: Req, eos_token_ids: tuple[int, ...]) -> list[int]:
    """The tokens ``req`` may not sample yet: stop tokens and EOS before min_new_tokens."""
    if len(req.output_ids) >= req.sampling.min_new_tokens:
        return []
    return list(req.sampling.stop_token_ids) + ([] if req.sampling.ignore_eos else list(eos_token_ids))


@dataclass(slots=True)
class _EarlyStop:
    """min_new_tokens inside a continuous run: the banned (row, token) pairs and, per pair,
    how many more steps the ban lasts; counted down on the device after every step."""

    rows: torch.Tensor  # [P]
    tokens: torch.Tensor  # [P]
    left: torch.Tensor  # [P] steps still banned

    @classmethod
    def of(cls, reqs: list[Req], eos_token_ids: tuple[int, ...], device: torch.device) -> _EarlyStop | None:
        triples = [(i, t, r.sampling.min_new_tokens - len(r.output_ids))
                   for i, r in enumerate(reqs) for t in _early_stop_ids(r, eos_token_ids)]
        if not triples:
            return None
        rows, tokens, left = torch.tensor(triples, dtype=torch.int64).T
        return cls(rows.to(device), tokens.to(device), left.to(device))

    def apply(self, logits: torch.Tensor) -> None:
        """Ban this step's pairs, then count the step."""
        kept = logits[self.rows, self.tokens]
        logits.index_put_((self.rows, self.tokens), torch.where(self.left > 0, float("-inf"), kept))
        self.left.sub_(1)


class Penalties:
    """Frequency, presence and repetition penalties of a batch as [B, V] device tensors: the
    counts of each request's output tokens and the set of tokens it has seen (prompt and
    output). ``add`` extends both by one sampled token per row, on the device, so a
    continuous run applies them step after step without the host."""

    def __init__(self, reqs: list[Req], vocab_size: int, device: torch.device):
        params = [r.sampling for r in reqs]
        self.frequency = torch.tensor([[p.frequency_penalty] for p in params], device=device)  # [B, 1]
        self.presence = torch.tensor([[p.presence_penalty] for p in params], device=device)
        self.repetition = torch.tensor([[p.repetition_penalty] for p in params], device=device)
        self.counts = torch.zeros((len(reqs), vocab_size), device=device)
        rows, ids = _flat([(i, t) for i, r in enumerate(reqs) for t in r.output_ids])
        self.counts.index_put_((rows.to(device), ids.to(device)), torch.ones(len(ids), device=device), accumulate=True)
        self.seen = torch.zeros((len(reqs), vocab_size), dtype=torch.bool, device=device)
        rows, ids = _flat([(i, t) for i, r in enumerate(reqs) if r.sampling.repetition_penalty != 1.0
                           for t in set(r.origin_input_ids)])
        self.seen.index_put_((rows.to(device), ids.to(device)), torch.tensor(True, device=device))
        self.seen |= self.counts > 0  # outputs count as seen (for rows with a repetition penalty)
        self.seen &= self.repetition != 1.0

    def apply(self, logits: torch.Tensor) -> None:
        """In place: logits -= frequency * counts + presence * [count > 0]; seen tokens'
        logits divided (if positive) or multiplied (if not) by the repetition penalty."""
        logits -= self.frequency * self.counts + self.presence * (self.counts > 0)
        scaled = torch.where(logits > 0, logits / self.repetition, logits * self.repetition)
        logits.copy_(torch.where(self.seen, scaled, logits))

    def add(self, ids: torch.Tensor) -> None:
        ones = torch.ones((ids.shape[0], 1), device=ids.device)
        self.counts.scatter_add_(1, ids[:, None], ones)
        self.seen.scatter_(1, ids[:, None], (self.repetition != 1.0))


def _flat(pairs: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    rows, ids = zip(*pairs) if pairs else ((), ())
    return torch.tensor(rows, dtype=torch.int64), torch.tensor(ids, dtype=torch.int64)


def _token_logprobs(raw: torch.Tensor, ids: torch.Tensor, k: int):
    """Logprobs of ``ids`` [B] under ``raw`` logits [B, V] -> (chosen [B], (top values,
    top ids) [B, k] or None), all on the logits' device."""
    logprobs = torch.log_softmax(raw.float(), dim=-1)
    chosen = logprobs.gather(1, ids[:, None]).squeeze(1)
    return chosen, (logprobs.topk(k, dim=-1) if k > 0 else None)


def _top_rows(vals: list[list[float]], ids: list[list[int]], reqs: list[Req]) -> list[list[tuple[float, int]]]:
    return [list(zip(v[: r.top_logprobs_num], i[: r.top_logprobs_num])) for v, i, r in zip(vals, ids, reqs)]


def _logit_bias(reqs: list[Req], device: torch.device) -> tuple[torch.Tensor, ...] | None:
    """(rows, token ids, biases) of every request's logit_bias, for one index_put_; None if none."""
    entries = [(i, t, b) for i, r in enumerate(reqs) if r.sampling.logit_bias for t, b in r.sampling.logit_bias.items()]
    if not entries:
        return None
    rows, ids, vals = zip(*entries)
    return (torch.tensor(rows, device=device), torch.tensor(ids, device=device),
            torch.tensor(vals, dtype=torch.float32, device=device))


@dataclass(slots=True)
class RowParams:
    """Per-row sampling parameters on the device, built on the host (pinned on CUDA) and
    moved in two async copies."""

    temperatures: torch.Tensor  # [B] float32
    top_ps: torch.Tensor
    min_ps: torch.Tensor
    top_ks: torch.Tensor  # [B] int32
    seeds: torch.Tensor  # [B] int64
    steps: torch.Tensor  # [B] int64, tokens sampled so far

    @classmethod
    def of(cls, reqs: list[Req], device: torch.device) -> RowParams:
        params = [r.sampling for r in reqs]
        floats = torch.tensor([[p.temperature for p in params], [p.top_p for p in params],
                               [p.min_p for p in params]], dtype=torch.float32)
        ints = torch.tensor([[p.top_k for p in params], [r.seed for r in reqs],
                             [len(r.output_ids) for r in reqs]], dtype=torch.int64)
        if device.type == "cuda":
            floats, ints = floats.pin_memory(), ints.pin_memory()
        floats, ints = floats.to(device, non_blocking=True), ints.to(device, non_blocking=True)
        return cls(floats[0], floats[1], floats[2], ints[0].to(torch.int32), ints[1], ints[2])

    def sample(self, logits: torch.Tensor, bitmask: torch.Tensor | None = None) -> torch.Tensor:
        return sample(logits, self.temperatures, self.top_ks, self.top_ps, self.min_ps, self.seeds,
                      self.steps, bitmask)
