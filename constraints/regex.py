"""Regex text -> byte-level DFA: interegular parses, we emit UTF-8 byte NFAs and determinize.

We walk interegular's pattern tree ourselves instead of calling its `to_fsm`, so that the NFA
and DFA sizes and the compile time stay under our budget (its own construction cannot be
interrupted on a pathological pattern).
"""

from __future__ import annotations

from functools import partial

import interegular.patterns as ip

from .budget import CompileBudget
from .errors import InvalidConstraintError
from .fsm import ByteDFA, determinize, trim_and_minimize
from .nfa import NFA, emit_alt, emit_code_point_ranges, emit_nothing, emit_repeat, emit_seq
from .utf8 import complement_ranges, ranges_of_chars

_I = ip.REFlags.CASE_INSENSITIVE
_S = ip.REFlags.SINGLE_LINE


def parse_regex(pattern: str) -> ip.Pattern:
    """Parse with interegular; a whole-string anchor pair ^...$ is implied and stripped."""
    body = pattern
    if body.startswith("^"):
        body = body[1:]
    if body.endswith("$") and not _escaped_at(body, len(body) - 1):
        body = body[:-1]
    try:
        return ip.parse_pattern(body)
    except (ip.Unsupported, ip.InvalidSyntax, ValueError, IndexError) as e:
        raise InvalidConstraintError(f"unsupported or invalid regex {pattern!r}: {e}") from e


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
    chars = set(node.chars)
    if flags & _I:
        chars |= {c.lower() for c in chars} | {c.upper() for c in chars}
        chars = {c for c in chars if len(c) == 1}
    ranges = ranges_of_chars(chars)
    return complement_ranges(ranges) if node.negated else ranges


def regex_to_dfa(pattern: str, budget: CompileBudget) -> ByteDFA:
    """Full-match byte DFA for a regex."""
    nfa = NFA(budget)
    start = nfa.new_state()
    end = emit_regex(nfa, start, parse_regex(pattern))
    return trim_and_minimize(determinize(nfa, start, end, budget))
