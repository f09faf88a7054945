"""Reasoning blocks (``--reasoning-parser``): a reply ``<think> ... </think> answer`` is split
into ``reasoning_content`` and ``content``, whole or as a stream of deltas.

Parsers (SGLang's names): ``qwen3`` (the block is optional: Qwen3 with thinking off writes
none), ``deepseek-r1`` and ``qwen3-thinking`` (the chat template opens the block in the
prompt, so the reply starts inside it and may lack ``<think>``). A reply whose block never
closes (cut short by max_tokens) is all reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReasoningParser:
    name: str
    starts_in_reasoning: bool = False  # the prompt already opened the block
    start: str = "<think>"
    end: str = "</think>"

    def split(self, text: str) -> tuple[str | None, str]:
        """(reasoning or None when there is no block, content) of a whole reply."""
        reasoning, content, in_block = self._parts(text, final=True)
        return (reasoning.strip() if in_block else None), content

    def stream(self) -> ReasoningStream:
        return ReasoningStream(self)

    def _parts(self, text: str, final: bool) -> tuple[str, str, bool]:
        """(reasoning, content, whether a block was seen) of ``text``; unless ``final``, a tail
        that may be the start of a tag is held back from both."""
        lead = text.lstrip()
        if not final and len(lead) < len(self.start) and self.start.startswith(lead):
            return "", "", False  # may still become "<think>"
        if lead.startswith(self.start):
            body = lead[len(self.start):].lstrip()
        elif self.starts_in_reasoning:
            body = lead
        else:
            return "", text, False
        idx = body.find(self.end)
        if idx < 0:
            return body[: len(body) - (0 if final else _partial_tail(body, self.end))], "", True
        return body[:idx], body[idx + len(self.end):].lstrip(), True


class ReasoningStream:
    """Splits a streamed reply: ``feed(delta)`` -> (reasoning delta, content delta)."""

    def __init__(self, parser: ReasoningParser):
        self.parser = parser
        self.text = ""
        self.content = ""  # the content so far (what tool-call parsing sees)
        self._sent_reasoning = 0

    def feed(self, delta: str, final: bool = False) -> tuple[str, str]:
        self.text += delta
        reasoning, content, _ = self.parser._parts(self.text, final)
        r, c = reasoning[self._sent_reasoning:], content[len(self.content):]
        self._sent_reasoning, self.content = len(reasoning), content
        return r, c


def _partial_tail(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


REASONING_PARSERS: dict[str, ReasoningParser] = {
    "qwen3": ReasoningParser("qwen3"),
    "deepseek-r1": ReasoningParser("deepseek-r1", starts_in_reasoning=True),
    "qwen3-thinking": ReasoningParser("qwen3-thinking", starts_in_reasoning=True),
}


def reasoning_parser(name: str | None) -> ReasoningParser | None:
    """The parser called ``name`` (None: none); ValueError naming the option otherwise."""
    if name is None:
        return None
    if name not in REASONING_PARSERS:
        raise ValueError(f"reasoning_parser: unknown {name!r} (known: {', '.join(REASONING_PARSERS)})")
    return REASONING_PARSERS[name]
