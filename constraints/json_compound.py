"""Arrays and objects of a JSON schema, emitted into the schema's NFA."""

from __future__ import annotations

from .errors import InvalidConstraintError
from .fsm import embed_dfa
from .json_leaves import json_string, key_dfa
from .nfa import NFA, emit_alt, emit_bytes, emit_nothing, emit_repeat


def _emit_array(ctx, nfa: NFA, start: int, schema: dict, ptr: str, refs: tuple) -> int:
    from .json_schema import _punct, emit_schema

    prefix = schema.get("prefixItems", [])
    items = schema.get("items", True)
    lo = int(schema.get("minItems", 0))
    hi = schema.get("maxItems")
    hi = None if hi is None else int(hi)
    if not isinstance(prefix, list):
        raise InvalidConstraintError(f"prefixItems at {ptr}/prefixItems must be a list")
    s = _punct(ctx, nfa, start, b"[")
    ends = []
    for i, sub in enumerate(prefix):
        if hi is not None and i >= hi:
            break
        if i >= lo:
            ends.append(s)
        if i:
            s = _punct(ctx, nfa, s, b",")
        s = emit_schema(ctx, nfa, s, sub, f"{ptr}/prefixItems/{i}", refs)
    else:
        ends.append(_emit_rest(ctx, nfa, s, items, len(prefix), lo, hi, ptr, refs))
    if len(prefix) >= lo and (hi is None or len(prefix) <= hi) and prefix:
        ends.append(s)
    end = nfa.new_state()
    for e in ends:
        nfa.add_eps(e, end)
    return _punct(ctx, nfa, end, b"]")


def _emit_rest(ctx, nfa: NFA, s: int, items, done: int, lo: int, hi: int | None, ptr: str,
               refs: tuple) -> int:
    """Items after the prefixItems: count in [max(lo - done, 0), hi - done]."""
    from .json_schema import _punct, emit_schema

    rest_lo = max(lo - done, 0)
    rest_hi = None if hi is None else hi - done
    if items is False or rest_hi == 0:
        return s if rest_lo == 0 else emit_nothing(nfa, s)

    def item(n, x):
        return emit_schema(ctx, n, x, items, f"{ptr}/items", refs)

    def sep(n, x):
        return _punct(ctx, n, x, b",")

    if done == 0:
        return emit_repeat(nfa, s, item, rest_lo, rest_hi, sep=sep)
    return emit_repeat(nfa, s, lambda n, x: item(n, sep(n, x)), rest_lo, rest_hi)


def _emit_object(ctx, nfa: NFA, start: int, schema: dict, ptr: str, refs: tuple) -> int:
    """Declared properties in schema order (optional ones skippable), then extra ones.

    Two tracks of states: `first` (nothing written yet, no comma needed) and `rest`.
    """
    from .json_schema import _punct, emit_schema

    props = dict(schema.get("properties", {}))
    required = list(schema.get("required", []))
    extra = schema.get("additionalProperties", None if props else True)
    for name in required:
        if name not in props:
            props[name] = extra if extra is not None else False
    first: int | None = _punct(ctx, nfa, start, b"{")
    rest: int | None = None
    for name, sub in props.items():
        entry = nfa.new_state()
        if first is not None:
            nfa.add_eps(_key(ctx, nfa, first, name), entry)
        if rest is not None:
            nfa.add_eps(_key(ctx, nfa, _punct(ctx, nfa, rest, b","), name), entry)
        value_end = emit_schema(ctx, nfa, entry, sub, f"{ptr}/properties/{_escape(name)}", refs)
        joined = nfa.new_state()
        nfa.add_eps(value_end, joined)
        if name not in required:
            if rest is not None:
                nfa.add_eps(rest, joined)
        else:
            first = None
        rest = joined
    if extra is not None and extra is not False:
        first, rest = _emit_extras(ctx, nfa, first, rest, tuple(props), extra, ptr, refs)
    end = nfa.new_state()
    for s in (first, rest):
        if s is not None:
            nfa.add_eps(s, end)
    return _punct(ctx, nfa, end, b"}")


def _emit_extras(ctx, nfa: NFA, first, rest, declared: tuple, extra, ptr: str, refs: tuple):
    from .json_schema import _punct, emit_schema

    loop = nfa.new_state()
    entry = nfa.new_state()
    if rest is not None:
        nfa.add_eps(rest, loop)
    if first is not None:
        nfa.add_eps(first, entry)
    nfa.add_eps(_punct(ctx, nfa, loop, b","), entry)
    key_end = _punct(ctx, nfa, embed_dfa(nfa, entry, key_dfa(declared)), b":")
    value_end = emit_schema(ctx, nfa, key_end, extra, f"{ptr}/additionalProperties", refs)
    nfa.add_eps(value_end, loop)
    return first, loop


def _key(ctx, nfa: NFA, start: int, name: str) -> int:
    from .json_schema import _punct

    return _punct(ctx, nfa, emit_bytes(nfa, start, json_string(name)), b":")


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


__all__ = ["_emit_array", "_emit_object", "emit_alt"]
