"""``/ui``: a page served by the server itself (one static HTML file with its script inline,
no build step, nothing fetched from elsewhere): live charts of throughput, TTFT / TPOT, the
queue, KV usage and the cache hit rate, and a structured-output playground that streams from
the server's own /v1/chat/completions.

``/ui/stats`` is what the charts poll: cumulative counters (the page takes differences) read
without touching /metrics, whose ``gen_throughput`` is computed between scrapes and would be
skewed by a second scraper.
"""

from __future__ import annotations

import asyncio
import time
from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse

from sglang_lite.server.metrics import P

router = APIRouter()

_COUNTERS = {"ttft_sum": "time_to_first_token_seconds_sum", "ttft_count": "time_to_first_token_seconds_count",
             "itl_sum": "inter_token_latency_seconds_sum", "itl_count": "inter_token_latency_seconds_count",
             "requests": "num_requests_total"}


@router.get("/ui", include_in_schema=False)
async def ui_page() -> HTMLResponse:
    html = resources.files("sglang_lite.server").joinpath("static/ui.html").read_text(encoding="utf-8")
    return HTMLResponse(html, headers={"Cache-Control": "no-cache"})


@router.get("/ui/stats", include_in_schema=False)
async def ui_stats(request: Request) -> JSONResponse:
    state = request.app.state
    stats = await asyncio.get_running_loop().run_in_executor(None, state.engine.get_stats)
    registry, labels = state.metrics.registry, {"model_name": state.served_model_name}
    out = {"time": time.time(), "model": state.served_model_name,
           **{k: stats[k] for k in ("num_running_reqs", "num_queue_reqs", "token_usage",
                                    "num_generated_tokens", "num_prompt_tokens",
                                    "num_cached_prompt_tokens")}}
    for key, name in _COUNTERS.items():
        out[key] = registry.get_sample_value(P + name, labels) or 0.0
    return JSONResponse(out, headers={"Cache-Control": "no-store"})
