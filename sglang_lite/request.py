"""One request's state, from admission to its last output."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sglang_lite.outputs import FinishReason, OutputChunk
from sglang_lite.sampling_params import SamplingParams


class ReqStatus(enum.Enum):
    WAITING = enum.auto()
    RUNNING = enum.auto()
    FINISHED = enum.auto()


@dataclass(slots=True)
class KVHold:
    """The KV memory a request holds while admitted: its request-to-token row and the pages
    backing its positions. The host list is the one source of truth; the device row is
    written from it, never read back."""

    row: int | None = None  # its row of the request-to-token table (None: not admitted)
    pages: list[int] = field(default_factory=list)  # pages backing positions, in order
    num_cached_pages: int = 0  # leading pages owned by the radix cache (locked, not ours)
    node: Any = None  # the radix node locked for this request (ends the cached pages)


@dataclass(slots=True)
class OutputState:
    """What has been produced for the consumer and what of it was sent."""

    detok: Any = None  # IncrementalDetokenizer, made on the first token
    text: str = ""  # full decoded text so far (before stop-string trimming)
    emitted_chars: int = 0  # len of text already sent to the consumer
    emitted_ids: int = 0  # output ids already sent
    first_token_time: float | None = None
    finish_time: float | None = None


@dataclass(slots=True)
class LogprobRecord:
    """Logprobs recorded for the request (when it asked for them): (logprob, token) pairs,
    and per position the top alternatives as (logprob, token) lists."""

    output: list[tuple[float, int]] = field(default_factory=list)
    output_top: list[list[tuple[float, int]]] = field(default_factory=list)
    input: list[tuple[float | None, int]] = field(default_factory=list)
    input_top: list[list[tuple[float, int]]] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class Req:
    """What the client asked (the fields given at construction), how far it has come
    (``output_ids``, ``kv_len``, ``status``), and three small records: the KV it holds
    (``kv``, the cache manager's), what was sent (``out``, the output processor's) and its
    logprobs (``logprobs``)."""

    rid: str
    origin_input_ids: list[int]
    sampling: SamplingParams
    seed: int
    on_output: Callable[[OutputChunk], None]
    return_logprob: bool = False
    top_logprobs_num: int = 0
    stream: bool = False
    logprob_start_len: int | None = None  # prompt positions from here get input logprobs
    cache_salt: str | None = None  # prefix-cache namespace: only equal salts share prefixes
    priority: int = 0  # as the client sent it; the scheduler's PriorityRule ranks it
    arrival_time: float = field(default_factory=time.monotonic)
    compiled_grammar: Any = None  # constraints.CompiledGrammar, compiled at intake

    output_ids: list[int] = field(default_factory=list)
    status: ReqStatus = ReqStatus.WAITING
    finished_reason: FinishReason | None = None
    kv_len: int = 0  # positions [0, kv_len) have k/v in the pool
    kv: KVHold = field(default_factory=KVHold)
    out: OutputState = field(default_factory=OutputState)
    logprobs: LogprobRecord = field(default_factory=LogprobRecord)
    grammar: Any = None  # compiled_grammar's matcher, made when the scheduler queues the request
    cached_tokens: int = 0  # prompt tokens served from the prefix cache (first admission)
    num_retractions: int = 0
    # fill_ids / cache_ids as last built, and the sequence length they were built at.
    _fill: tuple[int, list[int], list] | None = field(default=None, init=False, repr=False)

    @property
    def req_pool_idx(self) -> int | None:
        """The request's row of the request-to-token table (what the model runner reads)."""
        return self.kv.row

    @property
    def input_logprobs(self) -> list[tuple[float | None, int]]:
        """``logprobs.input``, which the model runner extends as prompt chunks are computed."""
        return self.logprobs.input

    @property
    def input_top_logprobs(self) -> list[list[tuple[float, int]]]:
        return self.logprobs.input_top

    @property
    def fill_ids(self) -> list[int]:
        """Every token whose k/v must exist before the next token is sampled. Built once per
        sequence length (admission reads it for every waiting request on every step, and a
        waiting request does not grow); read-only."""
        return self._built()[1]

    @property
    def cache_ids(self) -> list:
        """``fill_ids`` as the prefix cache keys them: with a salt, the first token becomes
        (salt, token), so no key of one salt is ever a prefix of another salt's. Read-only."""
        return self._built()[2]

    def _built(self) -> tuple[int, list[int], list]:
        # Tokens are only ever appended to output_ids, so the length tells whether it changed.
        n = len(self.origin_input_ids) + len(self.output_ids)
        if self._fill is None or self._fill[0] != n:
            ids = self.origin_input_ids + self.output_ids
            keyed = ids if self.cache_salt is None or not ids else [(self.cache_salt, ids[0]), *ids[1:]]
            self._fill = (n, ids, keyed)
        return self._fill

    def tokens(self, start: int, end: int) -> list[int]:
        """fill_ids[start:end] without building the whole concatenation (hot path)."""
        n = len(self.origin_input_ids)
        if end <= n:
            return self.origin_input_ids[start:end]
        if start >= n:
            return self.output_ids[start - n : end - n]
        return self.origin_input_ids[start:] + self.output_ids[: end - n]

    @property
    def seq_len(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    @property
    def extend_len(self) -> int:
        return self.seq_len - self.kv_len

    @property
    def cacheable_prefix_limit(self) -> int:
        """How much of the prompt may come from the prefix cache: input logprobs need
        logits at every position from logprob_start_len - 1 on, so those are computed."""
        limit = self.seq_len - 1  # at least one token is computed, so there are logits
        if self.logprob_start_len is not None:
            limit = min(limit, max(self.logprob_start_len - 1, 0))
        return limit

    def input_logprob_positions(self, start: int, n: int) -> list[int]:
        """Positions in [start, start+n) whose logits score a prompt token we must report."""
        if self.logprob_start_len is None:
            return []
        first = max(self.logprob_start_len, 1) - 1
        last = len(self.origin_input_ids) - 2  # position p scores token p + 1
        return list(range(max(start, first), min(start + n - 1, last) + 1))

    @property
    def remaining_new_tokens(self) -> int:
        return max(self.sampling.max_new_tokens - len(self.output_ids), 0)

    @property
    def finished(self) -> bool:
        return self.finished_reason is not None
