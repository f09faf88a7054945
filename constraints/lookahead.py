"""Lookaheads anywhere in a regex, exactly (regex.py reads those at the start by itself).

``X(?=A)Y`` matches a text ``x y`` where ``y`` — the rest of the text after the lookahead:
``Y`` and all that follows it in the pattern, past the groups it sits in — begins with a
match of ``A``; ``(?!A)`` where it begins with none. Regular languages are closed under
intersection and difference, so each lookahead becomes a product of two DFAs: the rest
after it, and ``A`` followed by any text. A pattern is read as a sequence of parts matched
to the end of the text, left to right; at the first part that holds a lookahead, a group
splits into its alternatives (each with the rest after the group) and a lookahead takes the
product with the rest. CloudFormation writes such patterns for domain names:
``^(\\*\\.)?(?![-.*])[^*]+\\.(\\*|(?!.*--)(?=.*[a-zA-Z])[^*]+[^*-])$``.

Refused: lookbehinds, a lookahead under a quantifier, and ``^`` inside one that is not at
the start. ``$`` at the end of a lookahead (``(?=.*x$)``) is the end of the text: the
pattern text marks it with END_CHAR (regex.parse_regex) before interegular, which reads no
anchors, parses it.
"""

from __future__ import annotations

from .budget import CompileBudget
from .errors import InvalidConstraintError
from .fsm import ByteDFA, determinize, embed_dfa, product, trim_and_minimize
from .nfa import NFA, emit_code_point_ranges, emit_repeat

END_CHAR = "\udfff"  # a lone surrogate: never a character of JSON text
ANY = "any text"  # a sequence item: the text after a lookahead's own match


def has_lookaround(node, end: bool = False) -> bool:
    """Whether a lookahead or lookbehind lies in ``node`` (with ``end``: or an END_CHAR)."""
    kind = type(node).__name__
    if kind == "_NonCapturing" or end and _is_end(node):
        return True
    if kind == "Pattern":
        return any(has_lookaround(o, end) for o in node.options)
    if kind == "_Concatenation":
        return any(has_lookaround(p, end) for p in node.parts)
    if kind == "_Repeated":
        return has_lookaround(node.base, end)
    return False


def lookahead_dfa(items: list, budget: CompileBudget, emit_regex, memo: dict | None = None) -> ByteDFA:
    """The texts that ``items`` match from start to end: (node, flags) pairs of interegular
    parts in order, and ANY for any text. ``emit_regex`` emits a part with no lookahead.
    Each sequence is built once (``memo``, by its parts): the alternatives of a group all
    share the rest after it, which would otherwise be built again for each of them, and for
    each alternative of every group before it."""
    memo = {} if memo is None else memo
    key = tuple(x if x is ANY else (id(x[0]), x[1]) for x in items)
    found = memo.get(key)
    if found is None:
        found = memo[key] = _sequence_dfa(items, budget, emit_regex, memo)
    return found


def _sequence_dfa(items: list, budget: CompileBudget, emit_regex, memo: dict) -> ByteDFA:
    for i, item in enumerate(items):
        if item is ANY:
            continue
        node, flags = item
        kind = type(node).__name__
        if _is_end(node):  # the end of the text: nothing but empty text may follow
            if any(x is not ANY for x in items[i + 1:]):
                return _then(items[:i], None, budget, emit_regex)
            return _then(items[:i], _EMPTY, budget, emit_regex)
        if not has_lookaround(node, end=True):
            continue
        rest = items[i + 1:]
        if kind == "_Concatenation":
            return lookahead_dfa(items[:i] + [(p, flags) for p in node.parts] + rest, budget, emit_regex, memo)
        if kind == "Pattern":
            inner = (flags | node.added_flags) & ~node.removed_flags
            options = [lookahead_dfa([(o, inner), *rest], budget, emit_regex, memo) for o in node.options]
            return _then(items[:i], _union(options, budget), budget, emit_regex)
        if kind == "_Repeated":
            raise InvalidConstraintError("a lookahead under a quantifier is not supported in regexes")
        if node.backwards:
            raise InvalidConstraintError("lookbehind assertions are not supported in regexes")
        after = lookahead_dfa(rest, budget, emit_regex, memo)
        look = lookahead_dfa([(node.inner, flags), ANY], budget, emit_regex, memo)
        both = trim_and_minimize(product(after, look, "diff" if node.negate else "and", budget))
        return _then(items[:i], both, budget, emit_regex)
    return _then(items, _EMPTY, budget, emit_regex)


_EMPTY = "empty text"


def _is_end(node) -> bool:
    return type(node).__name__ == "_CharGroup" and not node.negated and node.chars == frozenset(END_CHAR)


def _then(items: list, tail, budget: CompileBudget, emit_regex) -> ByteDFA:
    """``items`` (no lookahead among them) followed by the DFA ``tail`` (_EMPTY: nothing;
    None: no text at all)."""
    nfa = NFA(budget)
    s = start = nfa.new_state()
    for item in items:
        if item is ANY:
            s = emit_repeat(nfa, s, lambda n, x: emit_code_point_ranges(n, x, [(0, 0x10FFFF)]), 0, None)
        else:
            s = emit_regex(nfa, s, item[0], item[1])
    if tail is None:
        s = nfa.new_state()  # unreachable: the language is empty
    elif tail is not _EMPTY:
        s = embed_dfa(nfa, s, tail)
    return trim_and_minimize(determinize(nfa, start, s, budget))


def _union(dfas: list[ByteDFA], budget: CompileBudget) -> ByteDFA:
    nfa = NFA(budget)
    start = nfa.new_state()
    end = nfa.new_state()
    for d in dfas:
        nfa.add_eps(embed_dfa(nfa, start, d), end)
    return trim_and_minimize(determinize(nfa, start, end, budget))

