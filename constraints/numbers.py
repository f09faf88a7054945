"""Numeric bounds as regexes over JSON number syntax (no leading zeros)."""

from __future__ import annotations

import math

INTEGER = r"-?(0|[1-9][0-9]*)"
NUMBER = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
_FRAC_ANY = r"(\.[0-9]+)?"
_FRAC_ZERO = r"(\.0+)?"
_FRAC_POSITIVE = r"\.[0-9]*[1-9][0-9]*"


def integer_range_regex(lo: int | None, hi: int | None) -> str:
    """Integers in [lo, hi] (None = unbounded); "(?!)"-like empty alternation if none."""
    alts = []
    if lo is None or lo < 0:
        # Negative values -m with m in [max(1, -hi), -lo].
        m_lo = 1 if hi is None or hi >= 0 else -hi
        m_hi = None if lo is None else -lo
        alts += ["-" + a for a in _nonneg_range(m_lo, m_hi)]
    if hi is None or hi >= 0:
        alts += _nonneg_range(max(lo or 0, 0), hi)
    return "(" + "|".join(alts) + ")" if alts else "[^\\x00-\\x7f]\\x00"


def _nonneg_range(lo: int, hi: int | None) -> list[str]:
    if hi is None:
        n = len(str(lo))
        return _nonneg_range(lo, 10**n - 1) + [f"[1-9][0-9]{{{n},}}"]
    out: list[str] = []
    for n in range(len(str(lo)), len(str(hi)) + 1) if lo <= hi else ():
        a = max(lo, 10 ** (n - 1) if n > 1 else 0)
        b = min(hi, 10**n - 1)
        if a <= b:
            out += _same_length(str(a), str(b))
    return out


def _same_length(a: str, b: str) -> list[str]:
    """Digit strings of len(a) between a and b inclusive (equal lengths)."""
    if a == b:
        return [a]
    n = len(a)
    if a == "0" * n and b == "9" * n:
        return [f"[0-9]{{{n}}}"]
    if n == 1:
        return [f"[{a}-{b}]"]
    if a[0] == b[0]:
        return [a[0] + r for r in _same_length(a[1:], b[1:])]
    out = [a[0] + r for r in _same_length(a[1:], "9" * (n - 1))]
    if int(a[0]) + 1 <= int(b[0]) - 1:
        out.append(f"[{int(a[0]) + 1}-{int(b[0]) - 1}][0-9]{{{n - 1}}}")
    out += [b[0] + r for r in _same_length("0" * (n - 1), b[1:])]
    return out


def integer_bounds(minimum, maximum, excl_min, excl_max) -> tuple[int | None, int | None]:
    """Schema bounds (any numbers) -> inclusive integer bounds."""
    lo = None if minimum is None else math.ceil(minimum)
    if excl_min is not None:
        e = math.floor(excl_min) + 1
        lo = e if lo is None else max(lo, e)
    hi = None if maximum is None else math.floor(maximum)
    if excl_max is not None:
        e = math.ceil(excl_max) - 1
        hi = e if hi is None else min(hi, e)
    return lo, hi


def lower_bound_regex(bound: int, exclusive: bool, negate: bool = False) -> str:
    """Numbers v with v >= bound (v > bound if exclusive); negate=True gives v <= -bound ...

    ... by mirroring signs. The bound must be an integer; exponents are not generated.
    """
    plus, minus = ("-", "") if negate else ("", "-")
    if bound >= 0:
        if exclusive:
            alts = [plus + _int_part(bound + 1, None) + _FRAC_ANY,
                    plus + _int_part(bound, bound) + _FRAC_POSITIVE]
        else:
            alts = [plus + _int_part(bound, None) + _FRAC_ANY]
            if bound == 0:
                alts.append(minus + "0" + _FRAC_ZERO)  # -0 and 0 are both zero
        return "(" + "|".join(alts) + ")"
    k = -bound
    # Every non-negative (resp. mirrored) value, plus -(m.f) with m.f < k (or <= k).
    alts = [plus + _int_part(0, None) + _FRAC_ANY, minus + _int_part(0, k - 1) + _FRAC_ANY]
    if not exclusive:
        alts.append(minus + _int_part(k, k) + _FRAC_ZERO)
    return "(" + "|".join(alts) + ")"


def _int_part(lo: int, hi: int | None) -> str:
    alts = _nonneg_range(lo, hi)
    return "(" + "|".join(alts) + ")" if alts else "[^\\x00-\\x7f]\\x00"
