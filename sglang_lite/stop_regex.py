"""Stop regexes (SGLang's ``stop_regex``): where the generated text first matches one, the
output stops, and the match is trimmed like a stop string.

Streaming must not send text a match could still cover, so ``hold_from`` uses the
``regex`` module's partial matching: a match that the next characters could complete
holds the stream back from where it starts.
"""

from __future__ import annotations

from functools import lru_cache

import regex

from sglang_lite.errors import InvalidRequest


@lru_cache(maxsize=256)
def compile_stop_regex(pattern: str) -> regex.Pattern:
    """The compiled pattern; InvalidRequest naming ``stop_regex`` if it does not compile or can
    match the empty string (it would stop before the first token)."""
    try:
        compiled = regex.compile(pattern)
    except regex.error as e:
        raise InvalidRequest("stop_regex", f"{pattern!r} is not a valid regex: {e}") from None
    if compiled.fullmatch("") is not None:
        raise InvalidRequest("stop_regex", f"{pattern!r} matches the empty string")
    return compiled


def first_match(patterns: list[str], text: str, start: int = 0) -> tuple[int, str] | None:
    """(index, matched text) of the leftmost complete match at or after ``start``."""
    best: tuple[int, str] | None = None
    for p in patterns:
        m = compile_stop_regex(p).search(text, start)
        if m is not None and (best is None or m.start() < best[0]):
            best = (m.start(), m.group())
    return best


def hold_from(patterns: list[str], text: str, start: int) -> int:
    """The first index at or after ``start`` from which a match could still form as text is
    appended (``len(text)`` when none can)."""
    hold = len(text)
    for p in patterns:
        m = compile_stop_regex(p).search(text, start, partial=True)
        if m is not None and m.partial:
            hold = min(hold, m.start())
    return hold
