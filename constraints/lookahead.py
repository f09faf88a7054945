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

Word boundaries. ``X\\bY`` holds where the character before and the one after differ in
being word characters (ECMA-262's ``\\w``: ASCII letters, digits, ``_``; the text's start and
end count as non-word): a union of two concatenations, the texts ``X`` matches ending in a
word character followed by those ``Y`` (with all that follows) matches not beginning with
one, and the other way round. ``\\B`` pairs them alike instead. The pattern text marks them
with BOUNDARY_CHAR and NOT_BOUNDARY_CHAR (regex.parse_regex), which interegular does not read.
Expo's Android package names: ``^(?!.*\\bnative\\b)[a-zA-Z][a-zA-Z0-9_]*(\\.[a-zA-Z]...)+$``.

Refused: lookbehinds, a lookahead or word boundary under a quantifier, and ``^`` inside one
that is not at the start. ``$`` at the end of a lookahead (``(?=.*x$)``) is the end of the
text: the pattern text marks it with END_CHAR (regex.parse_regex) before interegular, which
reads no anchors, parses it.
"""

from __future__ import annotations

from .budget import CompileBudget
from .errors import InvalidConstraintError
from .fsm import ByteDFA, determinize, embed_dfa, product, trim_and_minimize
from .nfa import NFA, emit_code_point_ranges, emit_repeat

END_CHAR = "\udfff"  # a lone surrogate: never a character of JSON text
BOUNDARY_CHAR = "\udffe"  # \b (lone surrogates too)
NOT_BOUNDARY_CHAR = "\udffd"  # \B
ANY = "any text"  # a sequence item: the text after a lookahead's own match
_WORD = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]  # \w


def has_lookaround(node, end: bool = False) -> bool:
    """Whether a lookahead, lookbehind or word boundary lies in ``node`` (with ``end``: or an
    END_CHAR)."""
    kind = type(node).__name__
    if kind == "_NonCapturing" or end and _is_end(node) or is_boundary(node):
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
        if is_boundary(node):
            return _boundary(items[:i], rest, next(iter(node.chars)) == BOUNDARY_CHAR, budget, emit_regex, memo)
        if kind == "_Concatenation":
            return lookahead_dfa(items[:i] + [(p, flags) for p in node.parts] + rest, budget, emit_regex, memo)
        # A word boundary reads the character before it: where one lies in the group or after
        # it, each alternative keeps the parts before the group (else they are built once,
        # before the alternatives' union).
        bounded = _has_boundary(node) or any(x is not ANY and _has_boundary(x[0]) for x in rest)
        if kind == "Pattern":
            inner = (flags | node.added_flags) & ~node.removed_flags
            if bounded:
                return _union([lookahead_dfa([*items[:i], (o, inner), *rest], budget, emit_regex, memo)
                               for o in node.options], budget)
            options = [lookahead_dfa([(o, inner), *rest], budget, emit_regex, memo) for o in node.options]
            return _then(items[:i], _union(options, budget), budget, emit_regex)
        if kind == "_Repeated":
            raise InvalidConstraintError("a lookahead or word boundary under a quantifier is not supported in regexes")
        if node.backwards:
            raise InvalidConstraintError("lookbehind assertions are not supported in regexes")
        if bounded and i > 0:  # the lookahead's product starts at it: the text before is not seen
            raise InvalidConstraintError("a word boundary in or after a lookahead that is not at the start of "
                                         "the text is not supported in regexes")
        after = lookahead_dfa(rest, budget, emit_regex, memo)
        look = lookahead_dfa([(node.inner, flags), ANY], budget, emit_regex, memo)
        both = trim_and_minimize(product(after, look, "diff" if node.negate else "and", budget))
        return _then(items[:i], both, budget, emit_regex)
    return _then(items, _EMPTY, budget, emit_regex)


_EMPTY = "empty text"


def _is_end(node) -> bool:
    return type(node).__name__ == "_CharGroup" and not node.negated and node.chars == frozenset(END_CHAR)


def is_boundary(node) -> bool:
    """Whether ``node`` is a word boundary's mark (``\\b`` or ``\\B``)."""
    return (type(node).__name__ == "_CharGroup" and not node.negated
            and node.chars in (frozenset(BOUNDARY_CHAR), frozenset(NOT_BOUNDARY_CHAR)))


def _has_boundary(node) -> bool:
    kind = type(node).__name__
    if kind == "Pattern":
        return any(_has_boundary(o) for o in node.options)
    if kind == "_Concatenation":
        return any(_has_boundary(p) for p in node.parts)
    if kind == "_Repeated":
        return _has_boundary(node.base)
    if kind == "_NonCapturing":
        return _has_boundary(node.inner)
    return is_boundary(node)


def _boundary(before: list, after: list, differ: bool, budget: CompileBudget, emit_regex, memo: dict) -> ByteDFA:
    """The texts ``before`` then ``after`` match (each to its end) where the character before
    the cut and the one after it differ in being word characters (``differ``: ``\\b``) or
    do not (``\\B``); the text's start and end are non-word."""
    head = lookahead_dfa(before, budget, emit_regex, memo)
    tail = lookahead_dfa(after, budget, emit_regex, memo)
    ends_word, starts_word = _word_edge(budget, at_end=True), _word_edge(budget, at_end=False)
    heads = [trim_and_minimize(product(head, ends_word, mode, budget)) for mode in ("and", "diff")]
    tails = [trim_and_minimize(product(tail, starts_word, mode, budget)) for mode in ("and", "diff")]
    pairs = [(heads[0], tails[1]), (heads[1], tails[0])] if differ else [(heads[0], tails[0]), (heads[1], tails[1])]
    nfa = NFA(budget)
    start, end = nfa.new_state(), nfa.new_state()
    for a, b in pairs:
        nfa.add_eps(embed_dfa(nfa, embed_dfa(nfa, start, a), b), end)
    return trim_and_minimize(determinize(nfa, start, end, budget))


def _word_edge(budget: CompileBudget, at_end: bool) -> ByteDFA:
    """Any text that ends (``at_end``) or begins with a word character."""
    nfa = NFA(budget)
    start = nfa.new_state()
    if at_end:
        end = emit_code_point_ranges(nfa, emit_any_text(nfa, start), _WORD)
    else:
        end = emit_any_text(nfa, emit_code_point_ranges(nfa, start, _WORD))
    return trim_and_minimize(determinize(nfa, start, end, budget))


def emit_any_text(nfa: NFA, start: int) -> int:
    """Any text (every code point, repeated): a search's padding, the text after a lookahead."""
    return emit_repeat(nfa, start, lambda n, x: emit_code_point_ranges(n, x, [(0, 0x10FFFF)]), 0, None)


def _then(items: list, tail, budget: CompileBudget, emit_regex) -> ByteDFA:
    """``items`` (no lookahead among them) followed by the DFA ``tail`` (_EMPTY: nothing;
    None: no text at all)."""
    nfa = NFA(budget)
    s = start = nfa.new_state()
    for item in items:
        if item is ANY:
            s = emit_any_text(nfa, s)
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

