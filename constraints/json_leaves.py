"""Small cached byte automata every JSON schema shares: strings, numbers, keys, any value.

Schemas are composed by embedding these (see DESIGN.md: one giant regex per schema costs
30-150 ms to determinize; shared sub-automata are built once per process).
"""

from __future__ import annotations

import json
import re
import time
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache

import numpy as np

from .budget import CompileBudget
from .completion import backward_distances
from .errors import ConstraintError, GrammarTooComplexError, UnsupportedSchemaError
from .fsm import DEAD, UNREACHABLE, ByteDFA, determinize, embed_dfa, product, trim_and_minimize
from .nfa import NFA, emit_alt, emit_bytes, emit_code_point_ranges, emit_repeat
from .regex import regex_to_dfa, search_dfa

# Unescaped string characters: anything but '"', '\\' and C0 controls.
_PLAIN = [(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x10FFFF)]
_PLAIN_ASCII = [(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E)]
# "\/", \u escapes of ordinary characters, of controls with a short escape, and upper-case
# hex digits are left out: one spelling per character keeps property-name exclusion, length
# counting and uniqueness by text exact.
_SHORT_ESCAPES = b'"\\bfnrt'
_HEX_LOWER = [(0x30, 0x39), (0x61, 0x66)]
_CONTROLS_0 = [(0x30, 0x37), (0x62, 0x62), (0x65, 0x66)]  # \u0000-\u0007, \u000b, \u000e-f

FORMATS = {
    "date": r"([0-9]{4}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)"
            r"|(0[13578]|1[02])-31)|([0-9]{2}(0[48]|[2468][048]|[13579][26])"
            r"|(0[48]|[2468][048]|[13579][26])00)-02-29)",
    "time": r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?"
            r"(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
    "email": r"[a-zA-Z0-9_+-]+(\.[a-zA-Z0-9_+-]+)*@[a-zA-Z0-9]([a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?"
             r"(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?)*\.[a-zA-Z]{2,10}",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "ipv4": r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
            r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
    "ipv6": r"(([0-9a-f]{1,4}:){7}[0-9a-f]{1,4}|([0-9a-f]{1,4}:){1,7}:"
            r"|([0-9a-f]{1,4}:){1,6}:[0-9a-f]{1,4}|([0-9a-f]{1,4}:){1,5}(:[0-9a-f]{1,4}){1,2}"
            r"|([0-9a-f]{1,4}:){1,4}(:[0-9a-f]{1,4}){1,3}|([0-9a-f]{1,4}:){1,3}(:[0-9a-f]{1,4}){1,4}"
            r"|([0-9a-f]{1,4}:){1,2}(:[0-9a-f]{1,4}){1,5}|[0-9a-f]{1,4}:(:[0-9a-f]{1,4}){1,6}"
            r"|:((:[0-9a-f]{1,4}){1,7}|:))",
    # Label lengths and counts are capped (a subset of valid names) to keep the DFA small.
    "hostname": r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,20}[a-zA-Z0-9])?"
                r"(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,20}[a-zA-Z0-9])?){0,3}",
}
FORMATS["date-time"] = FORMATS["date"] + "T" + FORMATS["time"]


def _uri_regexes(extra: str) -> tuple[str, str]:
    """(URI, URI-reference) regexes after RFC 3986; ``extra`` adds characters to the
    unreserved set (RFC 3987 IRIs). IPv6-literal hosts are left out: every accepted string
    is valid, some rare valid shapes are not generated."""
    pct = "%[0-9A-Fa-f]{2}"
    pchar = f"([{extra}a-zA-Z0-9._~!$&'()*+,;=:@-]|{pct})"
    authority = (f"(([{extra}a-zA-Z0-9._~!$&'()*+,;=:-]|{pct})*@)?"
                 f"([{extra}a-zA-Z0-9._~!$&'()*+,;=-]|{pct})+(:[0-9]{{1,5}})?")
    paths = f"//{authority}(/{pchar}*)*|/({pchar}+(/{pchar}*)*)?"
    tail = f"(\\?({pchar}|[/?])*)?(#({pchar}|[/?])*)?"
    no_colon = f"([{extra}a-zA-Z0-9._~!$&'()*+,;=@-]|{pct})+"
    absolute = f"[a-zA-Z][a-zA-Z0-9+.-]*:({paths}|{pchar}+(/{pchar}*)*)"
    return absolute + tail, f"({absolute}|({paths}|{no_colon}(/{pchar}*)*)?){tail}"


