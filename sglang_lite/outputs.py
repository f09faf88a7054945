"""What a request produces, as types: why it finished, the chunks the scheduler hands out, and
the one accumulator that merges chunks into a result (the Python API's ``generate`` and the
HTTP layer's streams both use it).

At the public edge chunks and results stay SGLang's dicts (``text``, ``output_ids``,
``meta_info``, ``finished``; ``meta_info["finish_reason"]`` as ``{"type": ..., ...}``), so a
program written for SGLang reads them unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STOP, LENGTH, ABORT = "stop", "length", "abort"
_LOGPROB_KEYS = ("output_token_logprobs", "output_top_logprobs")


@dataclass(frozen=True, slots=True)
class FinishReason:
    """``stop`` (EOS, a stop token or string, a completed constraint: ``matched`` says which),
    ``length`` (``length`` tokens: max_new_tokens or the context), or ``abort`` (``message``)."""

    type: str
    matched: int | str | None = None
    length: int | None = None
    message: str | None = None

    @classmethod
    def stop(cls, matched: int | str) -> FinishReason:
        return cls(STOP, matched=matched)

    @classmethod
    def at_length(cls, length: int) -> FinishReason:
        return cls(LENGTH, length=length)

    @classmethod
    def abort(cls, message: str) -> FinishReason:
        return cls(ABORT, message=message)

    @property
    def is_abort(self) -> bool:
        return self.type == ABORT

    def to_dict(self) -> dict[str, Any]:
        if self.type == STOP:
            return {"type": STOP, "matched": self.matched}
        if self.type == LENGTH:
            return {"type": LENGTH, "length": self.length}
        return {"type": self.type, "message": self.message}


@dataclass(slots=True)
class OutputChunk:
    """What a request produced since its last chunk; ``finished`` on its last one."""

    text: str
    output_ids: list[int]
    meta_info: dict[str, Any]
    finished: bool

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "output_ids": self.output_ids, "meta_info": self.meta_info,
                "finished": self.finished}


@dataclass(slots=True)
class OutputAccumulator:
    """One request's output so far, merged from its chunks (public dict form): text and ids
    appended, output logprobs appended, ``meta`` the latest chunk's (counts, finish reason)."""

    text: str = ""
    output_ids: list[int] = field(default_factory=list)
    token_logprobs: list[tuple] = field(default_factory=list)  # (logprob, token_id, None)
    top_logprobs: list[list[tuple]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    finished: bool = False

    def add(self, chunk: dict[str, Any]) -> None:
        self.text += chunk["text"]
        self.output_ids += chunk["output_ids"]
        meta = chunk["meta_info"]
        self.token_logprobs += meta.get("output_token_logprobs", [])
        self.top_logprobs += meta.get("output_top_logprobs", [])
        self.meta = meta
        self.finished = self.finished or chunk["finished"]

    @property
    def finish_reason(self) -> dict[str, Any] | None:
        return self.meta.get("finish_reason") if self.finished else None

    def result(self) -> dict[str, Any]:
        """``generate``'s result: the latest meta_info with the logprobs of every chunk."""
        merged = {"output_token_logprobs": self.token_logprobs, "output_top_logprobs": self.top_logprobs}
        meta = {k: (merged[k] if k in _LOGPROB_KEYS else v) for k, v in self.meta.items()}
        return {"text": self.text, "output_ids": self.output_ids, "meta_info": meta}
