"""Constrained decoding in the engine: compile a request's regex / JSON schema / EBNF with
``constraints`` at intake (caller threads, never the scheduler's), fill its bitmask row each
step within its remaining token budget (``constraints.closing``), and advance its matcher by
the sampled token. A matcher failure finishes only its own request.

Rows are filled into one reusable buffer (pinned on CUDA). A step's rows depend only on
tokens already accepted, so the scheduler may have them filled in a worker thread while the
model runs (``fill_bitmask_async``) and wait for them just before sampling."""

from __future__ import annotations

import math
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from sglang_lite.errors import ConstraintRefused, InvalidRequest
from sglang_lite.outputs import FinishReason
from sglang_lite.request import Req
from sglang_lite.sampling_params import SamplingParams


class GrammarBackend:
    def __init__(self, tokenizer, vocab_size: int, eos_token_ids: tuple[int, ...], jump_forward: bool,
                 compile_workers: int = 0, compile_timeout: float = 10.0, compile_queue: int = 32):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids
        self.jump_forward_enabled = jump_forward
        self.compile_timeout = compile_timeout
        self._compiler = None
        self._lock = threading.Lock()  # compile from caller threads, match on the scheduler's
        self._mask: torch.Tensor | None = None  # [capacity, ceil(V/32)], reused every step
        self._worker: ThreadPoolExecutor | None = None
        self.pool = None  # CompilePool: compiles in worker processes
        if compile_workers > 0:
            from sglang_lite.compile_pool import CompilePool

            self.pool = CompilePool(self.compiler.info, compile_workers, compile_queue, compile_timeout)
            # This process's per-tokenizer tables (the masks of pool-compiled grammars use
            # them), built now, in the background, rather than on the first request's step.
            threading.Thread(target=self.compiler.compile_regex, args=("[a-z]",), daemon=True,
                             name="sglang-lite-grammar-warmup").start()

    @property
    def compiler(self):
        with self._lock:
            if self._compiler is None:
                from constraints import GrammarCompiler, TokenizerInfo

                info = TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.vocab_size)
                self._compiler = GrammarCompiler(info, compile_timeout_s=self.compile_timeout)
            return self._compiler

    def compile(self, params: SamplingParams, cancel: threading.Event | None = None):
        """The compiled grammar for ``params`` (in a worker process when there is a pool);
        ConstraintRefused naming the field if it cannot be."""
        from constraints import ConstraintError
        from constraints.limits import check_spec

        kind, spec = params.constraint
        try:
            if self.pool is not None:
                check_spec(kind, spec, self.compiler.limits)  # here: a refusal needs no worker
                grammar = self.pool.compile(kind, spec, cancel)
            elif kind == "regex":
                grammar = self.compiler.compile_regex(spec)
            elif kind == "json_schema":
                grammar = self.compiler.compile_json_schema(spec)
            elif kind == "choices":
                grammar = self.compiler.compile_choices(spec)
            else:
                grammar = self.compiler.compile_ebnf(spec)
        except ConstraintError as e:
            raise ConstraintRefused(kind, str(e), refusal_reason(e), keyword=getattr(e, "keyword", ""),
                                    pointer=getattr(e, "pointer", "")) from e
        except RecursionError as e:
            raise ConstraintRefused(kind, "nested too deeply to compile", "too_complex") from e
        if params.reasoning_prefix is None:
            return grammar
        return self.compiler.compile_after_think(grammar, params.reasoning_prefix)

    def admit(self, params: SamplingParams, cancel: threading.Event | None = None):
        """Compile ``params``' constraint (never on the scheduler thread) and check that
        max_new_tokens leaves room for a complete output; InvalidRequest naming the field."""
        grammar = self.compile(params, cancel)
        if grammar.admits_nothing:
            raise ConstraintRefused(params.constraint[0], "no output satisfies this constraint (no value "
                                    "matches it)", "invalid")
        matcher = grammar.matcher()
        if matcher.finishes_within(params.max_new_tokens):
            return grammar
        need = matcher.min_tokens_to_finish()
        if math.isfinite(need) and params.max_new_tokens < need:
            raise InvalidRequest(
                "max_new_tokens", f"{params.max_new_tokens} is too few for this constraint: its "
                f"shortest complete output takes {int(need)} tokens; set it to at least {int(need)}")
        return grammar

    def attach(self, req: Req) -> None:
        """Give a queued request its matcher, made from the grammar compiled at intake: the
        scheduler thread, which calls this, never compiles."""
        if req.sampling.constraint is None or req.grammar is not None:
            return
        if req.compiled_grammar is None:
            req.grammar = _BrokenMatcher("constraint: not compiled at intake")
        else:
            req.grammar = req.compiled_grammar.matcher()

    def fill_bitmask(self, reqs: list[Req], budgets: list[int]) -> torch.Tensor | None:
        """[B, ceil(V/32)] int32 rows (all ones for unconstrained rows), or None. Row i keeps
        only tokens after which reqs[i] can still finish within budgets[i] tokens. A view of
        the reusable buffer, valid until the next call."""
        if not any(r.grammar is not None for r in reqs):
            return None
        mask = self._buffer(len(reqs))
        # numpy's fill, not torch's: from 22 rows up torch's fill_ is an OpenMP parallel
        # region, and its team would stay with the mask thread and slow every step
        # (engine.py: torch's parallel work stays on the scheduler's thread).
        mask.numpy().fill(-1)
        for i, (req, budget) in enumerate(zip(reqs, budgets)):
            if req.grammar is None:
                continue
            try:
                req.grammar.fill_next_token_bitmask(mask, i, budget)
            except Exception as e:  # fail this request alone, at its next accept
                req.grammar = _BrokenMatcher(f"constraint: {type(e).__name__}: {e}")
        return mask

    def fill_bitmask_async(self, reqs: list[Req], budgets: list[int]) -> Future:
        """``fill_bitmask`` in the backend's worker thread (one: fills never overlap each
        other); the caller must not touch these matchers until the future is done."""
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="sglang-lite-masks")
        return self._worker.submit(self.fill_bitmask, reqs, budgets)

    def _buffer(self, rows: int) -> torch.Tensor:
        # Reusing it is safe on CUDA too: the sampler's async copy out of it has finished by
        # the time the step's sampled ids reach the host, before the next fill starts.
        if self._mask is None or self._mask.shape[0] < rows:
            from constraints import bitmask_words

            capacity = max(rows, 2 * (0 if self._mask is None else self._mask.shape[0]), 8)
            self._mask = torch.empty((capacity, bitmask_words(self.vocab_size)), dtype=torch.int32,
                                     pin_memory=torch.cuda.is_available())
        return self._mask[:rows]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker = None

    def jump_forward(self, req: Req, token: int, limit: int, retokenize: bool = True) -> list[int]:
        """The tokens to append after sampling ``token`` (already accepted): ``[token]``
        plus the text the grammar forces next, at most ``limit`` extra tokens, all accepted
        by the matcher, and only if the output can still finish in the tokens left after
        them (they count against the budget). With ``retokenize``, the sampled token and the
        forced text are tokenized together, so the boundary gets the tokens a tokenizer
        would produce (``{"`` rather than ``{`` + ``"``)."""
        if not self.jump_forward_enabled or limit <= 0:
            return [token]
        forced = req.grammar.find_jump_forward_string()
        if not forced:
            return [token]
        budget = limit + 1  # tokens left, the sampled one included
        if retokenize:
            head = self.tokenizer.decode([token])
            ids = self.tokenizer.encode(head + forced, add_special_tokens=False)[:budget]
            req.grammar.rollback(1)
            if self._decodes_to(ids, head + forced) and self._accept_within(req.grammar, ids, budget):
                return ids
            req.grammar.accept_token(token)  # undo the rollback, then the plain way
        ids = self.tokenizer.encode(forced, add_special_tokens=False)[:limit]
        return [token] + ids if self._accept_within(req.grammar, ids, limit) else [token]

    def _decodes_to(self, ids: list[int], text: str) -> bool:
        # Only a lossless tokenization may replace the sampled token (e.g. no dropped spaces).
        return "\ufffd" not in text and self.tokenizer.decode(ids) == text

    @staticmethod
    def _accept_within(matcher, ids: list[int], budget: int) -> bool:
        """Accept ``ids`` one by one and keep them if the output can still finish in the
        ``budget - len(ids)`` tokens left after them; else (or on a refusal) undo them all."""
        for n, t in enumerate(ids):
            if not matcher.accept_token(t):
                matcher.rollback(n)
                return False
        if matcher.min_tokens_to_finish() > budget - len(ids):
            matcher.rollback(len(ids))
            return False
        return True

    def accept(self, req: Req, token: int) -> FinishReason | None:
        """Advance the matcher; a finish reason if the constraint is done or broken."""
        if req.grammar is None:
            return None
        if isinstance(req.grammar, _BrokenMatcher):
            return FinishReason.abort(req.grammar.message)
        try:
            accepted = req.grammar.accept_token(token)
        except Exception as e:
            return FinishReason.abort(f"constraint: {type(e).__name__}: {e}")
        if not accepted:
            return FinishReason.abort(f"constraint: token {token} rejected by the grammar")
        if req.grammar.is_terminated():
            return FinishReason.stop(token)
        return None


def refusal_reason(e: Exception) -> str:
    """limit | timeout | too_complex | unsupported | invalid, from the compiler's error type."""
    from constraints import (
        CompileTimeoutError,
        ConstraintLimitError,
        GrammarTooComplexError,
        UnsupportedSchemaError,
    )

    for cls, reason in ((ConstraintLimitError, "limit"), (CompileTimeoutError, "timeout"),
                        (GrammarTooComplexError, "too_complex"), (UnsupportedSchemaError, "unsupported")):
        if isinstance(e, cls):
            return reason
    return "invalid"


class _BrokenMatcher:
    """Stands in for a matcher that failed; the request is aborted at its next token."""

    def __init__(self, message: str):
        self.message = message

    def fill_next_token_bitmask(self, mask, row, max_tokens=None) -> None:
        pass

    def find_jump_forward_string(self) -> str:
        return ""

    def is_terminated(self) -> bool:
        return False
