"""The public, SGLang-compatible entry point: ``Engine(model=None, **options)``.

The engine wires the components together (model, KV pool, prefix cache, scheduler, grammar
backend) and owns the scheduler's thread; ``generate`` and ``async_generate`` turn their
arguments into requests (intake.py), post them to the thread's mailbox (mailbox.py) and hand
out their chunks (streams.py), so several callers (threads, asyncio tasks, the HTTP server)
share one continuously batched loop.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import queue
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import torch

from sglang_lite.attention import create_backend, fit_attention_backend
from sglang_lite.compiled_decode import warm_up as warm_up_compiled_decode
from sglang_lite.config import EngineConfig
from sglang_lite.errors import EngineShutDown, InvalidRequest, QueueFullError
from sglang_lite.intake import RequestIntake
from sglang_lite.mailbox import AbortAll, AbortRequest, AddRequest, Mailbox, Stop
from sglang_lite.mem.kv_pool import KVPool
from sglang_lite.mem.radix_cache import RadixCache
from sglang_lite.mem.req_to_token import ReqToTokenPool
from sglang_lite.mem.sizing import kv_pool_pages
from sglang_lite.model.loader import load_model, load_tokenizer, resolve_model
from sglang_lite.model_runner import ModelRunner
from sglang_lite.outputs import OutputChunk
from sglang_lite.quant.apply import resident_weight_bytes, use_cpu_kernels
from sglang_lite.request import Req
from sglang_lite.sampler import Sampler
from sglang_lite.scheduler.cache import KVCacheManager
from sglang_lite.scheduler.output import OutputProcessor
from sglang_lite.scheduler.policy import PriorityRule, SchedulePolicy
from sglang_lite.scheduler.scheduler import Scheduler
from sglang_lite.streams import AsyncChunkStream, ChunkStream, acollect, collect

log = logging.getLogger(__name__)


class Engine:
    gc_frozen_objects = 0  # frozen by freeze_gc calls, in all (some may have died since)

    def __init__(self, model: str | None = None, **options: Any):
        self.config = cfg = EngineConfig.create(model=model, **options)
        if cfg.num_threads and cfg.device == "cpu":
            torch.set_num_threads(cfg.num_threads)
        # The scheduler's thread builds the engine, then runs it: torch's parallel CPU work stays
        # on one thread (GNU OpenMP keeps a team per thread; more than the cores: 2x batch-1 TPOT).
        started: Future = Future()
        self._thread = threading.Thread(target=self._run, args=(options, started),
                                        name="sglang-lite-scheduler", daemon=True)
        self._thread.start()
        started.result()

    def _run(self, options: dict[str, Any], started: Future) -> None:
        cfg, self.tp = self.config, None
        try:
            self.source = resolve_model(cfg.model, cfg.tokenizer, cfg.revision)
            self.tp = self._launch_tp(options.get("attention_backend", "auto"))
            self._build(options)
            warm_up_compiled_decode(self.scheduler, self.intake, cfg)
        except BaseException as e:
            if self.tp is not None:
                self.tp.close()
            return started.set_exception(e)
        started.set_result(None)
        self._mailbox.serve(self.scheduler)

    def _build(self, options: dict[str, Any]) -> None:
        cfg = self.config
        if self.tp is not None:
            self.model = self.tp.load_model()
        else:
            self.model = load_model(self.source, cfg.torch_dtype, cfg.torch_device, cfg.seed, cfg.quantization,
                                    cfg.dense_weights_above)
            if cfg.device == "cpu":
                use_cpu_kernels(self.model, cfg.quantization, cfg.torch_dtype, cfg.int8_activations)
        log.info("weights: %.1f MB resident (%s, quantization %s, dense_weights_above %d)",
                 resident_weight_bytes(self.model) / 1e6, cfg.dtype, cfg.quantization, cfg.dense_weights_above)
        self.model_config = self.model.config
        self.config = cfg = fit_attention_backend(cfg, self.model_config, options.get("attention_backend", "auto"))
        self.tokenizer = load_tokenizer(self.source)
        self.eos_token_ids = self._eos_ids()
        self.kv_pool = self._build_kv_pool()
        usable_tokens = self.kv_pool.allocator.num_usable_pages * cfg.page_size
        self.context_length = min(cfg.context_length or self.model_config.max_position_embeddings,
                                  self.model_config.max_position_embeddings, usable_tokens)
        self.req_pool = ReqToTokenPool(cfg.max_running_requests, self.context_length, cfg.torch_device)
        backend = create_backend(cfg.attention_backend, self.kv_pool)
        if cfg.deterministic:
            self._check_batch_invariance()
        runner_args = (self.model, backend, self.req_pool, cfg.torch_device)
        runner_options = {"cuda_graph_max_bs": cfg.cuda_graph_batch_limit, "deterministic": cfg.deterministic,
                          "compile_decode_max_bs": cfg.torch_compile_max_bs if cfg.enable_torch_compile else 0}
        if self.tp is not None:
            from sglang_lite.parallel.runner import TPModelRunner

            runner = TPModelRunner(self.tp, *runner_args, **runner_options)
        else:
            runner = ModelRunner(*runner_args, **runner_options)
        radix, policy = self._build_radix()
        if radix is None and cfg.enable_priority_scheduling:
            policy = self._schedule_policy()  # priority ordering needs no prefix cache
        self.cache = KVCacheManager(self.kv_pool, self.req_pool, radix)
        grammar_backend = self._build_grammar_backend()
        self.intake = RequestIntake(self.tokenizer, self.model_config.vocab_size, self.context_length,
                                    grammar_backend)
        self.max_prompt_chars = self.intake.max_prompt_chars
        self.scheduler = Scheduler(
            cfg, runner, self.cache, Sampler(self.model_config.vocab_size, self.eos_token_ids),
            OutputProcessor(self.tokenizer, self.eos_token_ids, cfg.stream_interval),
            self.context_length, policy=policy, grammar_backend=grammar_backend,
            priority=self._priority_rule(),
        )
        self._mailbox = Mailbox()
        self._in_flight = 0
        self._lock = threading.Lock()
        self._closed = False  # no new requests (after shutdown, or a failure)
        self._shut_down = False
        self.failure: Exception | None = None  # why the engine stopped on its own (a dead rank)
        self._failure_listeners: list = []
        if self.tp is not None:
            self.tp.on_failure(self._on_rank_failure)

    # ---- construction helpers ---------------------------------------------------------------
    def _launch_tp(self, requested_backend: str):
        """Tensor parallelism: start the worker ranks before this rank loads (they load in
        parallel); None for tp == 1."""
        if self.config.tp == 1:
            return None
        from sglang_lite.model.loader import load_model_config
        from sglang_lite.parallel.launcher import TensorParallel

        return TensorParallel(self.config, self.source, load_model_config(self.source), requested_backend)

    def _on_rank_failure(self, error: Exception) -> None:
        """A rank died (watcher thread): refuse new work, fail what runs, tell listeners."""
        with self._lock:
            self.failure = error
            self._closed = True
            listeners = list(self._failure_listeners)
        self._mailbox.put(Stop(str(error)))
        for fn in listeners:
            fn(error)

    def on_failure(self, fn) -> None:
        """Call ``fn(error)`` if the engine stops on its own (tensor parallelism: a rank died)."""
        with self._lock:
            self._failure_listeners.append(fn)
            failure = self.failure
        if failure is not None:
            fn(failure)

    def _check_batch_invariance(self) -> None:
        from sglang_lite.attention.invariant_backend import BLOCK
        from sglang_lite.model.batch_invariant import check_batch_invariance

        mc = self.model_config
        check_batch_invariance(self.config.torch_device, self.config.torch_dtype, mc.hidden_size, mc.head_dim,
                               mc.num_heads // mc.num_kv_heads, BLOCK)

    def _eos_ids(self) -> tuple[int, ...]:
        tokenizer_eos = None if self.tokenizer is None else self.tokenizer.eos_token_id
        return tuple(sorted(set(self.model_config.eos_token_ids) | ({tokenizer_eos} - {None})))

    def _build_kv_pool(self) -> KVPool:
        cfg, mc = self.config, self.model_config
        fmt = cfg.kv_format
        num_kv_heads = mc.num_kv_heads if self.tp is None else self.tp.num_kv_heads  # this rank's heads
        per_token = KVPool.bytes_per_token(mc.num_layers, num_kv_heads, mc.head_dim, cfg.torch_dtype, fmt)
        num_pages = kv_pool_pages(cfg, mc, num_kv_heads, cfg.torch_device)
        if self.tp is not None:  # every rank's pool has the same slots
            num_pages = self.tp.agree_num_pages(num_pages)
        pool = KVPool(num_pages, cfg.page_size, mc.num_layers, num_kv_heads, mc.head_dim,
                      cfg.torch_dtype, cfg.torch_device, fmt)
        log.info("KV pool: %d tokens (%d pages of %d), %.1f MiB, kv_cache_dtype %s (%d bytes a token)",
                 pool.allocator.num_usable_pages * cfg.page_size, pool.allocator.num_usable_pages,
                 cfg.page_size, pool.num_bytes / 2**20, fmt.name, per_token)
        return pool

    def _build_radix(self):
        if self.config.disable_radix_cache:
            return None, None
        return RadixCache(self.kv_pool.allocator, self.config.page_size), self._schedule_policy()

    def _schedule_policy(self):
        cfg = self.config
        if cfg.schedule_policy != "lpm" and not cfg.enable_priority_scheduling:
            return None  # plain FCFS: the queue's own order
        return SchedulePolicy(use_prefix=cfg.schedule_policy == "lpm", priority=self._priority_rule())

    def _priority_rule(self):
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

    # ---- request intake (intake.py) -----------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        return self.intake.tokenize(text)

    def check_prompt_chars(self, num_chars: int, field: str = "prompt") -> None:
        self.intake.check_prompt_chars(num_chars, field)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, **kw) -> str:
        return self.intake.apply_chat_template(messages, add_generation_prompt, **kw)

    def _submit(self, req: Req, sink) -> None:
        with self._lock:
            if self._closed:
                raise self.failure or EngineShutDown()
            if self._in_flight >= self.config.max_queue_size + self.config.max_running_requests:
                raise QueueFullError(f"queue: more than {self.config.max_queue_size} waiting requests")
            self._in_flight += 1

        def on_output(chunk: OutputChunk) -> None:
            if chunk.finished:
                with self._lock:
                    self._in_flight -= 1
            sink(chunk.to_dict())  # the public API's chunks are SGLang's dicts

        req.on_output = on_output
        self._mailbox.put(AddRequest(req))

    # ---- public API -------------------------------------------------------------------------
    def generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob: bool = False,
                 top_logprobs_num: int = 0, stream: bool = False, rid: str | None = None,
                 logprob_start_len: int | None = None, cache_salt: str | None = None,
                 priority: int | None = None):
        """A dict for one prompt (n == 1), else a list of dicts; an iterator of chunks if stream.
        With return_logprob and logprob_start_len=k, prompt tokens from k on get
        ``input_token_logprobs`` (the first prompt token's is None). ``priority`` matters
        with ``enable_priority_scheduling``."""
        reqs, single = self.intake.make_reqs(prompt, input_ids, sampling_params, return_logprob,
                                             top_logprobs_num, stream, rid, logprob_start_len,
                                             cache_salt=cache_salt, priority=priority)
        if stream:
            if len(reqs) != 1:
                raise InvalidRequest("stream", "streaming takes a single prompt with n == 1")
            return self._stream(reqs[0])
        queues = []
        for i, req in enumerate(reqs):
            q: queue.SimpleQueue = queue.SimpleQueue()
            try:
                self._submit(req, q.put)
            except QueueFullError:  # all or nothing: withdraw the ones already queued
                for submitted in reqs[:i]:
                    self.abort(submitted.rid)
                raise
            queues.append(q)
        results = [collect(iter(q.get, None)) for q in queues]
        return results[0] if single else results

    def _stream(self, req: Req) -> Iterator[dict]:
        q: queue.SimpleQueue = queue.SimpleQueue()
        self._submit(req, q.put)  # now, not on first next(): errors reach the caller here
        return ChunkStream(req.rid, self.abort, q.get)

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
                None, self.intake.make_reqs, prompt, input_ids, sampling_params, return_logprob,
                top_logprobs_num, stream, rid, logprob_start_len, cancel, cache_salt, priority)
        except asyncio.CancelledError:
            cancel.set()
            raise
        if stream:
            if len(reqs) != 1:
                raise InvalidRequest("stream", "streaming takes a single prompt with n == 1")
            return self._astream(reqs[0], loop)
        streams = [self._astream(r, loop) for r in reqs]  # QueueFullError surfaces here
        try:
            results = await asyncio.gather(*(acollect(s) for s in streams))
        finally:
            for s in streams:
                await s.aclose()
        return results[0] if single else list(results)

    def _astream(self, req: Req, loop: asyncio.AbstractEventLoop) -> AsyncChunkStream:
        aq: asyncio.Queue = asyncio.Queue()

        def sink(chunk: dict) -> None:
            if not loop.is_closed():  # a closed loop has no consumer left to tell
                loop.call_soon_threadsafe(aq.put_nowait, chunk)

        self._submit(req, sink)
        return AsyncChunkStream(req.rid, self.abort, aq)

    def abort(self, rid: str) -> None:
        self._mailbox.put(AbortRequest(rid))

    def abort_all(self) -> None:
        """Abort every request submitted so far, waiting or running."""
        self._mailbox.put(AbortAll())

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

    def freeze_gc(self) -> int:
        """Move every object alive now out of the garbage collector's reach (``gc.freeze``, as
        vLLM does after startup and SGLang's ``/freeze_gc``): a full collection otherwise walks
        the startup heap (the embedded model's engine: ~316k objects, 85-130 ms) holding the
        GIL, every request stalled. Garbage is collected first so it is not kept for good.
        Process-wide: ``sglang-lite serve`` calls it once the engine is up. Returns how many
        objects this call froze (``gc.get_freeze_count`` walks them all: ~12 ms)."""
        gc.collect()
        moved = len(gc.get_objects())  # the collector's generations: what freeze moves
        gc.freeze()
        self.gc_frozen_objects += moved
        return moved

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

    def _call(self, fn):
        """``fn()`` on the scheduler thread; after a failure that thread is gone: say why."""
        if self.failure is not None:
            raise self.failure
        return self._mailbox.call(fn)

    def shutdown(self) -> None:
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = self._closed = True
        self._mailbox.put(Stop())
        self._thread.join(timeout=30)
        if self.scheduler.grammar_backend is not None:
            self.scheduler.grammar_backend.close()
        if self.tp is not None:
            self.tp.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

