"""Prometheus metrics with SGLang's names under the ``sglang_lite:`` prefix, in a registry
owned by one app (two apps in one process never share counters), and the same series again
under SGLang's ``sglang:`` prefix (``sglang_metrics``) for SGLang's dashboards.

Request-level counters and latency histograms are recorded by the server as streams finish;
engine gauges (queue, running, KV usage, cache hit rate) are read from ``Engine.get_stats``
at scrape time.
"""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from sglang_lite.server.sglang_metrics import sglang_registry

P = "sglang_lite:"
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_ITL_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)
_COMPILE_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0)


class ServerMetrics:
    def __init__(self, model_name: str):
        self.registry = r = CollectorRegistry()
        labels = ["model_name"]
        self._label = {"model_name": model_name}

        def counter(name, doc):
            return Counter(P + name, doc, labels, registry=r).labels(**self._label)

        def gauge(name, doc):
            return Gauge(P + name, doc, labels, registry=r).labels(**self._label)

        def histogram(name, doc, buckets):
            return Histogram(P + name, doc, labels, buckets=buckets, registry=r).labels(**self._label)

        self.num_running_reqs = gauge("num_running_reqs", "Requests holding KV memory and decoding.")
        self.num_queue_reqs = gauge("num_queue_reqs", "Requests waiting for admission.")
        self.token_usage = gauge("token_usage", "Fraction of KV pages in use (including cached prefixes).")
        self.cache_hit_rate = gauge("cache_hit_rate", "Prompt tokens served from the prefix cache / prompt tokens.")
        self.gen_throughput = gauge("gen_throughput", "Generated tokens per second since the previous scrape.")
        self.num_used_pages = gauge("num_used_pages", "KV pages in use.")
        self.num_used_tokens = gauge("num_used_tokens", "KV token slots in use (used pages x page size).")
        self.max_total_num_tokens = gauge("max_total_num_tokens", "KV token slots in the pool.")
        self.prompt_tokens = counter("prompt_tokens", "Prompt tokens of finished and aborted requests.")
        self.generation_tokens = counter("generation_tokens", "Generated tokens of finished and aborted requests.")
        self.cached_tokens = counter("cached_tokens", "Prompt tokens served from the prefix cache.")
        self.num_requests = counter("num_requests", "Engine requests ended (finished or aborted); one per choice.")
        self.num_aborted_requests = counter("num_aborted_requests", "Engine requests aborted (client gone, shutdown, error).")
        self.num_rejected_requests = counter("num_rejected_requests", "HTTP requests refused (queue full or draining).")
        self.ttft = histogram("time_to_first_token_seconds", "Time to first token.", _LATENCY_BUCKETS)
        self.itl = histogram("inter_token_latency_seconds", "Time between consecutive output chunks, per token.", _ITL_BUCKETS)
        self.e2e = histogram("e2e_request_latency_seconds", "End-to-end latency of finished requests.", _LATENCY_BUCKETS)
        self.grammar_compile = histogram("grammar_compile_seconds", "Constraint compile (or cache lookup) time.", _COMPILE_BUCKETS)
        self.grammar_refusals = Counter(P + "grammar_compile_refusals", "Constraints refused at intake, "
                                        "by reason (limit, timeout, too_complex, unsupported, invalid, busy).",
                                        ["model_name", "reason"], registry=r)
        self._last_scrape: tuple[float, int] | None = None
        self._sglang_view = sglang_registry(r)

    # ---- request events (event loop) ------------------------------------------------------
    def on_first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def on_chunk(self, gap: float, num_tokens: int) -> None:
        if num_tokens > 0:
            per_token = gap / num_tokens
            for _ in range(num_tokens):
                self.itl.observe(per_token)

    def on_end(self, meta: dict, e2e: float | None, aborted: bool) -> None:
        self.num_requests.inc()
        self.prompt_tokens.inc(meta.get("prompt_tokens", 0))
        self.generation_tokens.inc(meta.get("completion_tokens", 0))
        self.cached_tokens.inc(meta.get("cached_tokens", 0))
        if aborted:
            self.num_aborted_requests.inc()
        elif e2e is not None:
            self.e2e.observe(e2e)

    def on_rejected(self) -> None:
        self.num_rejected_requests.inc()

    def on_grammar_compile(self, seconds: float) -> None:
        self.grammar_compile.observe(seconds)

    def on_grammar_refused(self, reason: str | None) -> None:
        if reason is not None:
            self.grammar_refusals.labels(reason=reason, **self._label).inc()

    # ---- scrape -----------------------------------------------------------------------------
    async def render(self, engine) -> bytes:
        stats = await asyncio.get_running_loop().run_in_executor(None, engine.get_stats)
        self.num_running_reqs.set(stats["num_running_reqs"])
        self.num_queue_reqs.set(stats["num_queue_reqs"])
        self.token_usage.set(stats["token_usage"])
        self.cache_hit_rate.set(stats["cache_hit_rate"])
        self.num_used_pages.set(stats["num_usable_pages"] - stats["num_free_pages"])
        page_size = engine.config.page_size
        self.num_used_tokens.set((stats["num_usable_pages"] - stats["num_free_pages"]) * page_size)
        self.max_total_num_tokens.set(stats["num_usable_pages"] * page_size)
        now, generated = time.monotonic(), stats["num_generated_tokens"]
        if self._last_scrape is not None and now > self._last_scrape[0]:
            self.gen_throughput.set((generated - self._last_scrape[1]) / (now - self._last_scrape[0]))
        self._last_scrape = (now, generated)
        return generate_latest(self.registry) + generate_latest(self._sglang_view)
