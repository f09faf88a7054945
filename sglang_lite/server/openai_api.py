"""OpenAI-compatible routes: /v1/completions, /v1/chat/completions, /v1/models."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from sglang_lite.errors import ConstraintRefused, InvalidRequest, RequestError
from sglang_lite.sampling_params import check_n, choice_seeds
from sglang_lite.server.abort_api import open_group, rid_list
from sglang_lite.server.errors import APIError, api_error
from sglang_lite.server.generation import Job, Output, StreamGroup
from sglang_lite.server.protocol import ChatCompletionRequest, CompletionRequest, _SamplingFields
from sglang_lite.server.serving_options import template_kwargs
from sglang_lite.server.tenancy import effective_salt
from sglang_lite.server.tools import (
    ToolPlan,
    history_message,
    new_call_id,
    plan_tools,
    render_tools_prompt,
)
from sglang_lite.server.vllm_compat import constraint_params, continuous_usage

router = APIRouter()

_FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "abort"}


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


def _usage(outputs: list[Output]) -> dict[str, Any]:
    prompt = cached = 0
    seen: set[int] = set()
    for out in outputs:
        if out.job.prompt_index not in seen:
            seen.add(out.job.prompt_index)
            prompt += out.meta.get("prompt_tokens", len(out.job.input_ids))
            cached += out.meta.get("cached_tokens", 0)
    completion = sum(len(out.output_ids) for out in outputs)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": cached}}


def _finish(out: Output) -> tuple[str | None, Any]:
    reason = out.finish_reason
    if reason is None:
        return None, None
    return _FINISH_REASONS.get(reason.get("type"), reason.get("type")), reason.get("matched")


def _sse(event: dict[str, Any]) -> str:
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n"


async def _sse_stream(group: StreamGroup, head: list[dict], event: Callable[[Output, dict], dict | None],
                      tail: Callable[[], list[dict]]) -> AsyncIterator[str]:
    try:
        for ev in head:
            yield _sse(ev)
        async for out, chunk in group.chunks():
            ev = event(out, chunk)
            if ev is not None:
                yield _sse(ev)
        for ev in tail():
            yield _sse(ev)
    except Exception as e:  # headers are sent: report in-band, as OpenAI does
        yield _sse(api_error(e).body())
    yield "data: [DONE]\n\n"


def _streaming_response(gen: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(gen, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@dataclass(slots=True)
class _Envelope:
    """What every object of one response shares (id, created, model), and when it carries
    usage: always on a whole response, on every chunk with vLLM's continuous usage, and as
    null on the chunks before the last with ``include_usage`` (chat)."""

    rid: str
    model: str
    group: StreamGroup
    every_chunk_usage: bool
    null_usage_on_chunks: bool = False
    created: int = field(default_factory=lambda: int(time.time()))

    def build(self, obj: str, choices: list[dict], usage: dict | None = None, whole: bool = False) -> dict:
        ev = {"id": self.rid, "object": obj, "created": self.created, "model": self.model,
              "choices": choices}
        if usage is None and self.every_chunk_usage:
            usage = _usage(self.group.outputs)
        if usage is not None or whole or self.null_usage_on_chunks:
            ev["usage"] = usage
        return ev

    def usage_tail(self, obj: str, include_usage: bool) -> list[dict]:
        """The last event of a stream: usage alone, when the client asked for it."""
        return [self.build(obj, [], _usage(self.group.outputs))] if include_usage else []


def _include_usage(body) -> bool:
    return bool(body.stream and body.stream_options and body.stream_options.include_usage)


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


def _best_of(outputs: list[Output], n: int, best_of: int) -> list[Output]:
    """Of each prompt's ``best_of`` candidates, the ``n`` with the highest mean token logprob
    (OpenAI's "highest log probability per token"), best first; prompts in order."""
    if best_of == n:
        return outputs
    kept = []
    for p in range(0, len(outputs), best_of):
        candidates = outputs[p : p + best_of]
        candidates.sort(key=lambda o: -sum(lp for lp, _, _ in o.token_logprobs) / max(len(o.token_logprobs), 1))
        kept.extend(candidates[:n])
    return kept


def _tokenize(state, text: str) -> list[int]:
    return state.engine.tokenize(text)  # ContextLengthExceeded (413) for text that cannot fit


def _completion_logprobs(state, tokens: list[tuple], tops: list[list[tuple]], offset: int) -> dict:
    out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for i, (lp, tid, _) in enumerate(tokens):
        text = state.token_text(tid)
        out["tokens"].append(text)
        out["token_logprobs"].append(lp)
        row = tops[i] if i < len(tops) else []
        out["top_logprobs"].append(None if row is None else {state.token_text(t): v for v, t, _ in row})
        out["text_offset"].append(offset)
        offset += len(text)
    return out


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


@dataclass(slots=True)
class _Completions:
    """/v1/completions' response, or its stream's events, from the group's outputs."""

    state: Any
    body: CompletionRequest
    envelope: _Envelope
    echo: list[str]  # per prompt: its text when echoed, else ""
    best_of: int
    prompt_logprobs: bool

    def response(self, outputs: list[Output]) -> dict:
        kept = _best_of(outputs, self.body.n, self.best_of)
        choices = [self._whole_choice(o, i) for i, o in enumerate(kept)]
        return self.envelope.build("text_completion", choices, _usage(outputs), whole=True)

    def _whole_choice(self, o: Output, index: int) -> dict:
        echo = self.echo[o.job.prompt_index]
        if self.prompt_logprobs:  # the prompt's tokens first, from offset 0
            return self._choice(o, echo + o.text, o.meta.get("input_token_logprobs", []) + o.token_logprobs,
                                o.meta.get("input_top_logprobs", []) + o.top_logprobs, 0, index)
        return self._choice(o, echo + o.text, o.token_logprobs, o.top_logprobs, len(echo), index)

    def _choice(self, out: Output, text: str, tokens, tops, offset: int, index: int | None = None) -> dict:
        reason, matched = _finish(out)
        lp = _completion_logprobs(self.state, tokens, tops, offset) if self.body.logprobs is not None else None
        return {"index": out.index if index is None else index, "text": text, "logprobs": lp,
                "finish_reason": reason, "matched_stop": matched}

    def head(self) -> list[dict]:
        if not self.body.echo:
            return []
        return [self.envelope.build("text_completion", [{"index": i, "text": e, "logprobs": None,
                                                         "finish_reason": None}])
                for i, e in enumerate(self.echo) if e]

    def event(self, out: Output, chunk: dict) -> dict | None:
        meta = chunk["meta_info"]
        if not chunk["text"] and not chunk["finished"] and "output_token_logprobs" not in meta:
            return None
        offset = len(self.echo[out.job.prompt_index]) + len(out.text) - len(chunk["text"])
        c = self._choice(out, chunk["text"], meta.get("output_token_logprobs", []),
                         meta.get("output_top_logprobs", []), offset)
        if not chunk["finished"]:
            c["finish_reason"] = c["matched_stop"] = None
        return self.envelope.build("text_completion", [c])

    def tail(self) -> list[dict]:
        return self.envelope.usage_tail("text_completion", _include_usage(self.body))


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
    envelope = _Envelope(f"cmpl-{uuid.uuid4().hex}", model, group, continuous_usage(body))
    responder = _Completions(state, body, envelope, echo, best_of, prompt_logprobs)
    if not body.stream:
        return JSONResponse(responder.response(await group.collect()))
    return _streaming_response(_sse_stream(group, responder.head(), responder.event, responder.tail))


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


def _chat_logprobs(state, tokens: list[tuple], tops: list[list[tuple]]) -> dict:
    def entry(lp, tid):
        s = state.token_text(tid)
        return {"token": s, "logprob": lp, "bytes": list(s.encode("utf-8"))}

    content = []
    for i, (lp, tid, _) in enumerate(tokens):
        row = tops[i] if i < len(tops) else []
        content.append({**entry(lp, tid), "top_logprobs": [entry(v, t) for v, t, _ in row]})
    return {"content": content}


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


def _tool_reason(reason: str | None) -> str | None:
    return "tool_calls" if reason == "stop" else reason


@dataclass(slots=True)
class _ChatCompletions:
    """/v1/chat/completions' response, or its stream's events, from the group's outputs:
    reasoning split apart (with a reasoning parser), tool calls parsed from the text (plan)."""

    state: Any
    body: ChatCompletionRequest
    plan: ToolPlan
    reasoner: Any  # ReasoningParser or None
    envelope: _Envelope
    streaming_content: set[int] = field(default_factory=set)  # choices known not to be tool calls
    reasoning_streams: dict[int, Any] = field(default_factory=dict)  # choice -> its reasoning stream
    call_ids: dict[int, str] = field(default_factory=dict)  # choice -> id of its streamed named call

    def __post_init__(self) -> None:
        if self.reasoner:
            self.reasoning_streams = {j: self.reasoner.stream() for j in range(self.body.n)}

    def _logprobs(self, tokens: list[tuple], tops: list[list[tuple]]) -> dict | None:
        return _chat_logprobs(self.state, tokens, tops) if self.body.logprobs else None

    def _chunk(self, choices: list[dict]) -> dict:
        return self.envelope.build("chat.completion.chunk", choices)

    # ---- a whole response -------------------------------------------------------------------
    def response(self, outputs: list[Output]) -> dict:
        choices = [self._whole_choice(o) for o in outputs]
        return self.envelope.build("chat.completion", choices, _usage(outputs), whole=True)

    def _whole_choice(self, o: Output) -> dict:
        reason, matched = _finish(o)
        reasoning, text = self.reasoner.split(o.text) if self.reasoner else (None, o.text)
        content, calls = self.plan.split(text)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if self.reasoner:
            message["reasoning_content"] = reasoning
        if calls:
            message["tool_calls"] = calls
            reason = _tool_reason(reason)
        return {"index": o.index, "message": message,
                "logprobs": self._logprobs(o.token_logprobs, o.top_logprobs),
                "finish_reason": reason, "matched_stop": matched}

    # ---- a stream -----------------------------------------------------------------------------
    def head(self) -> list[dict]:
        return [self._chunk([{"index": j, "delta": {"role": "assistant", "content": ""},
                              "logprobs": None, "finish_reason": None}]) for j in range(self.body.n)]

    def tail(self) -> list[dict]:
        return self.envelope.usage_tail("chat.completion.chunk", _include_usage(self.body))

    def event(self, out: Output, chunk: dict) -> dict | None:
        finished = chunk["finished"]
        text, full, thought = chunk["text"], out.text, ""
        reason, matched = _finish(out) if finished else (None, None)
        if out.index in self.reasoning_streams:  # the reasoning block streams apart; the rest is the reply
            stream = self.reasoning_streams[out.index]
            thought, text = stream.feed(chunk["text"], final=finished)
            full = stream.content
        if self.plan.streams_arguments:
            return self._named_call_event(out, chunk, reason, matched)
        if self.plan.mode != "none" and out.index not in self.streaming_content:
            answered, event, text = self._tool_call_gate(out, full, thought, finished, reason, matched)
            if answered:
                return event
        meta = chunk["meta_info"]
        if not text and not thought and not finished and "output_token_logprobs" not in meta:
            return None
        delta = {"content": text} if text else {}
        if thought:
            delta["reasoning_content"] = thought
        lp = self._logprobs(meta.get("output_token_logprobs", []), meta.get("output_top_logprobs", []))
        return self._chunk([{"index": out.index, "delta": delta, "logprobs": lp,
                             "finish_reason": reason, "matched_stop": matched}])

    def _tool_call_gate(self, out: Output, full: str, thought: str, finished: bool, reason,
                        matched) -> tuple[bool, dict | None, str]:
        """Tool calls go out whole, at the end; text held back while the reply could still be
        one goes out as content once it cannot. -> (answered: the event, or None to send
        nothing; else the content text to send)."""
        if finished:
            calls = self.plan.calls(full)
            if calls:
                delta = {"tool_calls": [{"index": k, **c} for k, c in enumerate(calls)]}
                return True, self._chunk([{"index": out.index, "delta": delta, "logprobs": None,
                                           "finish_reason": _tool_reason(reason), "matched_stop": matched}]), ""
            return False, None, full
        if self.plan.may_be_calls(full):
            return (True, None, "") if not thought else (False, None, "")  # held; reasoning goes out
        self.streaming_content.add(out.index)
        return False, None, full  # everything held so far, this chunk included

    def _named_call_event(self, out: Output, chunk: dict, reason, matched) -> dict | None:
        first = out.index not in self.call_ids
        if not chunk["text"] and not first and not chunk["finished"]:
            return None
        call: dict[str, Any] = {"index": 0, "function": {"arguments": chunk["text"]}}
        if first:
            self.call_ids[out.index] = new_call_id()
            call.update(id=self.call_ids[out.index], type="function")
            call["function"]["name"] = self.plan.function
        return self._chunk([{"index": out.index, "delta": {"tool_calls": [call]}, "logprobs": None,
                             "finish_reason": _tool_reason(reason), "matched_stop": matched}])


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
    envelope = _Envelope(f"chatcmpl-{uuid.uuid4().hex}", model, group, continuous_usage(body),
                         null_usage_on_chunks=_include_usage(body))
    responder = _ChatCompletions(state, body, plan, reasoner, envelope)
    if not body.stream:
        return JSONResponse(responder.response(await group.collect()))
    return _streaming_response(_sse_stream(group, responder.head(), responder.event, responder.tail))
