"""Request intake: a generate call's arguments -> validated requests, tokenized, checked
against the model (vocabulary, context length) and with their constraints compiled.

It runs on the caller's thread (a worker thread for async callers), never the scheduler's,
and validates every item before it returns: one bad item leaves nothing submitted. Every
refusal is a typed InvalidRequest naming the field."""

from __future__ import annotations

import secrets
import threading
import uuid
from typing import Any

from sglang_lite.errors import ContextLengthExceeded, InvalidRequest
from sglang_lite.request import Req
from sglang_lite.sampling_params import SamplingParams, choice_seeds

MAX_CACHE_SALT_CHARS = 256


class RequestIntake:
    def __init__(self, tokenizer, vocab_size: int, context_length: int, grammar_backend=None):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.context_length = context_length
        self.grammar_backend = grammar_backend
        self.max_prompt_chars = context_length * _max_token_chars(tokenizer)

    def tokenize(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise InvalidRequest("prompt", "this model has no tokenizer; pass input_ids")
        self.check_prompt_chars(len(text))
        bos = self.tokenizer.bos_token
        add_special = not (bos and text.startswith(bos))
        return self.tokenizer.encode(text, add_special_tokens=add_special)

    def check_prompt_chars(self, num_chars: int, field: str = "prompt") -> None:
        """Refuse text that cannot fit the context before tokenizing it: no token decodes to
        more than ``max_token_chars`` characters, so longer text has more tokens than fit."""
        if num_chars > self.max_prompt_chars:
            raise ContextLengthExceeded(field, f"{num_chars} characters cannot fit the context length "
                                               f"{self.context_length} (at most {self.max_prompt_chars} characters)")

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, **kw) -> str:
        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            raise InvalidRequest("messages", "this model has no chat template")
        self.check_prompt_chars(sum(len(m.get("content") or "") for m in messages
                                    if isinstance(m.get("content"), str)), "messages")
        return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt, **kw)

    def make_reqs(self, prompt, input_ids, sampling_params, return_logprob: bool, top_logprobs_num: int,
                  stream: bool, rid: str | None, logprob_start_len: int | None = None,
                  cancel: threading.Event | None = None, cache_salt: str | None = None,
                  priority: Any = None) -> tuple[list[Req], bool]:
        """(the requests, one per prompt and choice; whether the call takes one result, not a list)."""
        id_lists, single = self._prompt_ids(prompt, input_ids)
        params_list = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(id_lists)
        if len(params_list) != len(id_lists):
            raise InvalidRequest("sampling_params", "a list must have one entry per prompt")
        if not isinstance(top_logprobs_num, int) or top_logprobs_num < 0 or top_logprobs_num > 20:
            raise InvalidRequest("top_logprobs_num", "must be an integer in [0, 20]")
        priority = _check_priority(priority)
        out = []
        for ids, sp in zip(id_lists, params_list):
            params = SamplingParams.from_dict(sp)
            self._check_input_ids(ids)
            params.check_limits(self.vocab_size, self.context_length)
            compiled = self._compile_constraint(params, cancel)
            for choice_seed in choice_seeds(params.seed, params.n):
                out.append(Req(
                    rid if (rid and params.n == 1 and single) else uuid.uuid4().hex, list(ids), params,
                    secrets.randbits(62) if choice_seed is None else choice_seed, on_output=None,
                    compiled_grammar=compiled, return_logprob=return_logprob,
                    top_logprobs_num=top_logprobs_num if return_logprob else 0, stream=stream,
                    logprob_start_len=_input_logprob_start(return_logprob, logprob_start_len, ids),
                    cache_salt=_check_salt(cache_salt), priority=priority))
        return out, single and out[0].sampling.n == 1

    def _prompt_ids(self, prompt, input_ids) -> tuple[list, bool]:
        """Each prompt's token ids (text tokenized), and whether one prompt was given."""
        single = not (isinstance(prompt, list) or (input_ids and isinstance(input_ids[0], list)))
        if prompt is None and input_ids is None:
            raise InvalidRequest("prompt", "one of prompt or input_ids is required")
        if prompt is not None and input_ids is not None:
            raise InvalidRequest("prompt", "pass prompt or input_ids, not both")
        items = [prompt] if prompt is not None and single else prompt
        id_lists = ([input_ids] if single else input_ids) if input_ids is not None else None
        if id_lists is None:
            if not all(isinstance(p, str) for p in items):
                raise InvalidRequest("prompt", "must be a string or a list of strings")
            id_lists = [self.tokenize(p) for p in items]
        if not id_lists:
            raise InvalidRequest("prompt", "an empty list of prompts")
        return id_lists, single

    def _compile_constraint(self, params: SamplingParams, cancel: threading.Event | None = None):
        """The request's compiled constraint (or None), made here on the caller's thread so
        the scheduler never compiles; compile errors and a max_new_tokens too small for any
        complete output surface here as typed InvalidRequest errors."""
        if params.constraint is None:
            return None
        if self.grammar_backend is None:
            raise InvalidRequest(params.constraint[0], "this model has no tokenizer to constrain with")
        return self.grammar_backend.admit(params, cancel)

    def _check_input_ids(self, ids) -> None:
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) for t in ids):
            raise InvalidRequest("input_ids", "must be a non-empty list of token ids")
        if min(ids) < 0 or max(ids) >= self.vocab_size:
            raise InvalidRequest("input_ids", f"token ids must be in [0, {self.vocab_size})")
        if len(ids) >= self.context_length:
            raise ContextLengthExceeded("prompt", f"{len(ids)} tokens does not fit the context length "
                                                  f"{self.context_length} (prompt plus at least one new token)")


def _check_priority(priority) -> int:
    if priority is None:
        return 0
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise InvalidRequest("priority", f"must be an integer, got {priority!r}")
    return priority


def _check_salt(salt) -> str | None:
    if salt is None:
        return None
    if not isinstance(salt, str) or not salt or len(salt) > MAX_CACHE_SALT_CHARS:
        raise InvalidRequest("cache_salt", f"must be a non-empty string of at most {MAX_CACHE_SALT_CHARS} characters")
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
        raise InvalidRequest("logprob_start_len", f"must be an integer, got {start!r}")
    if start < 0:  # SGLang's -1: no input logprobs
        return None
    if start >= len(ids):
        raise InvalidRequest("logprob_start_len", f"must be an integer in [0, {len(ids)})")
    return start
