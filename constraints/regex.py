"""Regex text -> byte-level DFA: interegular parses, we emit UTF-8 byte NFAs and determinize.

We walk interegular's pattern tree ourselves instead of calling its `to_fsm`, so that the NFA
and DFA sizes and the compile time stay under our budget (its own construction cannot be
interrupted on a pathological pattern).
"""

from __future__ import annotations

import re
from functools import lru_cache, partial

import interegular.patterns as ip
import numpy as np

from .budget import CompileBudget
from .errors import InvalidConstraintError
from .fsm import ByteDFA, determinize, embed_dfa, product, trim_and_minimize
from .lookahead import (
    ANY,
    BOUNDARY_CHAR,
    END_CHAR,
    NOT_BOUNDARY_CHAR,
    emit_any_text,
    has_lookaround,
    is_boundary,
    lookahead_dfa,
)
from .nfa import NFA, emit_alt, emit_code_point_ranges, emit_nothing, emit_repeat, emit_seq
from .utf8 import complement_ranges, ranges_of_chars, ranges_of_points

_I = ip.REFlags.CASE_INSENSITIVE
_S = ip.REFlags.SINGLE_LINE


def parse_regex(pattern: str) -> ip.Pattern:
    """Parse with interegular; a whole-string anchor pair ^...$ is implied and stripped."""
    body = pattern
    if body.startswith("^"):
        body = body[1:]
    if body.endswith("$") and not _escaped_at(body, len(body) - 1):
        body = body[:-1]
    if "(?" in body:
        body = _mark_lookahead_ends(_plain_groups(body))
    if "\\b" in body or "\\B" in body:
        body = _mark_boundaries(body)
    try:
        return ip.parse_pattern(_unicode_escapes(body))
    except (ip.Unsupported, ip.InvalidSyntax, ValueError, IndexError) as e:
        raise InvalidConstraintError(f"unsupported or invalid regex {pattern!r}: {e}") from e


_GROUP_NAME = re.compile(r"\?P?<[A-Za-z_][A-Za-z0-9_]*>")


def _plain_groups(body: str) -> str:
    """``body`` with its named groups, ECMA-262's ``(?<name>...)`` and Python's
    ``(?P<name>...)``, as plain ``(?:...)`` (the name changes nothing a match accepts; only
    Python's spelling reads in interegular). Escapes and classes are skipped (_scan), so
    ``\\(?<a>`` and ``[(?<a>]`` stay, and lookbehinds (``(?<=``, ``(?<!``) are no names."""
    out, last = [], 0
    for i, c, _ in _scan(body):
        name = _GROUP_NAME.match(body, i + 1) if c == "(" else None
        if name:
            out += [body[last:i + 1], "?:"]
            last = name.end()
    return "".join(out) + body[last:]


# ECMA-262 (JSON Schema's regex dialect) escapes interegular does not read.
_PROPERTY = re.compile(r"\\([pP])\{(?:(?:General_Category|gc)=)?([A-Za-z_]+)\}")
_CODE_POINT = re.compile(r"\\u(?:\{([0-9A-Fa-f]{1,6})\}|([0-9A-Fa-f]{4}))")
_SURROGATE_UPPER = re.compile(r"-\\u[dD][89a-fA-F][0-9a-fA-F]{2}")  # "-\uDBFF" closing a range
_CATEGORY_NAMES = {"Letter": "L", "Cased_Letter": "LC", "Uppercase_Letter": "Lu", "Lowercase_Letter": "Ll",
                   "Titlecase_Letter": "Lt", "Modifier_Letter": "Lm", "Other_Letter": "Lo", "Mark": "M",
                   "Nonspacing_Mark": "Mn", "Spacing_Mark": "Mc", "Enclosing_Mark": "Me", "Number": "N",
                   "Decimal_Number": "Nd", "digit": "Nd", "Letter_Number": "Nl", "Other_Number": "No",
                   "Punctuation": "P", "punct": "P", "Connector_Punctuation": "Pc", "Dash_Punctuation": "Pd",
                   "Open_Punctuation": "Ps", "Close_Punctuation": "Pe", "Initial_Punctuation": "Pi",
                   "Final_Punctuation": "Pf", "Other_Punctuation": "Po", "Symbol": "S", "Math_Symbol": "Sm",
                   "Currency_Symbol": "Sc", "Modifier_Symbol": "Sk", "Other_Symbol": "So", "Separator": "Z",
                   "Space_Separator": "Zs", "Line_Separator": "Zl", "Paragraph_Separator": "Zp", "Other": "C",
                   "Control": "Cc", "cntrl": "Cc", "Format": "Cf", "Private_Use": "Co", "Unassigned": "Cn"}


