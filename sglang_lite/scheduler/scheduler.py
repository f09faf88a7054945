"""Continuous batching: each step retires finished requests, keeps every running request
decoding, admits waiting ones (and chunks of long prompts) under a token budget, runs one
forward pass for all of them, samples, and streams outputs.

A step is a mixed batch: running requests contribute one token each, prefills contribute
up to ``chunked_prefill_size`` tokens, so a long prompt never stalls the others' decoding.
When KV memory runs out, the youngest requests are retracted and recomputed later (with
priority scheduling: the lowest-priority ones, and a waiting request that outranks running
ones enough preempts them when it cannot otherwise be admitted).

This module is the loop and the request queues; the rest lives beside it: admission
planning (``admission``), who is retracted or preempted (``retraction``), KV ownership
(``cache``), the waiting order (``policy``), tokens appended to requests (``appender``) and
their outputs (``output``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future

from sglang_lite.config import EngineConfig
from sglang_lite.model_runner import ModelRunner
from sglang_lite.outputs import FinishReason
from sglang_lite.request import Req, ReqStatus
from sglang_lite.sampler import Sampler
from sglang_lite.scheduled_batch import ScheduledBatch
from sglang_lite.scheduler.admission import PrefillAdder, PrefillPlan, could_admit
from sglang_lite.scheduler.appender import TokenAppender
from sglang_lite.scheduler.cache import KVCacheManager
from sglang_lite.scheduler.output import OutputProcessor
from sglang_lite.scheduler.policy import PriorityRule
from sglang_lite.scheduler.retraction import make_room_for_decode, preempt_for_priority
from sglang_lite.scheduler.stats import SchedulerStats
from sglang_lite.scheduler.step_guard import StepGuard

log = logging.getLogger(__name__)

class Scheduler:
    def __init__(self, config: EngineConfig, runner: ModelRunner, cache: KVCacheManager,
                 sampler: Sampler, outputs: OutputProcessor, context_length: int, policy=None,
                 grammar_backend=None, priority: PriorityRule | None = None):
        self.config = config
        self.runner = runner
        self.cache = cache
        self.sampler = sampler
        self.outputs = outputs
        self.context_length = context_length
        self.policy = policy  # callable(waiting, radix, now) -> ordered list, or None for FCFS
        self.grammar_backend = grammar_backend
        self.priority = priority  # None: priorities are ignored
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []  # holds KV; includes the request being chunk-prefilled
        self.chunked: Req | None = None
        self.new_token_ratio = config.new_token_ratio
        self.num_continuous_decode_steps = config.num_continuous_decode_steps  # benchmarks vary it
        self.stats = SchedulerStats()
        self.on_batch = None  # observer: called with each ScheduledBatch before it runs (tests)
        self.guard = StepGuard()
        self.appender = TokenAppender(outputs, grammar_backend, self.stats, context_length, self._retire)

    # ---- intake -------------------------------------------------------------------------
    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add_request(self, req: Req) -> None:
        req.status = ReqStatus.WAITING
        if self.grammar_backend is not None:
            self.grammar_backend.attach(req)
        self.waiting.append(req)

    def abort(self, rid: str) -> None:
        for req in [r for r in (*self.waiting, *self.running) if r.rid == rid]:
            self.abort_one(req, "aborted by client")

    def abort_all(self, message: str) -> None:
        for req in list(self.waiting) + list(self.running):
            self.abort_one(req, message)

    def abort_one(self, req: Req, message: str) -> None:
        reason = FinishReason.abort(message)
        if req in self.running:
            self._retire(req, reason)
            return
        if req in self.waiting:
            self.waiting.remove(req)
        self._finish(req, reason)

    # ---- the loop body ------------------------------------------------------------------
    def step(self) -> bool:
        """Run one batch; False when there was nothing to run. A step that fails fails only
        the requests whose data made it fail (``StepGuard``); the others run on next step."""
        self.guard.begin()
        try:
            return self._step()
        except Exception as e:
            if not self.guard.recover(self, e):
                raise
            return True
        finally:
            self.guard.end()

    def _step(self) -> bool:
        steps = self._continuous_steps()
        if steps > 1:
            self._decode_continuously(steps)
            return True
        batch = self._schedule()
        if batch is None:
            return False
        self.guard.batch(batch.reqs)
        if self.on_batch is not None:
            self.on_batch(batch)
        sampled = [batch.reqs[i] for i in self._sampled_rows(batch)]
        params = self.sampler.row_params(sampled, self.runner.device) if sampled else None
        masks = self._start_masks(sampled)
        logits = self.runner.forward(batch)
        self.guard.commit()
        self._process(batch, logits, masks, params)
        self.stats.num_steps += 1
        return True

    @staticmethod
    def _sampled_rows(batch: ScheduledBatch) -> list[int]:
        """Rows that sample a token this step: their prompt (or forced text) is complete
        after it, and they want new tokens."""
        return [i for i, (r, n) in enumerate(zip(batch.reqs, batch.extend_lens))
                if r.kv_len + n == r.seq_len and r.sampling.max_new_tokens != 0]

    def _start_masks(self, reqs: list[Req]) -> Future | None:
        """The grammar bitmask of ``reqs`` for this step. It depends only on tokens already
        accepted, so with ``overlap_grammar_masks`` it is filled in the backend's worker
        while the model runs; the matchers are not touched until it is done."""
        if self.grammar_backend is None or not any(r.grammar is not None for r in reqs):
            return None
        budgets = [self.appender.budget(r) for r in reqs]
        if self.config.overlap_grammar_masks:
            return self.grammar_backend.fill_bitmask_async(reqs, budgets)
        done: Future = Future()
        done.set_result(self.grammar_backend.fill_bitmask(reqs, budgets))
        return done

    def _continuous_steps(self) -> int:
        """How many decode steps the running requests can take back to back, with no host
        work between steps: > 1 only when nothing waits to be admitted, every running
        request is a plain decode that ``Sampler.can_sample_on_device`` (no grammar), and
        the pool has the pages for every step (else the one-step path decides, retracting
        if needed)."""
        steps = self.num_continuous_decode_steps
        if steps <= 1 or self.waiting or self.chunked is not None or not self.running:
            return 1
        if not all(r.extend_len == 1 and self.sampler.can_sample_on_device(r) for r in self.running):
            return 1
        # No further than the longest request still wants, nor past any context limit.
        steps = min(steps, max(r.remaining_new_tokens for r in self.running),
                    min(self.context_length - r.seq_len + 1 for r in self.running))
        if steps <= 1 or sum(self.cache.pages_needed(r, steps) for r in self.running) > self.cache.available_pages:
            return 1
        return steps

    def _decode_continuously(self, steps: int) -> None:
        """``steps`` decode steps of every running request in one device run; each request
        then takes its tokens in order until one finishes it (later ones are dropped)."""
        reqs = list(self.running)
        batch = ScheduledBatch(reqs, [1] * len(reqs), self.cache.allocate_batch(reqs, [steps] * len(reqs)), steps)
        self.guard.batch(reqs)
        if self.on_batch is not None:
            self.on_batch(batch)
        sampler = self.sampler.continuous(reqs, self.runner.device)
        tokens = self.runner.decode_steps(batch, sampler)
        self.guard.commit()
        self.appender.append_runs(reqs, tokens, sampler.logprobs())
        self.stats.num_steps += steps
        self.new_token_ratio = max(self.config.new_token_ratio, self.new_token_ratio - 0.002 * steps)

    def _schedule(self) -> ScheduledBatch | None:
        if self.priority is not None and self.waiting and self.running:
            preempt_for_priority(self.waiting, self.running, self.priority, self._could_admit, self._retract)
        decode = make_room_for_decode([r for r in self.running if r is not self.chunked], self.cache,
                                      self.priority, self._retract)
        # A running request computes its last sampled token, plus any jump-forward tokens.
        decode_lens = [r.extend_len for r in decode]
        budget = self.config.max_prefill_tokens - sum(decode_lens)
        committed = sum(self.cache.pages_needed(r, n) for r, n in zip(decode, decode_lens))
        prefill = self._admit(budget, committed)
        reqs = decode + [r for r, _ in prefill]
        if not reqs:
            return None
        lens = decode_lens + [n for _, n in prefill]
        slots = self.cache.allocate_batch(reqs, lens)
        return ScheduledBatch(reqs, lens, slots)

    def _could_admit(self, req: Req, without: Sequence[Req] = ()) -> bool:
        """Whether ``req`` fits next to the running requests, ``without`` some of them (their
        pages, rows and slots counted as available again)."""
        gone = {id(r) for r in without}
        return could_admit(
            req, [r for r in self.running if id(r) not in gone], self.cache,
            free_rows=self.cache.req_pool.num_free_rows + len(without),
            max_running=self.config.max_running_requests, chunk_size=self.config.chunked_prefill_size,
            new_token_ratio=self.new_token_ratio, extra_pages=sum(len(r.kv.pages) for r in without))

    def _retract(self, req: Req) -> None:
        log.debug("retracting %s at %d tokens", req.rid, req.seq_len)
        try:
            self._drop_running(req)
        except Exception as e:  # it is in no queue now: end it here, or nobody will
            log.exception("releasing %s for retraction failed", req.rid)
            self._finish(req, _error_reason(e))
            return
        req.status = ReqStatus.WAITING
        req.num_retractions += 1
        self.stats.num_retractions += 1
        self.waiting.appendleft(req)
        self.new_token_ratio = min(1.0, self.new_token_ratio + 0.1)

    def _retire(self, req: Req, reason: FinishReason) -> None:
        """Release a finished (or aborted) running request, then deliver its last output.
        Once out of the running set it is in no list ``abort_all`` searches, so a failure in
        either step ends the request here, with an error, after freeing what it holds."""
        try:
            self._drop_running(req)
        except Exception as e:
            log.exception("releasing %s failed", req.rid)
            reason = _error_reason(e)
        self._finish(req, reason)

    def _drop_running(self, req: Req) -> None:
        """Return ``req``'s KV, then take it out of the running set. A release that raises
        still frees what it had not returned (``cache.discard``) before the error goes up."""
        try:
            self.cache.release(req)
        except Exception:
            self.cache.discard(req)
            raise
        finally:
            self.running.remove(req)
            if req is self.chunked:
                self.chunked = None

    def _admit(self, budget: int, committed: int) -> list[tuple[Req, int]]:
        """Pick prefill work for this step: the in-progress chunk first, then new requests,
        each planned (nothing locked or written) and committed only once its plan fits.
        ``committed`` pages are already promised to this step's decodes."""
        adder = PrefillAdder(
            self.cache, budget, committed, chunk_size=self.config.chunked_prefill_size,
            running=self.running, max_running=self.config.max_running_requests,
            new_token_ratio=self.new_token_ratio, context_length=self.context_length)
        if self.chunked is not None and not adder.add_chunk(self.chunked):
            return adder.picked
        for req in self._ordered_waiting():
            if not adder.has_room():
                break
            match = self.cache.match(req)
            if adder.waits_for_in_flight(req, match):
                continue
            plan = adder.plan(req, match, chunk_busy=self.chunked is not None)
            if plan is None:
                break
            self._commit(plan)
            adder.add(plan)
        return adder.picked

    def _commit(self, plan: PrefillPlan) -> None:
        """The one commit of an admission: the request's row and cached prefix, then the
        running set."""
        self.cache.admit(plan.req, plan.match)
        self._start(plan.req)
        if plan.is_chunk:
            self.chunked = plan.req

    def _ordered_waiting(self) -> list[Req]:
        if self.policy is None:
            return list(self.waiting)
        return self.policy(list(self.waiting), self.cache.radix, time.monotonic())

    def _start(self, req: Req) -> None:
        self.waiting.remove(req)
        req.status = ReqStatus.RUNNING
        self.running.append(req)
        if req.num_retractions == 0 and not req.output_ids:
            req.cached_tokens = req.kv_len
            self.stats.num_prompt_tokens += len(req.origin_input_ids)
            self.stats.num_cached_prompt_tokens += req.kv_len

    # ---- results -------------------------------------------------------------------------
    def _process(self, batch: ScheduledBatch, logits, masks: Future | None = None, params=None) -> None:
        """``masks``: the bitmask of the rows that sample (``_sampled_rows``), being filled."""
        ready_rows, ready = [], []
        for i, (req, n) in enumerate(zip(batch.reqs, batch.extend_lens)):
            req.kv_len += n
            if req.extend_len > 0:  # mid-prompt chunk: no token yet
                self.stats.num_prefill_tokens += n
                self.cache.cache_unfinished(req)
                continue
            if n > 1:  # a prompt (or forced text) just computed: share it while this one decodes
                self.stats.num_prefill_tokens += n
                self.cache.cache_unfinished(req)
            if req is self.chunked:
                self.chunked = None
            if req.sampling.max_new_tokens == 0:  # prefill only (scoring, e.g. select)
                self._retire(req, FinishReason.at_length(0))
                continue
            ready_rows.append(i)
            ready.append(req)
        bitmask = masks.result() if masks is not None else None  # waits for the worker
        if not ready:
            return
        out = self.sampler(logits if len(ready) == len(batch.reqs) else logits[ready_rows], ready, bitmask,
                           params)
        self.appender.append_sampled(ready, out)
        self.new_token_ratio = max(self.config.new_token_ratio, self.new_token_ratio - 0.002)

    def _finish(self, req: Req, reason: FinishReason) -> None:
        """Hand ``req`` its final chunk. Its KV is already released, so if building or
        delivering that chunk fails the request still ends, with an error chunk."""
        req.status = ReqStatus.FINISHED
        try:
            req.finished_reason = reason
            self.outputs.finish(req)
        except Exception as e:
            log.exception("finishing %s failed", req.rid)
            reason = req.finished_reason = _error_reason(e)
            self.outputs.fail(req)
        if reason.is_abort:
            self.stats.num_aborted += 1
        else:
            self.stats.num_finished += 1


def _error_reason(e: Exception) -> FinishReason:
    return FinishReason.abort(f"engine error: {type(e).__name__}: {e}")
