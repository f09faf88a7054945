"""SGLang's native routes: /generate, /health, /health_generate, /flush_cache, /freeze_gc,
/get_model_info, /get_server_info, /metrics."""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError

from sglang_lite.errors import InvalidRequest, RequestError
from sglang_lite.sampling_params import check_n, choice_seeds
from sglang_lite.server.abort_api import open_group, rid_list
from sglang_lite.server.errors import (
    RETRY_AFTER_SECONDS,
    APIError,
    api_error,
    error_response,
    from_validation_errors,
)
from sglang_lite.server.generation import Job, Output, StreamGroup
from sglang_lite.server.tenancy import effective_salt

router = APIRouter()


# ---- /generate --------------------------------------------------------------------------------
def _prompts(state, body) -> tuple[list[list[int]], bool]:
    if (body.text is None) == (body.input_ids is None):
        raise InvalidRequest("text", "pass exactly one of text or input_ids")
    if body.text is not None:
        texts = [body.text] if isinstance(body.text, str) else body.text
        return [state.engine.tokenize(t) for t in texts], isinstance(body.text, str)
    ids = body.input_ids
    if ids and isinstance(ids[0], list):
        return [list(x) for x in ids], False
    return [list(ids)], True


def _jobs(prompts: list[list[int]], sampling_params, salt: str | None = None, defaults=None,
          priority: int | None = None) -> list[Job]:
    if isinstance(sampling_params, list):
        if len(sampling_params) != len(prompts):
            raise InvalidRequest("sampling_params", "a list must have one entry per prompt")
        per_prompt = sampling_params
    else:
        per_prompt = [sampling_params or {}] * len(prompts)
    jobs = []
    for p, (ids, params) in enumerate(zip(prompts, per_prompt)):
        if not isinstance(params, dict):
            raise InvalidRequest("sampling_params", "must be an object")
        params = defaults.with_defaults(params, set(params)) if defaults is not None else dict(params)
        if defaults is not None and defaults.default_max_new_tokens and "max_new_tokens" not in params:
            params["max_new_tokens"] = defaults.default_max_new_tokens
        n = check_n(params.pop("n", 1))
        for choice_seed in choice_seeds(params.get("seed"), n):
            choice = dict(params, seed=choice_seed) if choice_seed is not None else params
            jobs.append(Job(ids, choice, index=len(jobs), prompt_index=p, cache_salt=salt,
                            priority=priority))
    return jobs


def _result(state, out: Output, body) -> dict[str, Any]:
    meta = {k: v for k, v in out.meta.items()
            if k not in ("output_token_logprobs", "output_top_logprobs", "input_token_logprobs",
                         "input_top_logprobs")}
    meta["completion_tokens"] = len(out.output_ids)
    if body.return_logprob:
        def row(lp, tid):
            return [lp, tid, state.token_text(tid) if body.return_text_in_logprobs else None]

        meta["input_token_logprobs"] = [row(lp, t) for lp, t, _ in out.meta.get("input_token_logprobs", [])]
        meta["output_token_logprobs"] = [row(lp, t) for lp, t, _ in out.token_logprobs]
        meta["output_top_logprobs"] = [[row(lp, t) for lp, t, _ in r] for r in out.top_logprobs]
        if "input_top_logprobs" in out.meta:
            meta["input_top_logprobs"] = [None if r is None else [row(lp, t) for lp, t, _ in r]
                                          for r in out.meta["input_top_logprobs"]]
    return {"text": out.text, "output_ids": out.output_ids, "meta_info": meta, "index": out.index}


def _generate_body_schema() -> dict:
    from sglang_lite.server.protocol import GenerateRequest

    schema = GenerateRequest.model_json_schema()
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