def _unicode_escapes(body: str) -> str:
    """``body`` with \\uXXXX, \\u{X..} (and surrogate pairs) as the characters they name,
    and \\p{..} / \\P{..} of a Unicode general category (Lu, L, Letter, gc=Cc, ...) as
    a class of its ranges; escapes are read left to right, so an escaped backslash stays one."""
    if "\\u" not in body and "\\p" not in body and "\\P" not in body:
        return body
    out, i, depth = [], 0, 0  # depth: inside a [...] class
    while i < len(body):
        c = body[i]
        if c != "\\":
            depth = 1 if c == "[" else 0 if c == "]" else depth
            out.append(c)
            i += 1
            continue
        code = _CODE_POINT.match(body, i)
        prop = _PROPERTY.match(body, i)
        if code:
            point = int(code.group(1) or code.group(2), 16)
            i = code.end()
            low = _CODE_POINT.match(body, i)
            if 0xD800 <= point < 0xDC00 and low and low.group(2) and 0xDC00 <= int(low.group(2), 16) < 0xE000:
                point = 0x10000 + ((point - 0xD800) << 10) + int(low.group(2), 16) - 0xDC00
                i = low.end()
            if 0xD800 <= point < 0xE000 and depth:
                # A lone UTF-16 code unit in a class (JavaScript's way to list astral
                # characters, \uD83C-\uDBFF\uDC00-\uDFFF): no character of a Unicode string
                # is one, so it and a surrogate range it starts add nothing (a subset where a
                # validator reads code units).
                upper = _SURROGATE_UPPER.match(body, i)
                i = upper.end() if upper else i
                continue
            if point > 0x10FFFF or 0xD800 <= point < 0xE000:
                raise ValueError(f"\\u escape of {point:#x} names no character")
            out.append(_class_char(point))
        elif prop:
            ranges = _category_ranges(_CATEGORY_NAMES.get(prop.group(2), prop.group(2)))
            negated = prop.group(1) == "P"
            if negated and depth:
                raise ValueError(f"{prop.group(0)} inside a class is not supported")
            if negated and sum(b - a + 1 for a, b in ranges) > _CHARACTERS // 2:
                # interegular lists a class's every character: \P{C} as the ~150k characters
                # outside C, not as [^...] over C's ~970k (0.4 s to parse, and as long again
                # to turn back into ranges)
                ranges, negated = _outside(ranges), False
            text = "".join(_class_char(a) + ("" if a == b else "-" + _class_char(b)) for a, b in ranges)
            out.append(text if depth else f"[{'^' if negated else ''}{text}]")
            i = prop.end()
        else:
            out.append(body[i:i + 2])
            i += 2
    return "".join(out)


_CHARACTERS = 0x110000 - 0x800  # code points that are characters (no surrogates)


