"""Any OpenAI-compatible server (sglang-lite, vLLM, SGLang, llama-server, OpenAI itself),
through the official ``openai`` client, in SGLang's ``sgl.OpenAI(...)`` shape.

A chat model gets the program's closed turns, so a ``gen`` must open an assistant turn; a
completion model (``is_chat_model=False``) gets the text so far and can generate anywhere.
``select`` scores the choices on a completion model from the prompt logprobs the server returns
for ``echo=True`` with ``logprobs`` (vLLM, SGLang and sglang-lite do); elsewhere it is a clear
error. ``regex``/``ebnf`` and the sampling options OpenAI lacks (``top_k``, ``min_p``, ...) go
as extra body fields, under SGLang's names; ``json_schema`` as ``response_format``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from frontend_dsl.backends.base import Backend, BackendError, Prompt
from frontend_dsl.chat_template import PLAIN, ChatTemplate, from_tokenizer
from frontend_dsl.scoring import ChoiceLogprobs

INSTRUCT_MODEL_NAMES = ("gpt-3.5-turbo-instruct",)  # completion models among OpenAI's names

_OPENAI_KEYS = {"max_new_tokens": "max_tokens", "stop": "stop", "temperature": "temperature",
                "top_p": "top_p", "frequency_penalty": "frequency_penalty",
                "presence_penalty": "presence_penalty", "seed": "seed", "n": "n"}
_EXTRA_KEYS = {"top_k": "top_k", "min_p": "min_p", "repetition_penalty": "repetition_penalty",
               "min_new_tokens": "min_tokens", "ignore_eos": "ignore_eos",
               "stop_token_ids": "stop_token_ids", "regex": "regex", "ebnf": "ebnf",
               "stop_regex": "stop_regex"}


class OpenAI(Backend):
    """``OpenAI("model-name", base_url="http://127.0.0.1:30000/v1", api_key="EMPTY")``.

    Positional and keyword arguments after SGLang's own go to ``openai.OpenAI`` (or
    ``openai.AzureOpenAI`` with ``is_azure=True``). ``chat_template`` (a ``ChatTemplate``, a
    tokenizer or its path) renders role turns in a completion model's text; plain
    ``User: ...`` text without it.
    """

    def __init__(self, model_name: str, is_chat_model: bool | None = None, chat_template: Any = None,
                 is_azure: bool = False, *args: Any, **kwargs: Any):
        super().__init__()
        try:
            import openai
        except ImportError as e:  # pragma: no cover - openai is in the dev extra
            raise ImportError("the OpenAI backend needs the openai package: pip install 'sglang-lite[openai]'") from e
        self._errors = (openai.APIError, openai.APIConnectionError)
        self.client = (openai.AzureOpenAI if is_azure else openai.OpenAI)(*args, **kwargs)
        self.model_name = model_name
        self.is_chat_model = (model_name not in INSTRUCT_MODEL_NAMES if is_chat_model is None
                              else bool(is_chat_model))
        self._template = _template(chat_template)

    # ---- requests ---------------------------------------------------------------------------
    def _kwargs(self, params: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        kwargs = {_OPENAI_KEYS[k]: v for k, v in params.items() if k in _OPENAI_KEYS and v is not None}
        extra = {_EXTRA_KEYS[k]: v for k, v in params.items() if k in _EXTRA_KEYS and v is not None}
        unknown = sorted(set(params) - set(_OPENAI_KEYS) - set(_EXTRA_KEYS) - {"json_schema"})
        if unknown:
            raise BackendError(f"sampling_params: {unknown[0]!r} has no OpenAI-API equivalent")
        if params.get("json_schema") is not None:
            schema = params["json_schema"]
            fmt = {"type": "json_schema", "json_schema": {
                "name": "output", "schema": json.loads(schema) if isinstance(schema, str) else schema}}
            if self.is_chat_model:
                kwargs["response_format"] = fmt
            else:  # not a completions argument in the client: an extra body field
                extra["response_format"] = fmt
        if request.get("return_logprob"):
            top = request.get("top_logprobs_num") or 0
            if self.is_chat_model:
                kwargs.update(logprobs=True, top_logprobs=top)
            else:
                kwargs["logprobs"] = top
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    def _create(self, prompt: Prompt, **kwargs: Any):
        try:
            if self.is_chat_model:
                if not isinstance(prompt, list):
                    raise BackendError("a chat model takes chat turns: open an assistant turn first")
                return self.client.chat.completions.create(model=self.model_name, messages=prompt, **kwargs)
            return self.client.completions.create(model=self.model_name, prompt=prompt, **kwargs)
        except self._errors as e:
            raise BackendError(f"{self.client.base_url}: {type(e).__name__}: {e}") from e

    def generate(self, prompt: Prompt, sampling_params: dict[str, Any], **request: Any) -> Any:
        resp = self._create(prompt, **self._kwargs(sampling_params, request))
        results = []
        for i, choice in enumerate(sorted(resp.choices, key=lambda c: c.index)):
            text = (choice.message.content or "") if self.is_chat_model else choice.text
            usage = resp.usage if i == 0 else None  # the usage counts all choices: keep it once
            results.append({"text": text, "meta_info": _meta(resp.id, usage, choice.finish_reason,
                                                             _output_logprobs(choice))})
        return results if sampling_params.get("n", 1) > 1 else results[0]

    def generate_stream(self, prompt: Prompt, sampling_params: dict[str, Any],
                        **request: Any) -> Iterator[dict[str, Any]]:
        kwargs = self._kwargs(sampling_params, request)
        events = self._create(prompt, stream=True, stream_options={"include_usage": True}, **kwargs)
        rid, usage, reason = None, None, None
        try:
            for event in events:
                rid, usage = event.id, event.usage or usage
                for choice in event.choices:
                    delta = (choice.delta.content or "") if self.is_chat_model else choice.text
                    reason = choice.finish_reason or reason
                    if delta:
                        yield {"text": delta, "finished": False, "meta_info": {"id": rid}}
        except self._errors as e:
            raise BackendError(f"{self.client.base_url}: stream: {type(e).__name__}: {e}") from e
        yield {"text": "", "finished": True, "meta_info": _meta(rid, usage, reason, None)}

    def prefill(self, texts: list[str]) -> list[dict[str, Any]]:
        return []  # no prefill-only request in the OpenAI API; the server's own cache decides

    # ---- select -----------------------------------------------------------------------------
    def choice_logprobs(self, prefix: str, choices: list[str], unconditional: bool = False) -> ChoiceLogprobs:
        if self.is_chat_model:
            raise BackendError(f"select on chat model {self.model_name!r}: chat completions return no "
                               "prompt logprobs to score choices with; use a completion model "
                               "(OpenAI(..., is_chat_model=False)) on a server that returns them")
        cond, metas = self._prompt_logprobs(prefix, choices)
        if not unconditional:
            return ChoiceLogprobs(cond, None, metas)
        uncond, umetas = self._prompt_logprobs("", choices, first_is_zero=True)
        return ChoiceLogprobs(cond, uncond, metas + umetas)

    def _prompt_logprobs(self, prefix: str, choices: list[str],
                         first_is_zero: bool = False) -> tuple[list[list[float]], list[dict]]:
        """Each choice's tokens' logprobs in ``prefix + choice``, from one echo request: the
        choice's tokens start at the token covering the first character after the prefix."""
        resp = self._create([prefix + c for c in choices], max_tokens=1, temperature=0, echo=True,
                            logprobs=1)
        out = []
        for choice, text in zip(sorted(resp.choices, key=lambda c: c.index), choices):
            lp = choice.logprobs
            if lp is None or not lp.token_logprobs or not lp.text_offset:
                raise BackendError(f"select: {self.client.base_url} returned no prompt logprobs for "
                                   "echo=True with logprobs; select needs a server that scores "
                                   "prompts (vLLM, SGLang, sglang-lite)")
            offsets, end = lp.text_offset, len(prefix) + len(text)
            first = max(i for i, off in enumerate(offsets) if off <= len(prefix))
            values = [v for v, off in zip(lp.token_logprobs[first:], offsets[first:]) if off < end]
            values = [0.0 if v is None else v for v in values] if first_is_zero else \
                [v for v in values if v is not None]
            if not values:
                raise BackendError(f"select: choice {text!r} adds no scored tokens to the prefix")
            out.append(values)
        return out, [_meta(resp.id, resp.usage, None, None)]

    @property
    def chat_template(self) -> ChatTemplate:
        return self._template

    def get_server_info(self) -> dict[str, Any]:
        return {"base_url": str(self.client.base_url), "model": self.model_name,
                "is_chat_model": self.is_chat_model}


def _template(source: Any) -> ChatTemplate:
    if source is None:
        return PLAIN
    if isinstance(source, ChatTemplate):
        return source
    if isinstance(source, str):
        from transformers import AutoTokenizer

        source = AutoTokenizer.from_pretrained(source)
    return from_tokenizer(source)


def _meta(rid: str | None, usage: Any, reason: str | None, logprobs: list | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"id": rid, "prompt_tokens": getattr(usage, "prompt_tokens", 0) or 0,
                            "completion_tokens": getattr(usage, "completion_tokens", 0) or 0,
                            "finish_reason": {"type": reason} if reason else None}
    if logprobs is not None:
        meta["output_token_logprobs"] = logprobs
    return meta


def _output_logprobs(choice: Any) -> list | None:
    """SGLang's ``(logprob, token_id, text)`` rows; the API gives no ids, so None."""
    lp = getattr(choice, "logprobs", None)
    if lp is None:
        return None
    if getattr(lp, "content", None) is not None:  # chat
        return [(t.logprob, None, t.token) for t in lp.content]
    return [(v, None, t) for v, t in zip(lp.token_logprobs or [], lp.tokens or [])]
