"""The public, SGLang-compatible entry point: ``Engine(model=None, **options)``.

The engine owns a scheduler that runs in a background thread; ``generate`` and
``async_generate`` submit requests to it and collect their output chunks, so several
callers (threads, asyncio tasks, the HTTP server) share one continuously batched loop.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import secrets
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import torch

from sglang_lite.attention import create_backend, fit_attention_backend
from sglang_lite.config import EngineConfig, parse_size
from sglang_lite.mem.kv_pool import KVPool
from sglang_lite.mem.req_to_token import ReqToTokenPool
from sglang_lite.model.loader import load_model, load_tokenizer, resolve_model
from sglang_lite.model_runner import ModelRunner
from sglang_lite.quant.apply import resident_weight_bytes
from sglang_lite.request import Req
from sglang_lite.sampler import Sampler
from sglang_lite.sampling_params import SamplingParams
from sglang_lite.scheduler.cache import KVCacheManager
from sglang_lite.scheduler.output import OutputProcessor
from sglang_lite.scheduler.scheduler import Scheduler

log = logging.getLogger(__name__)


class QueueFullError(RuntimeError):
    """The waiting queue is over ``max_queue_size``; retry later."""


class Engine:
    def __init__(self, model: str | None = None, **options: Any):
        self.config = cfg = EngineConfig.create(model=model, **options)
        if cfg.num_threads and cfg.device == "cpu":
            torch.set_num_threads(cfg.num_threads)
        self.source = resolve_model(cfg.model, cfg.tokenizer, cfg.revision)
        self.model = load_model(self.source, cfg.torch_dtype, cfg.torch_device, cfg.seed, cfg.quantization)
        log.info("weights: %.1f MB resident (%s, quantization %s)", resident_weight_bytes(self.model) / 1e6,
                 cfg.dtype, cfg.quantization)
        self.model_config = self.model.config
        self.config = cfg = fit_attention_backend(cfg, self.model_config, options.get("attention_backend", "auto"))
        self.tokenizer = load_tokenizer(self.source)
        self.eos_token_ids = self._eos_ids()
        self.kv_pool = self._build_kv_pool()
        usable_tokens = self.kv_pool.allocator.num_usable_pages * cfg.page_size
        self.context_length = min(cfg.context_length or self.model_config.max_position_embeddings,
                                  self.model_config.max_position_embeddings, usable_tokens)
        self.max_prompt_chars = self.context_length * _max_token_chars(self.tokenizer)
        self.req_pool = ReqToTokenPool(cfg.max_running_requests, self.context_length, cfg.torch_device)
        backend = create_backend(cfg.attention_backend, self.kv_pool)
        runner = ModelRunner(self.model, backend, self.req_pool, cfg.torch_device,
                             cuda_graph_max_bs=cfg.cuda_graph_batch_limit)
        radix, policy = self._build_radix()
        if radix is None and cfg.enable_priority_scheduling:
            policy = self._schedule_policy()  # priority ordering needs no prefix cache
        self.cache = KVCacheManager(self.kv_pool, self.req_pool, radix)
        self.scheduler = Scheduler(
            cfg, runner, self.cache, Sampler(self.model_config.vocab_size, self.eos_token_ids),
            OutputProcessor(self.tokenizer, self.eos_token_ids, cfg.stream_interval),
            self.context_length, policy=policy, grammar_backend=self._build_grammar_backend(),
            priority=self._priority_rule(),
        )
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._in_flight = 0
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="sglang-lite-scheduler", daemon=True)
        self._thread.start()

    # ---- construction helpers ---------------------------------------------------------------
    def _eos_ids(self) -> tuple[int, ...]:
        ids = set(self.model_config.eos_token_ids)
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return tuple(sorted(ids))

    def _build_kv_pool(self) -> KVPool:
        cfg, mc = self.config, self.model_config
        per_token = KVPool.bytes_per_token(mc.num_layers, mc.num_kv_heads, mc.head_dim, cfg.torch_dtype)
        if cfg.max_total_tokens is not None:
            tokens = cfg.max_total_tokens
        elif cfg.device.startswith("cuda"):
            free, total = torch.cuda.mem_get_info(cfg.torch_device)
            tokens = int(free - total * (1 - cfg.mem_fraction_static)) // per_token
        else:
            tokens = parse_size(cfg.kv_cache_memory) // per_token
        num_pages = tokens // cfg.page_size + 1  # + the reserved padding page
        if num_pages < 2:
            raise ValueError(f"kv_cache_memory: too small for one page of {cfg.page_size} tokens")
        return KVPool(num_pages, cfg.page_size, mc.num_layers, mc.num_kv_heads, mc.head_dim,
                      cfg.torch_dtype, cfg.torch_device)

    def _build_radix(self):
        if self.config.disable_radix_cache:
            return None, None
        try:
            from sglang_lite.mem.radix_cache import RadixCache
        except ImportError:  # pragma: no cover - during bring-up
            return None, None
        return RadixCache(self.kv_pool.allocator, self.config.page_size), self._schedule_policy()

    def _schedule_policy(self):
        from sglang_lite.scheduler.policy import SchedulePolicy

        cfg = self.config
        if cfg.schedule_policy != "lpm" and not cfg.enable_priority_scheduling:
            return None  # plain FCFS: the queue's own order
        return SchedulePolicy(use_prefix=cfg.schedule_policy == "lpm", priority=self._priority_rule())

    def _priority_rule(self):
        from sglang_lite.scheduler.policy import PriorityRule

        cfg = self.config
        if not cfg.enable_priority_scheduling:
            return None
        return PriorityRule(cfg.schedule_low_priority_values_first,
                            cfg.priority_scheduling_preemption_threshold)

    def _build_grammar_backend(self):
        if self.tokenizer is None:
            return None
        from sglang_lite.grammar import GrammarBackend

        cfg = self.config
        return GrammarBackend(self.tokenizer, self.model_config.vocab_size, self.eos_token_ids,
                              cfg.enable_jump_forward, compile_workers=cfg.grammar_compile_workers,
                              compile_timeout=cfg.grammar_compile_timeout,
                              compile_queue=cfg.grammar_compile_queue)

    # ---- the scheduler thread ---------------------------------------------------------------
    def _loop(self) -> None:
        sched = self.scheduler
        while True:
            try:
                item = self._inbox.get(block=not sched.has_work)
                while True:
                    if self._handle(item) is False:
                        return
                    item = self._inbox.get_nowait()
            except queue.Empty:
                pass
            try:
                sched.step()
            except Exception as e:  # a bug or OOM fails the batch, never the engine
                log.exception("scheduler step failed")
                sched.abort_all(f"engine error: {type(e).__name__}: {e}")

    def _handle(self, item: tuple) -> bool:
        kind = item[0]
        if kind == "add":
            self.scheduler.add_request(item[1])
        elif kind == "abort":
            self.scheduler.abort(item[1])
        elif kind == "abort_all":
            self.scheduler.abort_all("aborted by client")
        elif kind == "call":
            _, fn, box, done = item
            try:
                box.append(fn())
            except Exception as e:
                box.append(e)
            done.set()
        elif kind == "stop":
            self.scheduler.abort_all("engine shut down")
            return False
        return True

    def _call(self, fn):
        """Run ``fn`` on the scheduler thread, between steps, and return its result."""
        box: list = []
        done = threading.Event()
        self._inbox.put(("call", fn, box, done))
        done.wait()
        if isinstance(box[0], Exception):
            raise box[0]
        return box[0]

    # ---- request intake ---------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise ValueError("prompt: this model has no tokenizer; pass input_ids")
        self.check_prompt_chars(len(text))
        bos = self.tokenizer.bos_token
        add_special = not (bos and text.startswith(bos))
        return self.tokenizer.encode(text, add_special_tokens=add_special)

    def check_prompt_chars(self, num_chars: int, field: str = "prompt") -> None:
        """Refuse text that cannot fit the context before tokenizing it: no token decodes to
        more than ``max_token_chars`` characters, so longer text has more tokens than fit."""
        if num_chars > self.max_prompt_chars:
            raise ValueError(f"{field}: {num_chars} characters cannot fit the context length "
                             f"{self.context_length} (at most {self.max_prompt_chars} characters)")

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, **kw) -> str:
        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("messages: this model has no chat template")
        self.check_prompt_chars(sum(len(m.get("content") or "") for m in messages
                                    if isinstance(m.get("content"), str)), "messages")
        return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt, **kw)

    def _make_reqs(self, prompt, input_ids, sampling_params, return_logprob, top_logprobs_num,
                   stream, rid, logprob_start_len=None, cancel: threading.Event | None = None,
                   cache_salt: str | None = None, priority=None) -> tuple[list[tuple[Req, list]], bool]:
        """Validate everything first, so one bad item leaves nothing submitted."""
        single = not (isinstance(prompt, list) or (input_ids and isinstance(input_ids[0], list)))
        if prompt is None and input_ids is None:
            raise ValueError("prompt: one of prompt or input_ids is required")
        if prompt is not None and input_ids is not None:
            raise ValueError("prompt: pass prompt or input_ids, not both")
        items = [prompt] if prompt is not None and single else prompt
        id_lists = ([input_ids] if single else input_ids) if input_ids is not None else None
        if id_lists is None:
            if not all(isinstance(p, str) for p in items):
                raise ValueError("prompt: must be a string or a list of strings")
            id_lists = [self.tokenize(p) for p in items]
        if not id_lists:
            raise ValueError("prompt: an empty list of prompts")
        params_list = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(id_lists)
        if len(params_list) != len(id_lists):
            raise ValueError("sampling_params: a list must have one entry per prompt")
        if not isinstance(top_logprobs_num, int) or top_logprobs_num < 0 or top_logprobs_num > 20:
            raise ValueError("top_logprobs_num: must be an integer in [0, 20]")
        if priority is None:
            priority = 0
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise ValueError(f"priority: must be an integer, got {priority!r}")
        out = []
        for ids, sp in zip(id_lists, params_list):
            params = SamplingParams.from_dict(sp)
            self._check_input_ids(ids)
            params.check_limits(self.model_config.vocab_size, self.context_length)
            compiled = self._compile_constraint(params, cancel)
            for i in range(params.n):
                seed = secrets.randbits(62) if params.seed is None else params.seed + i
                rid_i = rid if (rid and params.n == 1 and single) else uuid.uuid4().hex
                req = Req(rid_i, list(ids), params, seed, on_output=None, compiled_grammar=compiled,
                          return_logprob=return_logprob,
                          top_logprobs_num=top_logprobs_num if return_logprob else 0, stream=stream,
                          logprob_start_len=_input_logprob_start(return_logprob, logprob_start_len, ids),
                          cache_salt=_check_salt(cache_salt), priority=priority)
                out.append((req, ids))
        return out, single and out[0][0].sampling.n == 1

    def _compile_constraint(self, params: SamplingParams, cancel: threading.Event | None = None):
        """The request's compiled constraint (or None), made here on the caller's thread so
        the scheduler never compiles; compile errors and a max_new_tokens too small for any
        complete output surface here as ValueError."""
        if params.constraint is None:
            return None
        if self.scheduler.grammar_backend is None:
            raise ValueError(f"{params.constraint[0]}: this model has no tokenizer to constrain with")
        return self.scheduler.grammar_backend.admit(params, cancel)

    def _check_input_ids(self, ids) -> None:
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) for t in ids):
            raise ValueError("input_ids: must be a non-empty list of token ids")
        vocab = self.model_config.vocab_size
        if min(ids) < 0 or max(ids) >= vocab:
            raise ValueError(f"input_ids: token ids must be in [0, {vocab})")
        if len(ids) >= self.context_length:
            raise ValueError(f"prompt: {len(ids)} tokens does not fit the context length "
                             f"{self.context_length} (prompt plus at least one new token)")

    def _submit(self, req: Req, sink) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("engine: shut down")
            if self._in_flight >= self.config.max_queue_size + self.config.max_running_requests:
                raise QueueFullError(f"queue: more than {self.config.max_queue_size} waiting requests")
            self._in_flight += 1

        def on_output(chunk: dict) -> None:
            if chunk["finished"]:
                with self._lock:
                    self._in_flight -= 1
            sink(chunk)

        req.on_output = on_output
        self._inbox.put(("add", req))

    # ---- public API -------------------------------------------------------------------------
    def generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob: bool = False,
                 top_logprobs_num: int = 0, stream: bool = False, rid: str | None = None,
                 logprob_start_len: int | None = None, cache_salt: str | None = None,
                 priority: int | None = None):
        """A dict for one prompt (n == 1), else a list of dicts; an iterator of chunks if stream.
        With return_logprob and logprob_start_len=k, prompt tokens from k on get
        ``input_token_logprobs`` (the first prompt token's is None). ``priority`` matters
        with ``enable_priority_scheduling``."""
        reqs, single = self._make_reqs(prompt, input_ids, sampling_params, return_logprob,
                                       top_logprobs_num, stream, rid, logprob_start_len,
                                       cache_salt=cache_salt, priority=priority)
        if stream:
            if len(reqs) != 1:
                raise ValueError("stream: streaming takes a single prompt with n == 1")
            return self._stream(reqs[0][0])
        queues = []
        for i, (req, _) in enumerate(reqs):
            q: queue.SimpleQueue = queue.SimpleQueue()
            try:
                self._submit(req, q.put)
            except QueueFullError:  # all or nothing: withdraw the ones already queued
                for submitted, _ in reqs[:i]:
                    self.abort(submitted.rid)
                raise
            queues.append(q)
        results = [_collect(iter(q.get, None)) for q in queues]
        return results[0] if single else results

    def _stream(self, req: Req) -> Iterator[dict]:
        q: queue.SimpleQueue = queue.SimpleQueue()
        self._submit(req, q.put)  # now, not on first next(): errors reach the caller here
        return _ChunkStream(self, req, q.get)

    async def async_generate(self, prompt=None, sampling_params=None, input_ids=None,
                             return_logprob: bool = False, top_logprobs_num: int = 0,
                             stream: bool = False, rid: str | None = None,
                             logprob_start_len: int | None = None, cache_salt: str | None = None,
                             priority: int | None = None):
        """Awaitable result, or (stream=True) an async iterator of chunks. Tokenizing and
        grammar compilation run in a worker thread, off the event loop."""
        loop = asyncio.get_running_loop()
        cancel = threading.Event()  # set if this coroutine is cancelled: stops a compile
        try:
            reqs, single = await loop.run_in_executor(
                None, self._make_reqs, prompt, input_ids, sampling_params, return_logprob,
                top_logprobs_num, stream, rid, logprob_start_len, cancel, cache_salt, priority)
        except asyncio.CancelledError:
            cancel.set()
            raise
        if stream:
            if len(reqs) != 1:
                raise ValueError("stream: streaming takes a single prompt with n == 1")
            return self._astream(reqs[0][0], loop)
        streams = [self._astream(r, loop) for r, _ in reqs]  # QueueFullError surfaces here
        try:
            results = await asyncio.gather(*(_acollect(s) for s in streams))
        finally:
            for s in streams:
                await s.aclose()
        return results[0] if single else list(results)

    def _astream(self, req: Req, loop: asyncio.AbstractEventLoop) -> _AsyncChunkStream:
        aq: asyncio.Queue = asyncio.Queue()

        def sink(chunk: dict) -> None:
            if not loop.is_closed():  # a closed loop has no consumer left to tell
                loop.call_soon_threadsafe(aq.put_nowait, chunk)

        self._submit(req, sink)
        return _AsyncChunkStream(self, req, aq)

    def abort(self, rid: str) -> None:
        self._inbox.put(("abort", rid))

    def abort_all(self) -> None:
        """Abort every request submitted so far, waiting or running."""
        self._inbox.put(("abort_all",))

    def flush_cache(self) -> bool:
        """Drop every cached prefix not in use; False if requests are running."""
        def flush():
            if self.cache.radix is None:
                return True
            if self.scheduler.running:
                return False
            self.cache.radix.reset()
            return True
        return self._call(flush)

    def get_stats(self) -> dict[str, Any]:
        def stats():
            s = self.scheduler.stats
            alloc = self.kv_pool.allocator
            radix = self.cache.radix
            return {
                "num_running_reqs": len(self.scheduler.running),
                "num_queue_reqs": len(self.scheduler.waiting),
                "num_free_pages": alloc.num_free_pages,
                "num_usable_pages": alloc.num_usable_pages,
                "num_cached_pages": (radix.total_size // self.config.page_size) if radix else 0,
                "token_usage": 1 - alloc.num_free_pages / alloc.num_usable_pages,
                "cache_hit_rate": s.cache_hit_rate,
                "evicted_tokens": getattr(radix, "evicted_tokens", 0) if radix else 0,
                "num_prompt_tokens": s.num_prompt_tokens,
                "num_cached_prompt_tokens": s.num_cached_prompt_tokens,
                "num_generated_tokens": s.num_generated_tokens,
                "num_prefill_tokens": s.num_prefill_tokens,
                "num_retractions": s.num_retractions,
                "num_finished": s.num_finished,
                "num_aborted": s.num_aborted,
                "num_steps": s.num_steps,
                "num_jump_forward_tokens": s.num_jump_forward_tokens,
                "new_token_ratio": self.scheduler.new_token_ratio,
            }
        return self._call(stats)

    def shutdown(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._inbox.put(("stop",))
        self._thread.join(timeout=30)
        if self.scheduler.grammar_backend is not None:
            self.scheduler.grammar_backend.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


class _RequestStream:
    """A submitted request's chunks; closing it (or dropping it) before the end aborts the
    request, started or not."""

    def __init__(self, engine: Engine, req: Req):
        self._engine, self._req, self._done = engine, req, False

    @property
    def rid(self) -> str:
        return self._req.rid

    def _mark(self, chunk: dict) -> dict:
        self._done = chunk["finished"]
        return chunk

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._engine.abort(self._req.rid)

    def __del__(self):
        self.close()


class _ChunkStream(_RequestStream):
    def __init__(self, engine: Engine, req: Req, get):
        super().__init__(engine, req)
        self._get = get

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        if self._done:
            raise StopIteration
        return self._mark(self._get())


class _AsyncChunkStream(_RequestStream):
    def __init__(self, engine: Engine, req: Req, aq: asyncio.Queue):
        super().__init__(engine, req)
        self._aq = aq

    def __aiter__(self):
        return self

    async def __anext__(self) -> dict:
        if self._done:
            raise StopAsyncIteration
        try:
            chunk = await self._aq.get()
        except BaseException:  # cancelled while waiting: the consumer is gone
            self.close()
            raise
        return self._mark(chunk)

    async def aclose(self) -> None:
        self.close()


MAX_CACHE_SALT_CHARS = 256


def _check_salt(salt) -> str | None:
    if salt is None:
        return None
    if not isinstance(salt, str) or not salt or len(salt) > MAX_CACHE_SALT_CHARS:
        raise ValueError(f"cache_salt: must be a non-empty string of at most {MAX_CACHE_SALT_CHARS} characters")
    return salt


def _max_token_chars(tokenizer) -> int:
    """The most characters one token's text can have (its vocabulary string: byte-level
    and SentencePiece pieces spell a character with at least one character)."""
    if tokenizer is None:
        return 1
    longest = max((len(t) for t in tokenizer.get_vocab()), default=1)
    return max(longest, 1)


def _input_logprob_start(return_logprob: bool, start: int | None, ids: list[int]) -> int | None:
    if not return_logprob or start is None:
        return None
    if not isinstance(start, int):
        raise ValueError(f"logprob_start_len: must be an integer, got {start!r}")
    if start < 0:  # SGLang's -1: no input logprobs
        return None
    if start >= len(ids):
        raise ValueError(f"logprob_start_len: must be an integer in [0, {len(ids)})")
    return start


def _merge(result: dict | None, chunk: dict) -> dict:
    if result is None:
        result = {"text": "", "output_ids": [], "meta_info": {}}
    result["text"] += chunk["text"]
    result["output_ids"] += chunk["output_ids"]
    meta = chunk["meta_info"]
    for key in ("output_token_logprobs", "output_top_logprobs"):
        if key in meta:
            meta = {**meta, key: result["meta_info"].get(key, []) + meta[key]}
    result["meta_info"] = meta
    return result


def _collect(chunks) -> dict:
    result = None
    for chunk in chunks:
        result = _merge(result, chunk)
        if chunk["finished"]:
            break
    return result


async def _acollect(chunks) -> dict:
    result = None
    async for chunk in chunks:
        result = _merge(result, chunk)
    return result


