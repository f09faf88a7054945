"""The in-process backend: a ``sglang_lite.Engine`` in this Python process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from frontend_dsl.backends.base import Backend, BackendError, check_finished
from frontend_dsl.chat_template import ChatTemplate, from_tokenizer


class EngineBackend(Backend):
    """``EngineBackend()`` builds the embedded model; ``EngineBackend(engine)`` wraps one.

    Keyword options go to ``Engine(model, **options)`` when no engine is given.
    """

    def __init__(self, engine=None, model: str | None = None, **options: Any):
        if engine is None:
            from sglang_lite import Engine

            engine = Engine(model, **options)
        self.engine = engine
        self._template: ChatTemplate | None = None

    def _call(self, **kwargs: Any):
        try:
            return self.engine.generate(**kwargs)
        except ValueError as e:  # the engine's "field: message" validation errors
            raise BackendError(str(e)) from e

    def generate(self, text: str, sampling_params: dict[str, Any]) -> dict[str, Any]:
        return check_finished(self._call(prompt=text, sampling_params=sampling_params))

    def generate_stream(self, text: str, sampling_params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        for chunk in self._call(prompt=text, sampling_params=sampling_params, stream=True):
            if chunk["finished"]:
                check_finished(chunk)
            yield chunk

    def prefill(self, texts: list[str]) -> list[dict[str, Any]]:
        results = self._call(prompt=list(texts), sampling_params={"max_new_tokens": 0})
        return [r["meta_info"] for r in results]

    def score(self, input_ids: list[list[int]], logprob_start_len: int) -> list[dict[str, Any]]:
        results = self._call(input_ids=[list(ids) for ids in input_ids],
                             sampling_params={"max_new_tokens": 0}, return_logprob=True,
                             logprob_start_len=logprob_start_len)
        return [check_finished(r)["meta_info"] for r in results]

    def tokenize(self, text: str) -> list[int]:
        return self.engine.tokenize(text)

    @property
    def chat_template(self) -> ChatTemplate:
        if self._template is None:
            self._template = from_tokenizer(self.engine.tokenizer)
        return self._template

    def get_stats(self) -> dict[str, Any]:
        return self.engine.get_stats()

    def flush_cache(self) -> None:
        self.engine.flush_cache()

    def shutdown(self) -> None:
        self.engine.shutdown()