def _outside(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """The characters (surrogates left out) in none of the sorted, merged ``ranges``."""
    out = []
    for a, b in complement_ranges(list(ranges)):
        out += [(a, b)] if b < 0xD800 or a > 0xDFFF else [(x, y) for x, y in ((a, 0xD7FF), (0xE000, b)) if x <= y]
    return tuple(out)


def _class_char(point: int) -> str:
    """A code point as regex text, inside or outside a class (escaped where it could be syntax)."""
    if point < 0x20 or 0x7F <= point < 0x100:
        return f"\\x{point:02x}"
    ch = chr(point)
    return "\\" + ch if ch in "\\]^-[.*+?(){}|$/" else ch


# ECMA-262's binary properties that name a fixed range (not a category)
_BINARY = {"ASCII": ((0, 0x7F),), "Any": ((0, 0xD7FF), (0xE000, 0x10FFFF))}


def _category_ranges(category: str) -> tuple[tuple[int, int], ...]:
    """The code point ranges of a Unicode general category ("Lu") or its major class ("L";
    "LC": Lu, Ll, Lt), by this Python's unicodedata; surrogates left out."""
    if category in _BINARY:
        return _BINARY[category]
    wanted = {"LC": ("Lu", "Ll", "Lt")}.get(category, (category,))
    table = _categories()
    if not all(w in table for w in wanted):
        raise ValueError(f"unknown Unicode property {category!r} (general categories only)")
    return tuple(sorted(r for w in wanted for r in table[w]))


@lru_cache(maxsize=1)
def _categories() -> dict[str, tuple[tuple[int, int], ...]]:
    """Every general category's ranges, and each major class's (L, M, N, ...): each code
    point's category read once, then each category's runs found with numpy (~0.3 s, once a
    process; a Python loop over the runs took ~0.4)."""
    import unicodedata

    points = np.concatenate([np.arange(0xD800), np.arange(0xE000, 0x110000)])  # no surrogates
    names = list(map(unicodedata.category, map(chr, points.tolist())))
    kinds = sorted(set(names))
    codes = np.fromiter(map({k: i for i, k in enumerate(kinds)}.__getitem__, names),
                        dtype=np.int8, count=len(names))

    # a run breaks where the points jump (a gap, or the surrogates)
    out = {k: tuple(ranges_of_points(points[codes == i])) for i, k in enumerate(kinds)}
    for major in {k[0] for k in kinds}:
        members = [i for i, k in enumerate(kinds) if k[0] == major]
        out[major] = tuple(ranges_of_points(points[np.isin(codes, members)]))
    return out


def _escaped_at(text: str, i: int) -> bool:
    n = 0
    while i - 1 - n >= 0 and text[i - 1 - n] == "\\":
        n += 1
    return n % 2 == 1


def emit_regex(nfa: NFA, start: int, node, flags: ip.REFlags = ip.REFlags(0)) -> int:
    """Emit an interegular pattern node as a UTF-8 byte NFA fragment."""
    kind = type(node).__name__
    if kind == "Pattern":
        flags = (flags | node.added_flags) & ~node.removed_flags
        return emit_alt(nfa, start, [partial(emit_regex, node=o, flags=flags) for o in node.options])
    if kind == "_Concatenation":
        parts = [partial(emit_regex, node=p, flags=flags) for p in node.parts]
        return emit_seq(nfa, start, parts)
    if kind == "_Repeated":
        item = partial(emit_regex, node=node.base, flags=flags)
        return emit_repeat(nfa, start, item, node.min, node.max)
    if kind == "_CharGroup":
        if is_boundary(node):  # read only in a sequence of parts (lookahead.py)
            raise InvalidConstraintError("a word boundary (\\b, \\B) is supported only where the "
                                         "pattern's parts around it are read in sequence")
        return emit_code_point_ranges(nfa, start, _char_group_ranges(node, flags))
    if kind == "__DotCls":
        dot = set() if flags & _S else {"\n"}
        return emit_code_point_ranges(nfa, start, complement_ranges(ranges_of_chars(dot)))
    if kind == "__EmptyCls":
        return start
    if kind == "_NonCapturing":
        raise InvalidConstraintError("lookahead/lookbehind assertions are not supported in regexes")
    return emit_nothing(nfa, start)


def _char_group_ranges(node, flags: ip.REFlags) -> list[tuple[int, int]]:
    return list(_group_ranges(frozenset(node.chars), bool(node.negated), bool(flags & _I)))


@lru_cache(maxsize=256)
def _group_ranges(chars: frozenset[str], negated: bool, ignore_case: bool) -> tuple[tuple[int, int], ...]:
    # Format regexes repeat their large Unicode classes (an IRI's ucschar, tens of thousands
    # of characters each): their ranges are worked out once.
    if ignore_case:
        chars |= {c.lower() for c in chars} | {c.upper() for c in chars}
        chars = {c for c in chars if len(c) == 1}
    ranges = ranges_of_chars(chars)
    return tuple(complement_ranges(ranges) if negated else ranges)


def python_anchors(pattern: str) -> str:
    """``\\A`` at the start and ``\\Z`` at the end (Python's string anchors, which schemas
    written for Python validators use: AWS's) as ``^`` and ``$``."""
    if pattern.startswith("\\A"):
        pattern = "^" + pattern[2:]
    if pattern.endswith("\\Z$") and not _escaped_at(pattern, len(pattern) - 3):
        pattern = pattern[:-3] + "$"
    elif pattern.endswith("\\Z") and not _escaped_at(pattern, len(pattern) - 2):
        pattern = pattern[:-2] + "$"
    return _inner_anchors(pattern)


_OPENS = re.compile(r"\^((?:\((?:\?:)?)+)\^")
_CLOSES = re.compile(r"\$(\)+)\$\Z")


def _inner_anchors(pattern: str) -> str:
    """``^(^a)$`` and ``^(a$)$`` (AWS): an anchor inside the groups that open right after the
    leading ``^`` (close right before the trailing ``$``) repeats it: dropped. A pattern that
    is one group anchored inside, ``(^a$)``, is anchored outside first."""
    pattern = _anchored_outside(pattern)
    pattern = _OPENS.sub(r"^\1", pattern, count=1) if pattern.startswith("^(") else pattern
    found = _CLOSES.search(pattern)
    if found and not _escaped_at(pattern, found.start()):
        pattern = pattern[:found.start()] + found.group(1) + "$"
    return pattern


def _anchored_outside(alternative: str) -> str:
    """``(^a$)`` as ``^(a)$`` (and ``(^a)``, ``(a$)`` alike): one group, the whole pattern or
    one of its top-level alternatives, anchored inside (Unreal's ``(^([0-9]+)\\.([0-9]+)$)|(^\\{...\\}$)|^$``) is
    anchored outside, where ``^`` and ``$`` are read."""
    if not alternative.startswith("(") or alternative.startswith(("(?=", "(?!")) or _group_end(alternative) != len(alternative):
        return alternative
    head = 3 if alternative.startswith("(?:") else 1
    inner = alternative[head:-1]
    start = inner.startswith("^")
    end = inner.endswith("$") and not _escaped_at(inner, len(inner) - 1)
    if not (start or end) or len(_top_level_alternatives(inner)) != 1:
        return alternative
    return "^" * start + alternative[:head] + inner[start:len(inner) - end] + ")" + "$" * end


def regex_to_dfa(pattern: str, budget: CompileBudget) -> ByteDFA:
    """Full-match byte DFA for a regex. Lookaheads at the very start, ``(?!A)B`` or
    ``(?=A)B`` (as Pydantic writes Decimal patterns), become a difference or an intersection
    with the strings that begin with a match of A."""
    pattern = python_anchors(pattern)
    looks, rest = split_leading_lookaheads(pattern[1:] if pattern.startswith("^") else pattern)
    node = parse_regex(rest)
    if has_lookaround(node):  # lookaheads past the start (lookahead.py)
        return apply_lookaheads(lookahead_dfa([(node, ip.REFlags(0))], budget, emit_regex), looks, budget)
    nfa = NFA(budget)
    start = nfa.new_state()
    end = emit_regex(nfa, start, node)
    return apply_lookaheads(trim_and_minimize(determinize(nfa, start, end, budget)), looks, budget)


def split_leading_lookaheads(body: str) -> tuple[list[tuple[bool, str]], str]:
    """``(?=A)(?!B)C`` -> ([(True, "A"), (False, "B")], "C"): (positive, pattern) pairs."""
    looks = []
    while body.startswith(("(?=", "(?!")):
        end = _group_end(body)
        looks.append((body[2] == "=", body[3 : end - 1]))
        body = body[end:]
    return looks, body


def _group_end(text: str) -> int:
    """Index just past the group that opens at text[0], skipping escapes and classes."""
    for i, c, depth in _scan(text):
        if c == ")" and depth == 0:
            return i + 1
    raise InvalidConstraintError(f"unbalanced parenthesis in regex {text!r}")


def _mark_lookahead_ends(body: str) -> str:
    """``body`` with each ``$`` inside a lookahead group (outside classes and escapes) as
    END_CHAR: the end of the text there (lookahead.py)."""
    ends, looks = [], []  # the depths the open lookahead groups opened at
    for i, c, depth in _scan(body):
        if c == "(" and body.startswith(("(?=", "(?!"), i):
            looks.append(depth)
        elif c == ")" and looks and looks[-1] == depth + 1:
            looks.pop()
        elif c == "$" and looks:
            ends.append(i)
    for i in ends:
        body = body[:i] + END_CHAR + body[i + 1:]
    return body


def _mark_boundaries(body: str) -> str:
    """``body`` with each ``\\b`` and ``\\B`` outside classes as BOUNDARY_CHAR and
    NOT_BOUNDARY_CHAR (lookahead.py); ``[\\b]`` (a backspace) and ``\\\\b`` stay."""
    out, i, in_class = [], 0, False
    while i < len(body):
        c = body[i]
        if c == "\\" and not in_class and body[i + 1:i + 2] in ("b", "B"):
            out.append(BOUNDARY_CHAR if body[i + 1] == "b" else NOT_BOUNDARY_CHAR)
            i += 2
            continue
        if c == "\\":
            out.append(body[i:i + 2])
            i += 2
            continue
        in_class = c != "]" if in_class else c == "["
        out.append(c)
        i += 1
    return "".join(out)


def _scan(text: str):
    """(index, char, group depth after it) of the characters outside escapes and classes."""
    depth, i, in_class = 0, 0, False
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        else:
            depth += (c == "(") - (c == ")")
            yield i, c, depth
        i += 1


def apply_lookaheads(dfa: ByteDFA, looks: list[tuple[bool, str]], budget: CompileBudget) -> ByteDFA:
    """Keep the strings of ``dfa`` that begin with a match of each positive lookahead and
    with none of each negative one (a lookahead ending in ``$`` must match the whole string)."""
    for positive, inner in looks:
        dfa = trim_and_minimize(product(dfa, prefix_dfa(inner, budget), "and" if positive else "diff", budget))
    return dfa


def prefix_dfa(pattern: str, budget: CompileBudget) -> ByteDFA:
    """Strings that begin with a match of ``pattern`` (all of the string if it ends in ``$``)."""
    body = pattern[1:] if pattern.startswith("^") else pattern
    looks, body = split_leading_lookaheads(body)
    end = "$" if body.endswith("$") and not _escaped_at(body, len(body) - 1) else ""
    body = body[: len(body) - len(end)]
    return apply_lookaheads(search_dfa(f"^({body}){end}", budget), looks, budget)


def search_dfa(pattern: str, budget: CompileBudget) -> ByteDFA:
    """Strings in which ``pattern`` finds a match (JSON Schema's `pattern` is a search, not a
    full match): an unanchored start or end is padded with any text; lookaheads right after
    ``^`` test the string from its start."""
    pattern = python_anchors(pattern)
    alternatives = [_anchor_first(_anchored_outside(a)) for a in _top_level_alternatives(pattern)]
    pattern = "|".join(alternatives)
    if pattern.startswith(("(?=", "(?!")) and len(alternatives) == 1:
        return _unanchored_lookaheads(pattern, budget)
    if len(alternatives) > 1 and any(a.startswith(("^(?=", "^(?!")) for a in alternatives):
        # A lookahead belongs to its own alternative (^(?!x)a|b is (^(?!x)a)|b): each
        # alternative's automaton on its own, then their union.
        parts = [search_dfa(a, budget) for a in alternatives]
        nfa = NFA(budget)
        start = nfa.new_state()
        end = emit_alt(nfa, start, [partial(embed_dfa, dfa=d) for d in parts])
        return trim_and_minimize(determinize(nfa, start, end, budget))
    looks: list = []
    if pattern.startswith("^"):
        looks, rest = split_leading_lookaheads(pattern[1:])
        pattern = "^" + rest
    alternatives = _top_level_alternatives(pattern)
    if looks and len(alternatives) > 1:
        raise InvalidConstraintError(f"a lookahead before an alternation: {pattern!r}")
    nfa = NFA(budget)
    start = nfa.new_state()
    # Each top-level alternative is anchored or padded on its own (^a$|b: "a", or any text
    # containing b).
    absorbing: list[int] = []
    end = emit_alt(nfa, start, [partial(_emit_search, alternative=a, absorbing=absorbing)
                                for a in alternatives])
    dfa = determinize(nfa, start, end, budget, absorbing=frozenset(absorbing))
    return apply_lookaheads(trim_and_minimize(dfa), looks, budget)


def _unanchored_lookaheads(pattern: str, budget: CompileBudget) -> ByteDFA:
    """``(?!^A)B`` searched anywhere (AWS's resource names): lookaheads that begin with ``^``
    can hold only where the search starts at the string's start, so the matches are those
    of ``^(?!^A)B`` and, past the first character, those of B alone (where a negative one
    always holds and a positive one never does). Others are tested where the match starts
    (lookahead.py)."""
    looks, rest = split_leading_lookaheads(pattern)
    if not all(inner.startswith("^") for _, inner in looks):  # tested wherever a match starts
        nfa = NFA(budget)
        start = nfa.new_state()
        return trim_and_minimize(determinize(nfa, start, _emit_search(nfa, start, pattern, []), budget))
    if any(positive for positive, _ in looks):
        return search_dfa("^" + pattern, budget)
    return search_dfa(f"^{pattern}|^[\\s\\S]+(?:{rest})", budget)  # each alternative on its own


def _emit_search(nfa: NFA, start: int, alternative: str, absorbing: list[int]) -> int:
    """One alternative, padded with any text where it is unanchored; the state right after
    the match of an alternative with an unanchored end goes on ``absorbing``."""
    anchored_start = alternative.startswith("^")
    anchored_end = alternative.endswith("$") and not _escaped_at(alternative, len(alternative) - 1)
    body = alternative[int(anchored_start): len(alternative) - int(anchored_end)]
    node = parse_regex(f"^{body}$")
    if has_lookaround(node):  # a lookahead sees the text after the match too: one DFA
        items = [*([] if anchored_start else [ANY]), (node, ip.REFlags(0)), *([] if anchored_end else [ANY])]
        return embed_dfa(nfa, start, lookahead_dfa(items, nfa.budget, emit_regex))
    s = emit_regex(nfa, start if anchored_start else emit_any_text(nfa, start), node)
    if anchored_end:
        return s
    absorbing.append(s)
    return emit_any_text(nfa, s)


def _anchor_first(alternative: str) -> str:
    """``(?=A)(?!B)^C`` as ``^(?=A)(?!B)C`` (CloudFormation): a ``^`` right after lookaheads
    holds where they were tested, at the start."""
    looks, rest = split_leading_lookaheads(alternative)
    if not looks or not rest.startswith("^"):
        return alternative
    return "^" + "".join(f"(?{'=' if positive else '!'}{inner})" for positive, inner in looks) + rest[1:]


def _top_level_alternatives(text: str) -> list[str]:
    cuts = [i for i, c, depth in _scan(text) if c == "|" and depth == 0]
    bounds = [-1, *cuts, len(text)]
    return [text[a + 1:b] for a, b in zip(bounds, bounds[1:])]
