"""``/tokenize`` and ``/detokenize`` (also under ``/v1/``), in vLLM's shape and SGLang's.

- tokenize: ``{"prompt": str | [str]}`` (or ``"text"``, SGLang's native name) with
  ``add_special_tokens``, or ``{"messages": [...]}`` rendered by the chat template exactly as
  /v1/chat/completions renders them (``add_generation_prompt``, ``tools``,
  ``chat_template_kwargs``) -> ``{"tokens", "count", "max_model_len"}``, plus ``token_strs``
  with ``return_token_strs``. A list of prompts gives lists (SGLang).
- detokenize: ``{"tokens": [int] | [[int]]}`` -> ``{"prompt": ..., "text": ...}``: vLLM reads
  ``prompt``, SGLang ``text``; both carry the same string(s).

Without ``add_special_tokens`` a prompt is tokenized as the completions route does (special
tokens added unless the text already starts with BOS), so ``count`` is the prompt's
``usage.prompt_tokens`` there.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict

from sglang_lite.errors import InvalidRequest
from sglang_lite.server.openai_api import _chat_prompt, _check_model
from sglang_lite.server.protocol import ChatCompletionRequest, ChatMessage
from sglang_lite.server.tools import plan_tools

router = APIRouter()

MAX_TOKENIZE_PROMPTS = 1024


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    prompt: str | list[str] | None = None
    text: str | list[str] | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    tools: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    tokens: list[int] | list[list[int]]


@router.post("/tokenize")
@router.post("/v1/tokenize")
async def tokenize(body: TokenizeRequest, request: Request):
    state = request.app.state
    _check_model(state, body.model)
    tokenizer = _tokenizer(state)
    given = [name for name in ("prompt", "text", "messages") if getattr(body, name) is not None]
    if len(given) != 1:
        raise InvalidRequest("prompt", "pass exactly one of prompt, text or messages")
    if body.messages is not None:
        ids_list, single = [_message_ids(state, body)], True
    else:
        prompts = getattr(body, given[0])
        single = isinstance(prompts, str)
        prompts = [prompts] if single else prompts
        if not 1 <= len(prompts) <= MAX_TOKENIZE_PROMPTS:
            raise InvalidRequest(given[0], f"give 1 to {MAX_TOKENIZE_PROMPTS} prompts")
        ids_list = [_prompt_ids(state, p, body.add_special_tokens) for p in prompts]
    out: dict[str, Any] = {"tokens": ids_list[0] if single else ids_list,
                           "count": len(ids_list[0]) if single else [len(x) for x in ids_list],
                           "max_model_len": state.engine.context_length}
    if body.return_token_strs:
        strs = [tokenizer.convert_ids_to_tokens(ids) for ids in ids_list]
        out["token_strs"] = strs[0] if single else strs
    return out


@router.post("/detokenize")
@router.post("/v1/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request):
    state = request.app.state
    _check_model(state, body.model)
    tokenizer = _tokenizer(state)
    single = not body.tokens or isinstance(body.tokens[0], int)
    lists = [body.tokens] if single else body.tokens
    vocab = state.engine.model_config.vocab_size
    for ids in lists:
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise InvalidRequest("tokens", f"token id {bad} is not in [0, {vocab})")
    texts = [tokenizer.decode(ids) for ids in lists]
    text: str | list[str] = texts[0] if single else texts
    return {"prompt": text, "text": text}


def _tokenizer(state):
    tokenizer = state.engine.tokenizer
    if tokenizer is None:
        raise InvalidRequest("model", "this model has no tokenizer")
    return tokenizer


def _prompt_ids(state, text: str, add_special_tokens: bool | None) -> list[int]:
    if add_special_tokens is None:
        try:
            return state.engine.tokenize(text)
        except InvalidRequest as e:  # too long for the context: a 400 here, not a 413
            raise InvalidRequest("prompt", e.detail) from e
    return state.engine.tokenizer.encode(text, add_special_tokens=add_special_tokens)


def _message_ids(state, body: TokenizeRequest) -> list[int]:
    if not body.messages:
        raise InvalidRequest("messages", "must not be empty")
    chat = ChatCompletionRequest(messages=body.messages, add_generation_prompt=body.add_generation_prompt,
                                 tools=body.tools, chat_template_kwargs=body.chat_template_kwargs)
    return _chat_prompt(state, chat, plan_tools(body.tools, "auto" if body.tools else None, None))