# The body is parsed by hand (a list body must be a 400, not FastAPI's 422), so its schema
# is given to the OpenAPI document here.
@router.post("/generate", openapi_extra=_generate_body_schema())
async def generate(request: Request):
    from sglang_lite.server.protocol import GenerateRequest

    request.state.engine_field_names = True  # errors name max_new_tokens, not max_tokens
    try:
        body = GenerateRequest.model_validate(await request.json())
    except ValidationError as e:  # a list body, a wrong type
        raise from_validation_errors(e.errors()) from e
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise InvalidRequest("body", f"invalid JSON: {e}", code="invalid_json") from e
    state = request.app.state
    prompts, single = _prompts(state, body)
    rids = rid_list(body.rid, len(prompts), single)
    jobs = _jobs(prompts, body.sampling_params, effective_salt(state, request, body.cache_salt),
                 state.serving_options, body.priority)
    group = await open_group(state, request, jobs, rids, return_logprob=body.return_logprob,
                                   top_logprobs_num=body.top_logprobs_num,
                                   logprob_start_len=body.logprob_start_len
                                   if body.return_logprob and body.logprob_start_len >= 0 else None)
    if not body.stream:
        outputs = await group.collect()
        results = [_result(state, o, body) for o in outputs]
        return JSONResponse(results[0] if single and len(results) == 1 else results)

    async def events():
        try:
            async for out, _ in group.chunks():
                yield f"data: {json.dumps(_result(state, out, body), ensure_ascii=False)}\n\n"
        except (APIError, RequestError) as e:
            yield f"data: {json.dumps(api_error(e, openai_names=False).body())}\n\n"
        except Exception as e:
            err = {"error": {"message": f"{type(e).__name__}: {e}", "type": "internal_error"}}
            yield f"data: {json.dumps(err)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


# ---- health, cache, info, metrics -------------------------------------------------------------
@router.get("/health")
async def health(request: Request):
    state = request.app.state
    if state.draining or not state.engine_alive():
        return Response(status_code=503, headers={"Retry-After": RETRY_AFTER_SECONDS})
    return Response(status_code=200)


@router.get("/health_generate")
async def health_generate(request: Request):
    state = request.app.state
    if state.draining or not state.engine_alive():
        return Response(status_code=503, headers={"Retry-After": RETRY_AFTER_SECONDS})
    try:
        ids = state.engine.tokenize("Hi") or [0]
        group = await asyncio.wait_for(StreamGroup.open(
            state, request, [Job(ids, {"max_new_tokens": 1, "temperature": 0.0})]), timeout=30)
        await asyncio.wait_for(group.collect(), timeout=30)
    except Exception as e:
        return error_response(503, f"health_generate: {type(e).__name__}: {e}", "service_unavailable",
                              headers={"Retry-After": RETRY_AFTER_SECONDS})
    return Response(status_code=200)


@router.api_route("/flush_cache", methods=["GET", "POST"])
async def flush_cache(request: Request):
    engine = request.app.state.engine
    ok = await asyncio.get_running_loop().run_in_executor(None, engine.flush_cache)
    if not ok:
        return error_response(400, "flush_cache: requests are running; retry when idle",
                              param=None, code="busy")
    return {"success": True, "message": "Cache flushed."}


FREEZE_GC_INTERVAL_S = 60.0


@router.api_route("/freeze_gc", methods=["GET", "POST"])
async def freeze_gc(request: Request):
    """Freeze what is alive now out of the garbage collector's reach (Engine.freeze_gc): the
    server does it at startup; after warm-up traffic the caches it built can follow. At most
    once a FREEZE_GC_INTERVAL_S (a call within it answers the same and does nothing): each
    freeze is a collection holding the GIL, and keeps for good whatever it froze that later
    dies in a cycle, so a client calling it over and over neither stalls requests nor grows
    the heap."""
    state, now = request.app.state, time.monotonic()
    if now - getattr(state, "gc_frozen_at", -math.inf) >= FREEZE_GC_INTERVAL_S:
        state.gc_frozen_at = now
        await asyncio.get_running_loop().run_in_executor(None, state.engine.freeze_gc)
    return Response("Garbage collection frozen.\n", status_code=200, media_type="text/plain")


@router.get("/get_model_info")
async def get_model_info(request: Request):
    state = request.app.state
    engine = state.engine
    source = engine.source
    tokenizer_path = source.tokenizer_path or source.path
    return {"model_path": str(source.path) if source.path else source.name,
            "tokenizer_path": str(tokenizer_path) if tokenizer_path else None,
            "served_model_name": state.served_model_name, "is_generation": True,
            "context_length": engine.context_length}


@router.get("/get_server_info")
async def get_server_info(request: Request):
    """Engine config and live stats (page counts included: the leak check reads them)."""
    state = request.app.state
    engine = state.engine
    stats = await asyncio.get_running_loop().run_in_executor(None, engine.get_stats)
    config = {k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v))
              for k, v in asdict(engine.config).items()}
    return {**config, **stats, "served_model_name": state.served_model_name,
            "context_length": engine.context_length, "draining": state.draining,
            "gc_frozen_objects": engine.gc_frozen_objects}


@router.get("/metrics")
async def metrics(request: Request):
    state = request.app.state
    return Response(await state.metrics.render(state.engine), media_type=CONTENT_TYPE_LATEST)
