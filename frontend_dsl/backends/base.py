"""What the interpreter needs from an engine: generate, stream, prefill, score, tokenize.

Every call sends the whole text so far; prefix reuse is the engine's radix cache's job. A
backend raises ``BackendError`` for a failed request; results are SGLang ``/generate`` dicts
(``text``, ``output_ids``, ``meta_info``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

from frontend_dsl.chat_template import ChatTemplate


class BackendError(RuntimeError):
    """The engine rejected or aborted a request; the message is the engine's."""


class Backend(ABC):
    @abstractmethod
    def generate(self, text: str, sampling_params: dict[str, Any]) -> dict[str, Any]:
        """One completion of ``text``; raises BackendError if it finished with ``abort``."""

    @abstractmethod
    def generate_stream(self, text: str, sampling_params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Chunks ``{"text": delta, "finished", "meta_info"}``; the last has ``finished``."""

    @abstractmethod
    def prefill(self, texts: list[str]) -> list[dict[str, Any]]:
        """Compute (and cache) the prompts' KV without generating: one batch, metas back."""

    @abstractmethod
    def score(self, input_ids: list[list[int]], logprob_start_len: int) -> list[dict[str, Any]]:
        """Prefill-only, returning ``input_token_logprobs`` for positions >= logprob_start_len.

        Sent as one batch so the prompts' shared prefix is computed once.
        """

    @abstractmethod
    def tokenize(self, text: str) -> list[int]:
        """Exactly the ids the engine would compute for ``text`` as a prompt."""

    @property
    @abstractmethod
    def chat_template(self) -> ChatTemplate:
        """The role prefixes/suffixes (the plain-text fallback if the model has none)."""

    def get_stats(self) -> dict[str, Any]:
        return {}

    def flush_cache(self) -> None:  # noqa: B027 - optional
        pass


def check_finished(result: dict[str, Any]) -> dict[str, Any]:
    reason = (result.get("meta_info") or {}).get("finish_reason") or {}
    if reason.get("type") == "abort":
        raise BackendError(f"request aborted: {reason.get('message', 'no reason given')}")
    return result