_DIGITS = "[0-9]{1,9}"
_DUR_TIME = f"T({_DIGITS}H({_DIGITS}M({_DIGITS}S)?)?|{_DIGITS}M({_DIGITS}S)?|{_DIGITS}S)"
_JSON_POINTER = "(/([^/~]|~[01])*)*"
_PCT = "%[0-9A-Fa-f]{2}"
_TEMPLATE_VAR = f"([a-zA-Z0-9_]|{_PCT})(\\.?([a-zA-Z0-9_]|{_PCT}))*(:[1-9][0-9]{{0,3}}|\\*)?"
_UCSCHAR = "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef"
FORMATS["uri"], FORMATS["uri-reference"] = _uri_regexes("")
FORMATS["iri"], FORMATS["iri-reference"] = _uri_regexes(_UCSCHAR)
FORMATS |= {
    "duration": f"P(({_DIGITS}D|{_DIGITS}M({_DIGITS}D)?|{_DIGITS}Y({_DIGITS}M({_DIGITS}D)?)?)"
                f"({_DUR_TIME})?|{_DUR_TIME}|{_DIGITS}W)",
    "json-pointer": _JSON_POINTER,
    "relative-json-pointer": f"(0|[1-9][0-9]*)(#|{_JSON_POINTER})",
    "uri-template": f"([!#$&()*+,./0-9:;=?@A-Z\\[\\]_a-z~-]|{_PCT}"
                    f"|\\{{[+#./;?&=,!@|]?{_TEMPLATE_VAR}(,{_TEMPLATE_VAR})*\\}})*",
    # ASCII e-mail addresses and host names are valid internationalized ones.
    "idn-email": FORMATS["email"],
    "idn-hostname": FORMATS["hostname"],
    # A subset of the valid regexes (a regex's own syntax nests, so no byte automaton holds
    # all of them): literals, the dot and single quantifiers, optionally anchored.
    "regex": r"\^?(([A-Za-z0-9 _:/,;!@#%&=<>~-]|\.)[*+?]?)*\$?",
}
# Strings a format's regex would accept but must not: host labels with "--" in the 3rd and
# 4th positions are reserved (xn-- labels must be valid Punycode, which a regex cannot check).
FORMAT_EXCLUDED = {"hostname": r"(.*\.)?[^.]{2}--.*", "idn-hostname": r"(.*\.)?[^.]{2}--.*",
                   "email": r".*@(.*\.)?[^.]{2}--.*", "idn-email": r".*@(.*\.)?[^.]{2}--.*"}


# The deadline of the compilation that is building leaves now: a leaf is cached for every
# later schema, so it has caps of its own, but it never outlives the request that asked.
_DEADLINE: ContextVar[float | None] = ContextVar("constraint_compile_deadline", default=None)


