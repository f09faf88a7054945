"""The bodies of /v1/completions and /v1/chat/completions: whole responses and stream events
built from a StreamGroup's outputs (choices, logprobs, usage, tool calls, reasoning), and the
SSE stream that carries them. The routes (openai_api.py) parse and check the request."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import StreamingResponse

from sglang_lite.server.errors import api_error
from sglang_lite.server.generation import Output, StreamGroup
from sglang_lite.server.protocol import ChatCompletionRequest, CompletionRequest
from sglang_lite.server.tools import ToolPlan, new_call_id

_FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "abort"}


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


async def sse_stream(group: StreamGroup, head: list[dict], event: Callable[[Output, dict], dict | None],
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


def streaming_response(gen: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(gen, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@dataclass(slots=True)
class Envelope:
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


def include_usage(body) -> bool:
    return bool(body.stream and body.stream_options and body.stream_options.include_usage)


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


@dataclass(slots=True)
class CompletionResponder:
    """/v1/completions' response, or its stream's events, from the group's outputs."""

    state: Any
    body: CompletionRequest
    envelope: Envelope
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
        return self.envelope.usage_tail("text_completion", include_usage(self.body))


def _chat_logprobs(state, tokens: list[tuple], tops: list[list[tuple]]) -> dict:
    def entry(lp, tid):
        s = state.token_text(tid)
        return {"token": s, "logprob": lp, "bytes": list(s.encode("utf-8"))}

    content = []
    for i, (lp, tid, _) in enumerate(tokens):
        row = tops[i] if i < len(tops) else []
        content.append({**entry(lp, tid), "top_logprobs": [entry(v, t) for v, t, _ in row]})
    return {"content": content}


def _tool_reason(reason: str | None) -> str | None:
    return "tool_calls" if reason == "stop" else reason


@dataclass(slots=True)
class ChatResponder:
    """/v1/chat/completions' response, or its stream's events, from the group's outputs:
    reasoning split apart (with a reasoning parser), tool calls parsed from the text (plan)."""

    state: Any
    body: ChatCompletionRequest
    plan: ToolPlan
    reasoner: Any  # ReasoningParser or None
    envelope: Envelope
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
        return self.envelope.usage_tail("chat.completion.chunk", include_usage(self.body))

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
