"""OpenAI-compatible routes: /v1/completions, /v1/chat/completions, /v1/models."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from sglang_lite.errors import ConstraintRefused, InvalidRequest, RequestError
from sglang_lite.sampling_params import check_n, choice_seeds
from sglang_lite.server.abort_api import open_group, rid_list
from sglang_lite.server.errors import APIError
from sglang_lite.server.generation import Job, StreamGroup
from sglang_lite.server.openai_responses import (
    ChatResponder,
    CompletionResponder,
    Envelope,
    include_usage,
    sse_stream,
    streaming_response,
)
from sglang_lite.server.protocol import ChatCompletionRequest, CompletionRequest, _SamplingFields
from sglang_lite.server.serving_options import template_kwargs
from sglang_lite.server.tenancy import effective_salt
from sglang_lite.server.tools import (
    ToolPlan,
    history_message,
    plan_tools,
    render_tools_prompt,
)
from sglang_lite.server.vllm_compat import constraint_params, continuous_usage

router = APIRouter()


# ---- /v1/models -----------------------------------------------------------------------------
def _model_card(state, name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": state.created,
            "owned_by": "sglang-lite", "root": state.served_model_name,
            "max_model_len": state.engine.context_length}


@router.get("/v1/models")
async def list_models(request: Request):
    state = request.app.state
    return {"object": "list", "data": [_model_card(state, name) for name in state.served_model_names]}


@router.get("/v1/models/{model:path}")
async def retrieve_model(model: str, request: Request):
    _check_model(request.app.state, model)
    return _model_card(request.app.state, model)


def _check_model(state, model: str | None) -> str:
    """The name responses carry: the one the client asked for (any served name), else the first."""
    if model is None:
        return state.served_model_name
    if model not in state.served_model_names:
        served = ", ".join(f"`{n}`" for n in state.served_model_names)
        raise APIError(404, f"The model `{model}` does not exist (this server serves {served})",
                       param="model", code="model_not_found")
    return model


# ---- shared request -> engine jobs ------------------------------------------------------------
def _sampling_params(body: _SamplingFields, max_tokens: int | None, options=None) -> dict[str, Any]:
    """Engine sampling params; ``options`` (ServingOptions) fills the model's defaults for
    the fields the client left out."""
    check_n(body.n)
    params: dict[str, Any] = {
        "temperature": body.temperature, "top_p": body.top_p, "top_k": body.top_k,
        "min_p": body.min_p, "frequency_penalty": body.frequency_penalty,
        "presence_penalty": body.presence_penalty, "repetition_penalty": body.repetition_penalty,
        "min_new_tokens": body.min_tokens, "stop": body.stop, "stop_token_ids": body.stop_token_ids,
        "ignore_eos": body.ignore_eos, "skip_special_tokens": body.skip_special_tokens,
        "no_stop_trim": body.no_stop_trim, "logit_bias": body.logit_bias or None,
        "stop_regex": body.stop_regex, **constraint_params(body),
    }
    if max_tokens is not None:
        params["max_new_tokens"] = max_tokens
    fmt = body.response_format
    if fmt is not None and fmt.type != "text":
        if fmt.type == "json_object":
            schema: Any = {"type": "object"}
        elif fmt.json_schema is None or fmt.json_schema.schema_ is None:
            raise InvalidRequest("response_format.json_schema.schema", "required for type json_schema")
        else:
            schema = fmt.json_schema.schema_
        if any(k in params for k in ("json_schema", "regex", "ebnf", "choices")):
            raise InvalidRequest("response_format", "pass response_format or another constraint "
                                "(json_schema, regex, guided_*, ...), not both")
        params["json_schema"] = schema
    if options is not None:
        params = options.with_defaults(params, body.model_fields_set)
    return {k: v for k, v in params.items() if v is not None}


def _jobs(prompts: list[list[int]], params: dict[str, Any], n: int, seed: int | None,
          salt: str | None = None, priority: int | None = None) -> list[Job]:
    jobs = []
    for p, ids in enumerate(prompts):
        for j, choice_seed in enumerate(choice_seeds(seed, n)):
            choice_params = dict(params, seed=choice_seed) if choice_seed is not None else params
            jobs.append(Job(ids, choice_params, index=p * n + j, prompt_index=p, cache_salt=salt,
                            priority=priority))
    return jobs


# ---- /v1/completions ---------------------------------------------------------------------------
def _completion_prompts(state, prompt) -> tuple[list[list[int]], list[str | None]]:
    if isinstance(prompt, str):
        prompt = [prompt]
    if not prompt:
        raise InvalidRequest("prompt", "must not be empty")
    if isinstance(prompt[0], int):
        prompt = [prompt]
    ids, texts = [], []
    for p in prompt:
        if isinstance(p, str):
            ids.append(_tokenize(state, p))
            texts.append(p)
        else:
            ids.append(list(p))
            texts.append(None)
    return ids, texts


def _tokenize(state, text: str) -> list[int]:
    return state.engine.tokenize(text)  # ContextLengthExceeded (413) for text that cannot fit


def _check_completion_options(body: CompletionRequest) -> tuple[int, bool]:
    """(best_of, prompt_logprobs): the options only /v1/completions has, checked."""
    if body.suffix:
        raise InvalidRequest("suffix", "not supported", code="unsupported")
    best_of = body.n if body.best_of is None else body.best_of
    if not isinstance(best_of, int) or not body.n <= best_of <= 128:
        raise InvalidRequest("best_of", f"must be an integer in [n, 128], got {body.best_of}")
    if best_of > body.n and body.stream:
        raise InvalidRequest("best_of", "cannot be combined with stream")
    if body.logprobs is not None and not 0 <= body.logprobs <= 20:
        raise InvalidRequest("logprobs", f"must be in [0, 20], got {body.logprobs}")
    prompt_logprobs = bool(body.echo and body.logprobs is not None)  # scoring, e.g. lm-eval loglikelihood
    if prompt_logprobs and body.stream:
        raise InvalidRequest("echo", "prompt logprobs (echo with logprobs) need stream=false")
    return best_of, prompt_logprobs


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request):
    state = request.app.state
    model = _check_model(state, body.model)
    best_of, prompt_logprobs = _check_completion_options(body)
    prompts, texts = _completion_prompts(state, body.prompt)
    params = _sampling_params(body, body.max_tokens, state.serving_options)
    salt = effective_salt(state, request, body.cache_salt, body.user)
    jobs = _jobs(prompts, params, best_of, body.seed, salt, body.priority)
    group = await open_group(state, request, jobs, rid_list(body.rid, len(prompts), len(prompts) == 1),
                             return_logprob=body.logprobs is not None or best_of > body.n,
                             top_logprobs_num=body.logprobs or 0,
                             logprob_start_len=0 if prompt_logprobs else None)
    echo = [(t if t is not None else state.engine.tokenizer.decode(ids)) if body.echo else ""
            for ids, t in zip(prompts, texts)]
    envelope = Envelope(f"cmpl-{uuid.uuid4().hex}", model, group, continuous_usage(body))
    responder = CompletionResponder(state, body, envelope, echo, best_of, prompt_logprobs)
    if not body.stream:
        return JSONResponse(responder.response(await group.collect()))
    return streaming_response(sse_stream(group, responder.head(), responder.event, responder.tail))


# ---- /v1/chat/completions ----------------------------------------------------------------------
def _chat_prompt(state, body: ChatCompletionRequest, plan: ToolPlan) -> list[int]:
    override = state.serving_options.chat_template  # --chat-template
    template = override or getattr(state.engine.tokenizer, "chat_template", None) or ""
    has_tools = "tools" in template  # the template renders tools and tool calls itself
    messages = []
    for i, m in enumerate(body.messages):
        content = m.content
        if isinstance(content, list):
            if any(part.type != "text" for part in content):
                raise InvalidRequest(f"messages.{i}.content", "only text parts are supported")
            content = "".join(part.text or "" for part in content)
        role = "system" if m.role == "developer" else m.role
        messages.append(history_message(role, content, m.tool_calls, m.tool_call_id, has_tools))
    messages, extra = render_tools_prompt(messages, plan, has_tools)
    extra = {**template_kwargs(body.chat_template_kwargs), **extra}
    if override:
        extra["chat_template"] = override
    try:
        text = state.engine.apply_chat_template(messages, add_generation_prompt=body.add_generation_prompt, **extra)
    except RequestError:
        raise
    except Exception as e:  # the template itself rejects the conversation (jinja errors)
        raise InvalidRequest("messages", f"{e}") from e
    return _tokenize(state, text)


_CONSTRAINT_KEYS = ("json_schema", "regex", "ebnf", "choices")


def _check_top_logprobs(body: ChatCompletionRequest) -> None:
    top = body.top_logprobs
    if top is not None and not 0 <= top <= 20:
        raise InvalidRequest("top_logprobs", f"must be in [0, 20], got {top}")
    if top and not body.logprobs:
        raise InvalidRequest("top_logprobs", "requires logprobs to be true")


def _chat_max_tokens(state, body: ChatCompletionRequest, ids: list[int]) -> int:
    """The client's limit, else what the context leaves (capped by generation_config.json)."""
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    if max_tokens is not None:
        return max_tokens
    max_tokens = max(state.engine.context_length - len(ids), 1)
    default = state.serving_options.default_max_new_tokens  # generation_config.json
    return min(max_tokens, default) if default else max_tokens


