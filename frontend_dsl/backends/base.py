"""What the interpreter needs from an engine: generate, stream, prefill, score, tokenize.

Every call sends the whole text so far; prefix reuse is the engine's radix cache's job. A
backend raises ``BackendError`` for a failed request; results are SGLang ``/generate`` dicts
(``text``, ``output_ids``, ``meta_info``). A chat-only backend (``is_chat_model``) is given
the closed chat turns instead of the text.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from frontend_dsl.chat_template import ChatTemplate
from frontend_dsl.scoring import ChoiceLogprobs, token_choice_logprobs

Prompt = str | list[dict[str, str]]  # the text so far, or (chat models) the closed turns


class BackendError(RuntimeError):
    """The engine rejected or aborted a request; the message is the engine's."""


@dataclass(slots=True)
class TokenUsage:
    """Tokens a backend's programs have sent and received (SGLang's ``backend.token_usage``)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens

    def reset(self) -> None:
        with self._lock:
            self.prompt_tokens = self.completion_tokens = 0


class Backend(ABC):
    is_chat_model = False

    def __init__(self) -> None:
        self.token_usage = TokenUsage()

    @abstractmethod
    def generate(self, prompt: Prompt, sampling_params: dict[str, Any], **request: Any) -> Any:
        """One completion (a list of them when ``n > 1``); raises BackendError if it finished
        with ``abort``. ``request`` holds SGLang's logprob options (``return_logprob``, ...)."""

    @abstractmethod
    def generate_stream(self, prompt: Prompt, sampling_params: dict[str, Any],
                        **request: Any) -> Iterator[dict[str, Any]]:
        """Chunks ``{"text": delta, "finished", "meta_info"}``; the last has ``finished``."""

    @abstractmethod
    def prefill(self, texts: list[str]) -> list[dict[str, Any]]:
        """Compute (and cache) the prompts' KV without generating: one batch, metas back."""

    def score(self, input_ids: list[list[int]], logprob_start_len: int) -> list[dict[str, Any]]:
        """Prefill-only, returning ``input_token_logprobs`` for positions >= logprob_start_len.

        Sent as one batch so the prompts' shared prefix is computed once.
        """
        raise BackendError(f"{type(self).__name__}: scoring token ids is not supported")

    def tokenize(self, text: str) -> list[int]:
        """Exactly the ids the engine would compute for ``text`` as a prompt."""
        raise BackendError(f"{type(self).__name__}: tokenizing is not supported")

    def tokenize_many(self, texts: list[str]) -> list[list[int]]:
        return [self.tokenize(t) for t in texts]

    def choice_logprobs(self, prefix: str, choices: list[str], unconditional: bool = False) -> ChoiceLogprobs:
        """Each choice's token logprobs after ``prefix`` (``select``); by default through
        ``tokenize`` and ``score``."""
        return token_choice_logprobs(self, prefix, choices, unconditional)

    @property
    @abstractmethod
    def chat_template(self) -> ChatTemplate:
        """The role prefixes/suffixes (the plain-text fallback if the model has none)."""

    def get_stats(self) -> dict[str, Any]:
        return {}

    def get_server_info(self) -> dict[str, Any]:
        return self.get_stats()

    def flush_cache(self) -> None:  # noqa: B027 - optional
        pass


def check_finished(result: dict[str, Any]) -> dict[str, Any]:
    reason = (result.get("meta_info") or {}).get("finish_reason") or {}
    if reason.get("type") == "abort":
        raise BackendError(f"request aborted: {reason.get('message', 'no reason given')}")
    return result
