"""`contains` / `minContains` / `maxContains`, exactly: the items that match stand anywhere.

An array with one contains constraint (schema C, at least lo, at most hi matching items) is a
run of items, each either a *match* (the item schema and C) or a *non-match* (the item
schema, and not C where hi bounds the count; without hi any item will do, since a further
match only raises the count). The NFA tracks the matches so far (capped at hi, or at lo
without one) and, where minItems asks, the items so far; it accepts where both are reached.
Every valid array parses: mark lo of its matching items (all of them, with hi) as matches.

Arrays this does not cover (prefixItems, maxItems, uniqueItems, several contains, a `not C`
we cannot enforce, too many counts) fall back to the prefix form (json_lowering.
contains_as_prefix), a subset of the language.
"""

from __future__ import annotations

from .errors import UnsupportedSchemaError
from .json_context import Ctx, merge_or_fail, punct
from .json_lowering import contains_as_prefix
from .json_merge import CONTAINS
from .nfa import NFA

_MAX_TRACKS = 64  # (matches, items) counts the NFA keeps apart


def emit_contains(ctx: Ctx, nfa: NFA, start: int, schema: dict, ptr: str, refs: tuple, emit_plain) -> int:
    """The array ``schema`` (which holds CONTAINS) from ``start``; ``emit_plain(schema)``
    emits an array schema without CONTAINS (the fallback's parts merged in)."""
    constraints = schema[CONTAINS]
    plain = {k: v for k, v in schema.items() if k != CONTAINS}
    if len(constraints) == 1 and _exact_applies(plain, constraints[0]):
        entry = nfa.new_state()  # joined to start only once every part emitted
        try:
            end = _emit_counted(ctx, nfa, entry, plain, constraints[0], ptr, refs)
        except UnsupportedSchemaError:
            pass  # `not C` is beyond narrow_not: the prefix form below
        else:
            nfa.add_eps(start, entry)
            return end
    for c in constraints:
        part = contains_as_prefix(plain, c)
        if part:
            plain = merge_or_fail(ctx, plain, part, f"{ptr}/contains")
    return emit_plain(plain)


def _exact_applies(plain: dict, constraint: tuple) -> bool:
    _, lo, hi = constraint
    cap = hi if hi is not None else lo
    min_items = int(plain.get("minItems", 0))
    return (not plain.get("prefixItems") and "maxItems" not in plain and plain.get("uniqueItems") is not True
            and (cap + 1) * (min_items + 1) <= _MAX_TRACKS)


def _emit_counted(ctx: Ctx, nfa: NFA, entry: int, plain: dict, constraint: tuple, ptr: str,
                  refs: tuple) -> int:
    sub, lo, hi = constraint
    items = plain.get("items", True)
    need = int(plain.get("minItems", 0))
    cap = hi if hi is not None else lo
    match = merge_or_fail(ctx, items, sub, f"{ptr}/contains")
    other = items if hi is None else merge_or_fail(ctx, items, {"not": sub}, f"{ptr}/contains")
    first = punct(ctx, nfa, entry, b"[")
    tracks = {}  # (matches, items, any item yet) -> the state after them

    def track(key):
        if key not in tracks:
            tracks[key] = nfa.new_state()
            todo.append(key)
        return tracks[key]

    todo: list[tuple[int, int, bool]] = []
    tracks[(0, 0, False)] = first
    todo.append((0, 0, False))
    while todo:
        matched, count, started = key = todo.pop()
        at = punct(ctx, nfa, tracks[key], b",") if started else tracks[key]
        after = min(count + 1, need)
        if matched < cap:
            nfa.add_eps(ctx.emit_schema(nfa, at, match, f"{ptr}/contains", refs), track((matched + 1, after, True)))
        nfa.add_eps(ctx.emit_schema(nfa, at, other, f"{ptr}/items", refs), track((matched, after, True)))
    end = nfa.new_state()
    for (matched, count, _), s in tracks.items():
        if matched >= lo and count >= need:
            nfa.add_eps(s, end)
    return punct(ctx, nfa, end, b"]")
