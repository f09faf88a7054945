"""Incremental detokenization that never emits a broken UTF-8 character.

A token may carry half of a multi-byte character; decoding it alone yields U+FFFD. We
decode a short window of already-emitted tokens plus the new ones and only emit once the
window's text no longer ends in U+FFFD (the offsets scheme vLLM and SGLang use). A few
prompt tokens seed the window so SentencePiece's leading-space rule sees context.
"""

from __future__ import annotations

_CONTEXT_TOKENS = 5


class IncrementalDetokenizer:
    def __init__(self, tokenizer, prompt_ids: list[int], skip_special_tokens: bool = True):
        self._tok = tokenizer
        self._skip = skip_special_tokens
        self._ids: list[int] = list(prompt_ids[-_CONTEXT_TOKENS:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)

    def _decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=self._skip)

    def step(self, new_ids: list[int]) -> str:
        """Feed newly generated ids; return the text that is now safe to emit."""
        self._ids.extend(new_ids)
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        full_text = self._decode(self._ids[self._prefix_offset :])
        if len(full_text) > len(prefix_text) and not full_text.endswith("\ufffd"):
            self._prefix_offset = self._read_offset
            self._read_offset = len(self._ids)
            return full_text[len(prefix_text) :]
        return ""

    def flush(self) -> str:
        """At the end of generation: whatever is left, broken tail included."""
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        full_text = self._decode(self._ids[self._prefix_offset :])
        self._prefix_offset = self._read_offset = len(self._ids)
        return full_text[len(prefix_text) :] if full_text.startswith(prefix_text) else ""
