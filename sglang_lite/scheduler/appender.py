"""A step's tokens appended to their requests: a constrained request's matcher sees each
sampled token first and may force more (jump-forward); the OutputProcessor then records
them and says whether the request is done. Finished requests go to the scheduler's
``retire``; the others may stream a chunk.
"""

from __future__ import annotations

from collections.abc import Callable

from sglang_lite.outputs import LENGTH, FinishReason
from sglang_lite.request import Req
from sglang_lite.sampler import SampleOutput
from sglang_lite.scheduler.output import OutputProcessor
from sglang_lite.scheduler.stats import SchedulerStats


class TokenAppender:
    def __init__(self, outputs: OutputProcessor, grammar_backend, stats: SchedulerStats,
                 context_length: int, retire: Callable[[Req, FinishReason], None]):
        self.outputs = outputs
        self.grammar_backend = grammar_backend
        self.stats = stats
        self.context_length = context_length
        self.retire = retire

    def budget(self, req: Req) -> int:
        """Tokens the request may still append: max_new_tokens and the context both bound it."""
        return min(req.remaining_new_tokens, self.context_length - req.seq_len)

    def append_sampled(self, reqs: list[Req], out: SampleOutput) -> None:
        """One sampled token per request (``out`` row j is ``reqs[j]``'s)."""
        for j, req in enumerate(reqs):
            self.stats.num_generated_tokens += 1
            lp = out.logprobs[j] if out.logprobs is not None else None
            top = out.top_logprobs[j] if out.top_logprobs is not None else None
            if req.grammar is None:
                reason = self.outputs.append_token(req, out.next_ids[j], lp, top, self.context_length)
            else:
                reason = self._append_constrained(req, out.next_ids[j], lp, top)
            self._settle(req, reason)

    def append_runs(self, reqs: list[Req], tokens: list[list[int]], logprobs) -> None:
        """A continuous decode run's tokens: each request takes its row in order until one
        finishes it (later ones are dropped). ``logprobs``: (per-row logprobs, per-row top
        logprobs or None), or None."""
        for i, (req, row) in enumerate(zip(reqs, tokens)):
            lps = None
            if logprobs is not None and req.return_logprob:
                lps = (logprobs[0][i], logprobs[1][i] if logprobs[1] is not None else None)
            taken, reason = self.outputs.append_run(req, row, self.context_length, lps)
            req.kv_len += taken  # each taken token's input token now has k/v
            self.stats.num_generated_tokens += taken
            self._settle(req, reason)

    def _settle(self, req: Req, reason: FinishReason | None) -> None:
        if reason is not None:
            self.retire(req, reason)
        else:
            self.outputs.maybe_emit(req)

    def _append_constrained(self, req: Req, token: int, lp, top) -> FinishReason | None:
        """The matcher sees the sampled token first (a broken constraint must not emit it);
        then the text the grammar forces next is appended too (jump-forward), its k/v
        computed with the next step's batch."""
        reason = self.grammar_backend.accept(req, token)
        if reason is not None and reason.is_abort:
            return reason
        tokens = [token]
        if reason is None:  # forced tokens come out of the budget left after this one
            tokens = self.grammar_backend.jump_forward(req, token, self.budget(req) - 1,
                                                       retokenize=not req.return_logprob)
        self.stats.num_jump_forward_tokens += len(tokens) - 1
        step_reason = None
        for k, t in enumerate(tokens):
            sampled = k == 0 and t == token
            step_reason = self.outputs.append_token(req, t, lp if sampled else 0.0,
                                                    top if sampled else [(0.0, t)], self.context_length)
            if step_reason is not None:
                break
        if step_reason is not None and step_reason.type != LENGTH:
            return step_reason  # EOS, a stop token or a stop string
        if req.grammar.is_terminated():  # complete, even when on the budget's last token
            return FinishReason.stop(req.output_ids[-1])
        return step_reason
