"""Code-point ranges to UTF-8 byte-range sequences (the split used by RE2 and Rust's regex)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

MAX_CODE_POINT = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)
_LENGTH_LIMITS = (0x7F, 0x7FF, 0xFFFF)

ByteSeq = tuple[tuple[int, int], ...]


@lru_cache(maxsize=4096)
def utf8_sequences(lo: int, hi: int) -> tuple[ByteSeq, ...]:
    """Byte-range sequences whose union encodes exactly the code points lo..hi (surrogates skipped).

    Each sequence is a tuple of inclusive (lo, hi) byte ranges, one per byte of the encoding.
    Kept per range: a pattern's classes recur across a schema (one compile of Mergify's asked
    for 10,716 ranges, 31,628 _split calls in all).
    """
    out: list[ByteSeq] = []
    _split(lo, hi, out)
    return tuple(out)


def _split(lo: int, hi: int, out: list[ByteSeq]) -> None:
    if lo > hi:
        return
    if lo <= _SURROGATES[1] and hi >= _SURROGATES[0]:
        _split(lo, _SURROGATES[0] - 1, out)
        _split(_SURROGATES[1] + 1, hi, out)
        return
    for limit in _LENGTH_LIMITS:
        if lo <= limit < hi:
            _split(lo, limit, out)
            _split(limit + 1, hi, out)
            return
    if hi <= 0x7F:
        out.append(((lo, hi),))
        return
    # Continuation bytes must range fully (0x80-0xBF) below the first differing byte.
    for i in range(1, len(chr(lo).encode())):
        mask = (1 << (6 * i)) - 1
        if lo & ~mask != hi & ~mask:
            if lo & mask:
                _split(lo, lo | mask, out)
                _split((lo | mask) + 1, hi, out)
                return
            if hi & mask != mask:
                _split(lo, (hi & ~mask) - 1, out)
                _split(hi & ~mask, hi, out)
                return
    out.append(tuple(zip(chr(lo).encode(), chr(hi).encode())))


def ranges_of_chars(chars: frozenset[str] | set[str]) -> list[tuple[int, int]]:
    """Sorted, merged inclusive code-point ranges covering the given characters. The code
    points read in one encode and sorted, not made unique (a set's are): np.unique's hashing
    took 0.6 s on the ~970k characters of a class like [^\\p{C}]."""
    text = "".join(chars).encode("utf-32-le", "surrogatepass")
    return ranges_of_points(np.sort(np.frombuffer(text, dtype=np.uint32).astype(np.int64)))


def ranges_of_points(points: np.ndarray) -> list[tuple[int, int]]:
    """The inclusive ranges of sorted, distinct code points: a range breaks where they jump."""
    if not len(points):
        return []
    breaks = np.nonzero(np.diff(points) != 1)[0]
    los = np.concatenate(([points[0]], points[breaks + 1])).tolist()
    his = np.concatenate((points[breaks], [points[-1]])).tolist()
    return list(zip(los, his))


def complement_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """All code points not in the sorted, merged ranges."""
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODE_POINT:
        out.append((nxt, MAX_CODE_POINT))
    return out