def _chat_params(state, body: ChatCompletionRequest, plan: ToolPlan, ids: list[int]) -> dict[str, Any]:
    params = _sampling_params(body, _chat_max_tokens(state, body, ids), state.serving_options)
    if plan.constrained:
        if any(k in params for k in _CONSTRAINT_KEYS):
            raise InvalidRequest("tool_choice", "a required or named tool call cannot be combined with "
                                                "response_format, json_schema, regex or ebnf")
        params["json_schema"] = plan.schema()
    if plan.keeps_special_tokens:
        params.setdefault("skip_special_tokens", False)
    thinker = getattr(state, "reasoning_parser", None)
    if thinker and body.response_format is not None and body.response_format.type != "text":
        # A reasoning model thinks first: the format applies once its <think> block has ended.
        params["reasoning_prefix"] = "open" if thinker.starts_in_reasoning else "optional"
    return params


async def _open_chat(state, request: Request, body: ChatCompletionRequest, plan: ToolPlan,
                     ids: list[int], params: dict[str, Any]) -> StreamGroup:
    try:
        salt = effective_salt(state, request, body.cache_salt, body.user)
        return await open_group(state, request, _jobs([ids], params, body.n, body.seed, salt, body.priority),
                                rid_list(body.rid, 1, True), return_logprob=body.logprobs,
                                top_logprobs_num=body.top_logprobs or 0)
    except ConstraintRefused as e:
        if plan.constrained and e.field == "json_schema":  # the tools' parameter schemas
            raise e.for_field("tools") from e
        raise


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request):
    state = request.app.state
    model = _check_model(state, body.model)
    plan = plan_tools(body.tools, body.tool_choice, body.parallel_tool_calls, getattr(state, "tool_parser", None))
    reasoner = getattr(state, "reasoning_parser", None) if body.separate_reasoning else None
    _check_top_logprobs(body)
    ids = _chat_prompt(state, body, plan)
    params = _chat_params(state, body, plan, ids)
    group = await _open_chat(state, request, body, plan, ids, params)
    envelope = Envelope(f"chatcmpl-{uuid.uuid4().hex}", model, group, continuous_usage(body),
                         null_usage_on_chunks=include_usage(body))
    responder = ChatResponder(state, body, plan, reasoner, envelope)
    if not body.stream:
        return JSONResponse(responder.response(await group.collect()))
    return streaming_response(sse_stream(group, responder.head(), responder.event, responder.tail))