@contextmanager
def leaves_within(budget: CompileBudget):
    """Leaves built inside this block stop at ``budget``'s deadline too."""
    token = _DEADLINE.set(budget.deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def leaf_budget(max_states: int = 50_000) -> CompileBudget:
    budget = CompileBudget(max_states=max_states, timeout_s=30.0)
    deadline = _DEADLINE.get()
    if deadline is not None and deadline < budget.deadline:
        budget.timeout_s = max(deadline - time.monotonic(), 0.0)
        budget.deadline = deadline
    return budget


def emit_json_char(nfa: NFA, start: int) -> int:
    """One JSON string character as it appears between the quotes."""
    def plain(n: NFA, s: int) -> int:
        return emit_code_point_ranges(n, s, _PLAIN)

    def short_escape(n: NFA, s: int) -> int:
        return emit_alt(n, emit_bytes(n, s, b"\\"), [
            lambda n2, s2, b=b: emit_bytes(n2, s2, bytes([b])) for b in _SHORT_ESCAPES])

    def control_escape(n: NFA, s: int) -> int:
        # \u00XX in lower case for the controls without a short escape (as json.dumps and
        # JSON.stringify write them): one spelling per character, so equal strings are equal
        # texts (unique_items.py compares bounded items by their texts)
        s = emit_bytes(n, s, b"\\u00")
        return emit_alt(n, s, [
            lambda n2, s2: emit_code_point_ranges(n2, emit_bytes(n2, s2, b"0"), _CONTROLS_0),
            lambda n2, s2: emit_code_point_ranges(n2, emit_bytes(n2, s2, b"1"), _HEX_LOWER)])

    return emit_alt(nfa, start, [plain, short_escape, control_escape])


@lru_cache(maxsize=64)
def literals_dfa(texts: tuple[bytes, ...]) -> ByteDFA:
    """A long enum's texts as one minimized DFA, a leaf of its own (CRYENGINE's 2,457
    console variable names: a 31,119-state trie, more than a structure's rule may hold)."""
    budget = leaf_budget()
    nfa = NFA(budget)
    start = nfa.new_state()
    end = emit_alt(nfa, start, [lambda n, s, t=t: emit_bytes(n, s, t) for t in texts])
    return trim_and_minimize(determinize(nfa, start, end, budget))


@lru_cache(maxsize=512)
def regex_leaf(pattern: str) -> ByteDFA:
    return regex_to_dfa(pattern, leaf_budget())


@lru_cache(maxsize=512)
def string_dfa(min_len: int, max_len: int | None, pattern: str | None, fmt: str | None,
               budget_states: int = 50_000) -> ByteDFA:
    """A quoted JSON string honoring length (in characters), pattern (search) and format."""
    budget = leaf_budget(budget_states)
    if pattern is None and fmt is None:
        body = _counted_chars(min_len, max_len, budget)
    else:
        body = _raw_body(min_len, max_len, pattern, fmt, budget)
    nfa = NFA(budget)
    start = nfa.new_state()
    end = emit_bytes(nfa, embed_dfa(nfa, emit_bytes(nfa, start, b'"'), body), b'"')
    return trim_and_minimize(determinize(nfa, start, end, budget))


# A pattern that is one character class repeated, anchored at both ends: ^[a-z0-9_-]{1,255}$,
# ^\d+$, ^\P{C}*$, ^.*$ (a class, an escape class, a Unicode category or the dot; no
# literal, group or lazy quantifier).
_CLASS_RUN = re.compile(r"\^(\[(?:\\.|[^\]\\])+\]|\\[dDwWsS]|\\[pP]\{\w+\}|\.)(\*|\+|\{(\d+)(?:(,)(\d*))?\})\$")
COUNTED_RUN_MIN = 8  # a maximum below this is as cheap as a DFA per length


def counted_class_run(pattern: str | None, lo: int, hi: int | None) -> tuple[ByteDFA, int, int | None] | None:
    """A pattern ``^C{m,n}$`` with lengths lo..hi as a counted leaf: (the quoted ``"C*"``,
    the merged minimum and maximum), or None where the pattern is not one class repeated, the
    count is short (a DFA per length costs little there), or C has no ASCII character (the
    grammar's distances count a needed character as one byte). Exact: every prefix of C* is
    a string of it that may close or take any character of C, so a count alone decides
    where the string may end, as for a plain string."""
    found = None if pattern is None else _CLASS_RUN.fullmatch(pattern)
    if found is None:
        return None
    cls, quant, m, comma, n = found.groups()
    if quant == "*":
        run_lo, run_hi = 0, None
    elif quant == "+":
        run_lo, run_hi = 1, None
    else:
        run_lo = int(m)
        run_hi = run_lo if comma is None else int(n) if n else None
    lo = max(lo, run_lo)
    hi = run_hi if hi is None else hi if run_hi is None else min(hi, run_hi)
    if (hi is None and lo <= 1) or (hi is not None and hi < COUNTED_RUN_MIN):
        return None
    try:
        dfa = string_dfa(0, None, f"^{cls}*$", None)
    except ConstraintError:  # the pattern's own compile says why, with its pointer
        return None
    body = int(dfa.trans[0, ord('"')])
    if body < 0 or not any(int(dfa.trans[body, b]) == body for b in range(0x80) if b != ord('"')):
        return None
    return dfa, lo, hi


def counted_pattern(pattern: str, lo: int, hi: int) -> tuple[ByteDFA, np.ndarray, int, int] | None:
    """A pattern under a maxLength as a counted leaf, or None where that is not exact (then
    the pattern and its length bounds make one product automaton, a state per pattern state
    and length).

    The count kept is the string's committed length, the characters written plus the fewest
    still needed from the state reached (m), less the pattern's own minimum m0: it starts at 0
    and goes up by w + m(t) - m(q) >= 0 on a byte q -> t (w = 1 where the byte starts a
    character), and a completion within maxLength exists exactly where it stays <= hi - m0.
    Exact where (checked here) every byte on a fewest-bytes way to the end keeps it (so the
    grammar's byte distances hold under any count that fits), and either minLength <= m0 (the
    minimum never binds) or no byte raises it by more than one and every fewest-bytes way meets
    a state looping on an ASCII character (a string can grow by one character, one byte, where
    it is: the count's minimum then holds exactly, as for a plain string). A byte may raise it
    by up to _MOST_RISE (https against s3 in ^(https|s3)://: a detour of two). Returns (dfa,
    how much each byte raises the count, its minimum and maximum at closing).
    ``^[\\w /-]+\\.[0-9a-zA-Z]+$`` under maxLength 1024 becomes a 6-state leaf and a count
    instead of a 3,069-state product whose every state near the maximum needs its own walk."""
    found = _pattern_counts(pattern)
    if found is None:
        return None
    dfa, starts, least, pads = found
    if hi < max(lo, least) or (lo > least and not pads):
        return None
    return dfa, starts, max(lo - least, 0), hi - least


@lru_cache(maxsize=512)
def _pattern_counts(pattern: str) -> tuple[ByteDFA, np.ndarray, int, bool] | None:
    try:
        dfa = string_dfa(0, None, pattern, None)
    except ConstraintError:  # the pattern's own compile says why, with its pointer
        return None
    n = dfa.num_states
    src, byte = np.nonzero(dfa.trans[:, :256] >= 0)
    dst = dfa.trans[src, byte].astype(np.int64)
    # a byte starts a character unless it is a quote or a UTF-8 continuation byte
    weight = ((byte != ord('"')) & ((byte < 0x80) | (byte >= 0xC0))).astype(np.int64)
    chars = backward_distances(n, src, dst, weight, dfa.accept)  # fewest characters to the end
    steps = backward_distances(n, src, dst, np.ones_like(weight), dfa.accept)  # fewest bytes
    live = (chars[src] < UNREACHABLE) & (chars[dst] < UNREACHABLE)
    rise = weight + chars[dst] - chars[src]
    if (rise[live] > _MOST_RISE).any() or (rise[live & (steps[dst] == steps[src] - 1)] != 0).any():
        return None
    starts = np.zeros((n, 256), dtype=np.uint8)
    starts[src[live], byte[live]] = rise[live]
    inside = (chars < UNREACHABLE) & ~dfa.accept
    inside[0] = False  # before the opening quote
    pads = starts.max(initial=0) <= 1 and _pads_everywhere(n, src, byte, dst, weight, steps, inside)
    return dfa, starts, int(chars[0]), pads


_MOST_RISE = 4  # a byte raising the count by more (a long detour) keeps the product automaton


def _pads_everywhere(n: int, src: np.ndarray, byte: np.ndarray, dst: np.ndarray, weight: np.ndarray,
                     steps: np.ndarray, inside: np.ndarray) -> bool:
    """Whether from every state inside the quotes each fewest-bytes way (the way a completion
    is built) meets a state that loops on an ASCII character before the closing quote, so a
    string still short of its minimum grows by one byte a character wherever it is."""
    loops = np.zeros(n, dtype=bool)
    loops[src[(src == dst) & (byte < 0x80) & (weight == 1)]] = True
    on_way = (steps[dst] == steps[src] - 1) & (byte != ord('"')) & inside[src] & inside[dst]
    ahead: list[list[int]] = [[] for _ in range(n)]
    for q, t in zip(src[on_way].tolist(), dst[on_way].tolist()):
        ahead[q].append(t)
    ok = loops.copy()
    for q in sorted(np.nonzero(inside & ~loops)[0].tolist(), key=lambda q: steps[q]):
        ok[q] = bool(ahead[q]) and all(ok[t] for t in ahead[q])  # nearer states decided first
    return bool(ok[inside].all())


def _counted_chars(lo: int, hi: int | None, budget: CompileBudget) -> ByteDFA:
    nfa = NFA(budget)
    start = nfa.new_state()
    end = emit_repeat(nfa, start, emit_json_char, lo, hi)
    return trim_and_minimize(determinize(nfa, start, end, budget))


def _raw_body(lo: int, hi: int | None, pattern: str | None, fmt: str | None,
              budget: CompileBudget) -> ByteDFA:
    """Pattern/format strings use unescaped characters only, so the regex sees real text."""
    chars = _plain_chars(pattern)
    if fmt is None and pattern is not None:
        body = _pattern_body(pattern, budget.max_states)
    else:
        body = _plain_run(chars, 0, None, budget)
    if fmt is not None:
        if fmt not in FORMATS:
            raise UnsupportedSchemaError.at("format", "", f"value {fmt!r} is not supported")
        body = trim_and_minimize(product(body, regex_leaf(FORMATS[fmt]), "and", budget))
        if fmt in FORMAT_EXCLUDED:
            body = trim_and_minimize(product(body, regex_leaf(FORMAT_EXCLUDED[fmt]), "diff", budget))
        if pattern is not None:
            body = trim_and_minimize(product(body, search_dfa(pattern, budget), "and", budget))
    if lo == 0 and hi is None:
        return body
    return _within_length(body, chars, lo, hi, budget)


def _plain_chars(pattern: str | None) -> list:
    """The characters a pattern's strings are built from: ASCII only where the pattern uses
    \\D, \\W or \\S."""
    return _PLAIN_ASCII if pattern is not None and re.search(r"\\[DWS]", pattern) else _PLAIN


@lru_cache(maxsize=512)
def _pattern_body(pattern: str, budget_states: int) -> ByteDFA:
    """The unescaped strings ``pattern`` matches (searched, as JSON Schema reads it), shared
    by every length bound it comes with: AWS's tag pattern over \\p{L}, \\p{Z} and \\p{N}
    is a key's under maxLength 128 and a value's under 256 (~0.4 s to parse each time)."""
    budget = leaf_budget(budget_states)
    body = _plain_run(_plain_chars(pattern), 0, None, budget)
    return trim_and_minimize(product(body, search_dfa(pattern, budget), "and", budget))


def _plain_run(chars, lo: int, hi: int | None, budget: CompileBudget) -> ByteDFA:
    nfa = NFA(budget)
    start = nfa.new_state()
    end = emit_repeat(nfa, start, lambda n, s: emit_code_point_ranges(n, s, chars), lo, hi)
    return trim_and_minimize(determinize(nfa, start, end, budget))


_EXACT_PRODUCT_STATES = 4_000  # a pattern times its length bounds, built pair by pair (a larger leaf costs its walks)
_LONGEST_EXACT = 4_096  # maxLength past which the count is not built (its run alone is large)


def _counted_run(chars: ByteDFA, lo: int, hi: int | None) -> ByteDFA:
    """``chars`` (one character, looped through state 0) repeated lo..hi times (hi None: at
    least lo), built directly: state n * k + q is state q of ``chars`` after starting n
    characters; without a maximum the count stops at lo."""
    k = chars.num_states
    top = lo if hi is None else hi
    step = chars.trans[:, :256].astype(np.int64)
    trans = np.full(((top + 1) * k, 256), DEAD, dtype=np.int32)
    for n in range(top + 1):
        nxt = np.where(step >= 0, step + n * k, DEAD)
        after = n + 1 if n < top else (n if hi is None else None)
        nxt[0] = DEAD if after is None else np.where(step[0] >= 0, step[0] + after * k, DEAD)
        trans[n * k:(n + 1) * k] = nxt
    accept = np.zeros((top + 1) * k, dtype=bool)
    accept[np.arange(lo, top + 1) * k] = True
    return ByteDFA(trans, accept)


def _within_length(lang: ByteDFA, chars, lo: int, hi: int | None,
                   budget: CompileBudget) -> ByteDFA:
    """``lang`` cut to lo..hi characters: its product with a character count, built over the
    (state, count) pairs reachable only (a pattern's states are mostly reached at few counts:
    an ARN's fixed parts) and kept where it has at most _EXACT_PRODUCT_STATES states. Where a
    long maxLength over a pattern whose loops reach every count outgrows that, a shorter
    maximum: the one a full product of that size fits, or where the pattern has no string so
    short, the longest that fits (bisection). A valid subset, every string still within
    lo..hi; none holding a string of the pattern is a GrammarTooComplexError."""
    plain = _plain_run(chars, 0, None, budget)

    def bounded(top: int | None) -> ByteDFA | None:  # None: too large
        try:
            out = trim_and_minimize(product(lang, _counted_run(plain, lo, top), "and",
                                            leaf_budget(4 * _EXACT_PRODUCT_STATES)), minimize=False)
        except GrammarTooComplexError:
            return None
        return out if out.num_states <= _EXACT_PRODUCT_STATES else None

    if hi is None or hi <= _LONGEST_EXACT:
        exact = bounded(hi) if lo <= _LONGEST_EXACT else None
        if exact is not None:
            return exact
        if hi is None:
            raise GrammarTooComplexError(f"a pattern of {lang.num_states} states with minLength {lo} "
                                         f"exceeds {_EXACT_PRODUCT_STATES} states")
    # The maximum a full product of the budget's size fits; where that leaves no string of
    # the pattern (its strings are longer), bisect up to the longest maximum that fits.
    fits = max(_EXACT_PRODUCT_STATES // (lang.num_states + 1), max(lo, 1))
    best = bounded(fits) if fits < min(hi, _LONGEST_EXACT) else None
    low, high = fits + 1, min(hi - 1, _LONGEST_EXACT)  # hi itself was tried above where it could be
    while (best is None or best.is_empty()) and low <= high:
        mid = (low + high) // 2
        found = bounded(mid)
        if found is None:
            high = mid - 1
        else:
            best, low = found, mid + 1
    if best is None or best.is_empty():
        raise GrammarTooComplexError(f"a pattern of {lang.num_states} states within {lo}..{hi} characters "
                                     f"exceeds {_EXACT_PRODUCT_STATES} states")
    return best


@lru_cache(maxsize=256)
def key_dfa(excluded: tuple[str, ...], matching: str | None = None,
            not_matching: tuple[str, ...] = ()) -> ByteDFA:
    """Quoted property names other than `excluded` (declared properties are never extras).

    With patterns (patternProperties), names whose text `matching` searches and none of
    `not_matching` does. Those names are spelled without escapes, so the text a pattern sees
    is the bytes between the quotes and the pattern test is exact.
    """
    budget = leaf_budget()
    if matching is None and not not_matching:
        strings = string_dfa(0, None, None, None)
    else:
        strings = string_dfa(0, None, "" if matching is None else matching, None)
        for pattern in not_matching:
            strings = trim_and_minimize(product(strings, string_dfa(0, None, pattern, None), "diff", budget))
    if not excluded:
        return strings
    nfa = NFA(budget)
    start = nfa.new_state()
    end = emit_alt(nfa, start, [lambda n, s, k=k: emit_bytes(n, s, json_string(k))
                                for k in excluded])
    names = determinize(nfa, start, end, budget)
    return trim_and_minimize(product(strings, names, "diff", budget))


@lru_cache(maxsize=256)
def pattern_matches(pattern: str, text: str) -> bool:
    """Whether JSON Schema `pattern` (a search) matches `text`, by the automaton we generate with."""
    return search_dfa(pattern, leaf_budget()).matches(text.encode())


@lru_cache(maxsize=8192)
def json_string(text: str) -> bytes:
    """``text`` as a JSON string literal (UTF-8, no \\u escapes but the required ones).
    Cached: property names and enum strings recur across the schemas of a process."""
    return json.dumps(text, ensure_ascii=False).encode()
