"""The in-process backend: a ``sglang_lite.Engine`` in this Python process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from frontend_dsl.backends.base import Backend, BackendError, check_finished
from frontend_dsl.chat_template import ChatTemplate, from_tokenizer

_LOGPROB_KEYS = ("output_token_logprobs", "input_token_logprobs")


class EngineBackend(Backend):
    """``EngineBackend()`` builds the embedded model; ``EngineBackend(engine)`` wraps one.

    Keyword options go to ``Engine(model, **options)`` when no engine is given.
    """

    def __init__(self, engine=None, model: str | None = None, **options: Any):
        super().__init__()
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

    def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        return {k: request[k] for k in ("return_logprob", "top_logprobs_num", "logprob_start_len")
                if request.get(k) is not None}

    def _with_text(self, result: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        """``return_text_in_logprobs``: each logprob entry carries its token's text."""
        if request.get("return_text_in_logprobs"):
            meta = result["meta_info"]
            decode = self.engine.tokenizer.decode
            for key in _LOGPROB_KEYS:
                if key in meta:
                    meta[key] = [(lp, t, decode([t])) for lp, t, _ in meta[key]]
        return result

    def generate(self, prompt: str, sampling_params: dict[str, Any], **request: Any) -> Any:
        result = self._call(prompt=prompt, sampling_params=sampling_params, **self._request(request))
        if isinstance(result, list):
            return [self._with_text(check_finished(r), request) for r in result]
        return self._with_text(check_finished(result), request)

    def generate_stream(self, prompt: str, sampling_params: dict[str, Any],
                        **request: Any) -> Iterator[dict[str, Any]]:
        for chunk in self._call(prompt=prompt, sampling_params=sampling_params, stream=True,
                                **self._request(request)):
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
