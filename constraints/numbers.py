"""Numeric bounds as regexes over JSON number syntax (no leading zeros), and multipleOf as
a remainder automaton over the digits."""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

import numpy as np

INTEGER = r"-?(0|[1-9][0-9]*)"
NUMBER = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
_FRAC_ANY = r"(\.[0-9]+)?"
_FRAC_ZERO = r"(\.0+)?"
_FRAC_POSITIVE = r"\.[0-9]*[1-9][0-9]*"
_EMPTY = r"[^\d\D]"  # no string at all (an empty range); once a non-ASCII byte and NUL, which it let through


def integer_range_regex(lo: int | None, hi: int | None) -> str:
    """Integers in [lo, hi] (None = unbounded); a regex of no string if there are none."""
    alts = []
    if lo is None or lo < 0:
        # Negative values -m with m in [max(1, -hi), -lo].
        m_lo = 1 if hi is None or hi >= 0 else -hi
        m_hi = None if lo is None else -lo
        alts += ["-" + a for a in _nonneg_range(m_lo, m_hi)]
    if hi is None or hi >= 0:
        alts += _nonneg_range(max(lo or 0, 0), hi)
    return "(" + "|".join(alts) + ")" if alts else _EMPTY


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


def lower_bound_regex(bound: int | Decimal, exclusive: bool, negate: bool = False) -> str:
    """Numbers v with v >= bound (v > bound if exclusive); negate=True gives v <= -bound ...

    ... by mirroring signs. Any decimal bound works: a fractional part compares digit by
    digit. Exponents are not generated.
    """
    plus, minus = ("-", "") if negate else ("", "-")
    whole, frac = _split(bound)
    if bound >= 0:
        if not frac:
            if exclusive:
                alts = [plus + _int_part(whole + 1, None) + _FRAC_ANY,
                        plus + _int_part(whole, whole) + _FRAC_POSITIVE]
            else:
                alts = [plus + _int_part(whole, None) + _FRAC_ANY]
                if whole == 0:
                    alts.append(minus + "0" + _FRAC_ZERO)  # -0 and 0 are both zero
        else:
            alts = [plus + _int_part(whole + 1, None) + _FRAC_ANY,
                    plus + str(whole) + r"\." + _frac_at_least(frac, exclusive)]
        return "(" + "|".join(alts) + ")"
    # Every non-negative (resp. mirrored) value, plus -(m.f) with m.f < |bound| (or <=).
    alts = [plus + _int_part(0, None) + _FRAC_ANY]
    if whole > 0:
        alts.append(minus + _int_part(0, whole - 1) + _FRAC_ANY)
    if not frac:
        if not exclusive:
            alts.append(minus + _int_part(whole, whole) + _FRAC_ZERO)
    else:
        alts.append(minus + str(whole) + r"(\." + _frac_at_most(frac, exclusive) + ")?")
    return "(" + "|".join(alts) + ")"


def _split(bound: int | Decimal) -> tuple[int, str]:
    """|bound| as (integer part, fraction digits without trailing zeros)."""
    text = format(abs(Decimal(bound)), "f")
    whole, _, frac = text.partition(".")
    return int(whole), frac.rstrip("0")


def _frac_at_least(f: str, exclusive: bool) -> str:
    """Fraction digit strings d (one or more) with 0.d >= 0.f (> if exclusive); f has no
    trailing zero. d > f where they first differ, or d extends f."""
    alts = [f[:j] + f"[{int(f[j]) + 1}-9][0-9]*" for j in range(len(f)) if f[j] != "9"]
    alts.append(f + ("[0-9]*[1-9][0-9]*" if exclusive else "[0-9]*"))
    return "(" + "|".join(alts) + ")"


def _frac_at_most(f: str, exclusive: bool) -> str:
    """Fraction digit strings d (one or more) with 0.d <= 0.f (< if exclusive); f has no
    trailing zero. d < f where they first differ, or d is a prefix of f (then zeros)."""
    alts = [f[:j] + f"[0-{int(f[j]) - 1}][0-9]*" for j in range(len(f)) if f[j] != "0"]
    alts += ["0+"] + [f[:j] + "0*" for j in range(1, len(f))]
    if not exclusive:
        alts.append(f + "0*")
    return "(" + "|".join(alts) + ")"


def as_decimal(value) -> Decimal:
    """A JSON number as the decimal it spells (1.1 -> Decimal('1.1'), not the binary double)."""
    try:
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation as e:
        raise ValueError(f"not a finite number: {value!r}") from e


def multiple_of_table(step: Decimal, max_states: int) -> tuple[np.ndarray, np.ndarray] | None:
    """multipleOf as a DFA table over number text: ``trans [S, 256]`` and ``accept [S]``.

    step = p / 10**q with p, q integers: v is a multiple iff v * 10**q is an integer (no
    nonzero digit past the q-th decimal) divisible by p, so the states track the remainder
    mod p of the digits read, and how many decimals. The table accepts any digit spelling
    (sign, leading zeros, no exponent): intersect it with the number syntax. None when it
    would need more than ``max_states`` states.
    """
    _, digits, exp = step.normalize().as_tuple()
    p = int("".join(map(str, digits))) * 10 ** max(exp, 0)
    q = max(-exp, 0)
    # Per remainder r: INT (integer digits), DOT (just read '.'), FRAC j = 1..q (decimals
    # read), ZEROS (past the q-th decimal: only zeros); plus a start and an after-'-' state.
    per = q + 3
    n = 2 + p * per
    if n > max_states:
        return None
    trans = np.full((n, 256), -1, dtype=np.int32)
    accept = np.zeros(n, dtype=bool)
    int_, dot, zeros = 0, 1, q + 2  # FRAC j is at 1 + j

    def st(r: int, k: int) -> int:
        return 2 + r * per + k

    zero = ord("0")
    trans[0, ord("-")] = 1
    for d in range(10):
        trans[0, zero + d] = trans[1, zero + d] = st(d % p, int_)
    for r in range(p):
        for d in range(10):
            nxt = (10 * r + d) % p
            trans[st(r, int_), zero + d] = st(nxt, int_)
            for k in range(dot, 1 + q):  # DOT and FRAC j < q read the next significant decimal
                trans[st(r, k), zero + d] = st(nxt, k + 1)
        trans[st(r, int_), ord(".")] = st(r, dot)
        trans[st(r, dot if q == 0 else 1 + q), zero] = st(r, zeros)
        trans[st(r, zeros), zero] = st(r, zeros)
        accept[st(r, int_)] = r * 10**q % p == 0
        for j in range(1, q + 1):
            accept[st(r, 1 + j)] = r * 10 ** (q - j) % p == 0
        accept[st(r, zeros)] = r == 0
    return trans, accept


def _int_part(lo: int, hi: int | None) -> str:
    alts = _nonneg_range(lo, hi)
    return "(" + "|".join(alts) + ")" if alts else _EMPTY
