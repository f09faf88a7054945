"""`not`, where its complement is exact: `not` of types, of enum/const values (strings,
booleans, null; integers where only integers are generated), of a pattern, of required names, of one
property's schema, of an anyOf of these (each negated in turn); and `if`/`then`/`else` as the two disjoint branches (if and then) or
(not if and else). Any other `not` is an UnsupportedSchemaError: subtracting an
over-constrained automaton would let through values the negated schema matches but we do
not spell.
"""

from __future__ import annotations

import json

from .errors import InvalidConstraintError, UnsupportedSchemaError
from .fsm import ByteDFA, determinize, trim_and_minimize
from .json_context import flatten
from .json_keywords import ANNOTATIONS
from .json_merge import (
    EXCLUDED,
    NOT_PATTERNS,
    declared_types,
    merge_schemas,
    type_list,
    without_types,
)
from .nfa import NFA, emit_alt, emit_bytes

_SHORT = {8: b"\\b", 9: b"\\t", 10: b"\\n", 12: b"\\f", 13: b"\\r"}


def narrow_not(ctx, schema: dict, ptr: str) -> dict | bool:
    """``schema`` without its `not`, narrowed to exclude what `not` forbids."""
    neg = schema["not"]
    rest = {k: v for k, v in schema.items() if k != "not"}
    where = f"{ptr}/not"
    if "enum" in rest or "const" in rest:
        return schema  # each listed value is validated against the whole schema, `not` included
    if neg is False:
        return rest
    if isinstance(neg, dict):
        neg, _ = flatten(ctx, neg, where, ())
    if neg is True or isinstance(neg, dict) and set(neg) <= ANNOTATIONS:
        return False
    if neg is False:
        return rest
    if not isinstance(neg, dict):
        raise UnsupportedSchemaError.at("not", where, "of a recursive $ref is not supported")
    keys = set(neg) - ANNOTATIONS
    if keys == {"not"}:  # not(not X) is X
        return merge_schemas(rest, neg["not"], where)
    if keys == {"type"}:
        return without_types(rest, declared_types(neg))
    if keys and keys <= {"enum", "const"}:
        return _without_values(rest, neg, where)
    if "pattern" in keys and keys <= {"pattern", "type"} and neg.get("type", "string") in ("string", ["string"]):
        return _without_pattern(rest, neg, where)
    one = isinstance(neg.get("properties"), dict) and len(neg["properties"]) == 1
    if one and (keys == {"properties"} or keys == {"properties", "required"}
                and neg["required"] == list(neg["properties"])):
        # not {properties: {p: S}}: an object with p present and failing S; with required
        # [p] too: an object whose p, if present, fails S.
        ((name, sub),) = neg["properties"].items()
        if "object" not in type_list(rest):
            return False
        out = _with_property(rest, name, {"allOf": [rest.get("properties", {}).get(name, True), {"not": sub}]})
        out["type"] = ["object"]
        if keys == {"properties"}:
            out["required"] = list(dict.fromkeys([*rest.get("required", []), name]))
        return out
    if keys == {"properties"} and isinstance(neg["properties"], dict) and len(neg["properties"]) > 1:
        # not {properties: {a: A, b: B}} is (not {properties: {a: A}}) or (not {... b: B}):
        # an object with a present and failing A, or b present and failing B.
        # Each branch is merged with ``rest`` where it is emitted.
        if "object" not in type_list(rest):
            return False
        if "anyOf" in rest:
            return _distribute(ctx, rest, neg, where)
        others = {} if {"additionalProperties", "patternProperties", "properties"} & rest.keys() else {
            "additionalProperties": True}  # declaring a name must not drop the others
        branches = [{"type": ["object"], "properties": {name: {"not": sub}}, "required": [name], **others}
                    for name, sub in neg["properties"].items()]
        return {**rest, "anyOf": branches}
    if keys == {"required"} and isinstance(neg["required"], list) and neg["required"]:
        # Any non-object satisfies `required`, so fails its `not`: objects only, without
        # one of the names at least (one branch per name where there are several).
        if "object" not in type_list(rest):
            return False
        names = list(dict.fromkeys(neg["required"]))
        missing = [{**_with_property(rest, name, False), "type": ["object"]} for name in names]
        if len(missing) == 1:
            return missing[0]
        if "oneOf" in rest:
            raise UnsupportedSchemaError.at("not", where, "of several required names beside oneOf")
        if "anyOf" in rest:  # (A or B) and not N is (A and not N) or (B and not N)
            return _distribute(ctx, rest, neg, where)
        return {"anyOf": missing}
    if keys == {"anyOf"} and isinstance(neg["anyOf"], list):
        # not (X or Y) is (not X) and (not Y): narrow by each in turn.
        out = rest
        for i, sub in enumerate(neg["anyOf"]):
            out = narrow_not(ctx, {**out, "not": sub}, f"{where}/anyOf/{i}")
            if out is False:
                return False
        return out
    missing = _unrequired_names(rest, neg, keys)
    if missing:
        # An object schema with required names: generate the objects that lack one of the
        # names it requires and `rest` does not, a subset of what fails it (objects that
        # have them all but fail another of its keywords are left out: over-constrained,
        # never under).
        return narrow_not(ctx, {**rest, "not": {"required": missing}}, where)
    raise UnsupportedSchemaError.at("not", where, "is enforced only for type, enum/const, required "
                                    f"names, one property and anyOf of these, not {sorted(keys)}")


_OBJECT_KEYWORDS = {"type", "properties", "required", "additionalProperties", "patternProperties",
                    "propertyNames", "minProperties", "maxProperties", "dependentRequired"}


def _without_pattern(rest: dict, neg: dict, where: str) -> dict | bool:
    """not {pattern: P}: strings that P does not match (any non-string satisfies `pattern`,
    so fails its not); not {type: string, pattern: P}: those and every non-string. The
    string's automaton less P's (json_schema), both over unescaped text: exact."""
    if not isinstance(neg["pattern"], str):
        raise InvalidConstraintError(f"pattern at {where}/pattern must be a string")
    out = {**rest, NOT_PATTERNS: tuple(dict.fromkeys((*rest.get(NOT_PATTERNS, ()), neg["pattern"])))}
    if "type" not in neg:
        if "string" not in type_list(rest):
            return False
        out["type"] = ["string"]
    return out


def _unrequired_names(rest: dict, neg: dict, keys: set) -> list[str]:
    """Names an object schema ``neg`` requires that ``rest`` does not (none where neg is not
    only about objects, or matches non-objects)."""
    required = neg.get("required")
    types = neg.get("type", "object")
    if not keys <= _OBJECT_KEYWORDS or not isinstance(required, list) or types not in ("object", ["object"]):
        return []
    have = set(rest.get("required", []))
    return [n for n in dict.fromkeys(required) if isinstance(n, str) and n not in have]


def _distribute(ctx, rest: dict, neg: dict, where: str) -> dict | bool:
    base = {k: v for k, v in rest.items() if k != "anyOf"}
    out = []
    for i, branch in enumerate(rest["anyOf"]):
        branch, _ = flatten(ctx, branch, f"{where}/anyOf/{i}", ()) if isinstance(branch, dict) else (branch, ())
        if branch is False:
            continue
        merged = base if branch is True else merge_schemas(base, branch, f"{where}/anyOf/{i}")
        if merged is False:
            continue
        narrowed = narrow_not(ctx, {**merged, "not": neg}, where)
        if narrowed is not False:
            out.append(narrowed)
    return {"anyOf": out} if out else False


def _with_property(rest: dict, name: str, sub) -> dict:
    """``rest`` with property ``name`` declared as ``sub``; an object that allowed any names
    still does (declaring one must not drop the others)."""
    out = {**rest, "properties": {**rest.get("properties", {}), name: sub}}
    if not {"additionalProperties", "patternProperties", "properties"} & rest.keys():
        out["additionalProperties"] = True
    return out


def _without_values(rest: dict, neg: dict, where: str) -> dict:
    values = neg["enum"] if "enum" in neg else [neg["const"]]
    if not isinstance(values, list):
        raise InvalidConstraintError(f"enum at {where}/enum must be a list")
    if "enum" in neg and "const" in neg:
        values = [v for v in values if json.dumps(v) == json.dumps(neg["const"])]
    types = type_list(rest)
    texts = list(rest.get(EXCLUDED, ()))
    for v in values:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if "number" in types:
                raise UnsupportedSchemaError.at("not", where, f"of the number {v!r} while numbers are "
                                                "generated (it has endless spellings: 1, 1.0, 1e0)")
            if float(v).is_integer():
                texts.append(json.dumps(int(v)))
        elif isinstance(v, (dict, list)):
            if {"object", "array"} & set(types):
                raise UnsupportedSchemaError.at("not", where, "of an object or array value is not supported")
        else:  # strings, booleans, null: spelled out below
            texts.append(json.dumps(v, ensure_ascii=False))
    return {**rest, EXCLUDED: tuple(texts)}


def excluded(schema: dict, kind: type) -> list:
    """The values of ``kind`` (str, int, bool, type(None)) that `not` removed from ``schema``."""
    values = [json.loads(t) for t in schema.get(EXCLUDED, ())]
    return [v for v in values if type(v) is kind]


def spellings_dfa(texts: list[bytes], budget) -> ByteDFA:
    """Every spelling we generate of each of these values (a quoted string: each control
    character with a short escape or either \\u00XX case), as one DFA to subtract."""
    nfa = NFA(budget)
    start = nfa.new_state()
    end = emit_alt(nfa, start, [lambda n, s, t=t: _emit_spellings(n, s, t) for t in texts])
    return trim_and_minimize(determinize(nfa, start, end, budget))


def _emit_spellings(nfa: NFA, start: int, text: bytes) -> int:
    value = json.loads(text)
    if not isinstance(value, str):  # integers (0 is also "-0"), booleans, null
        spellings = [text, b"-0"] if value == 0 and not isinstance(value, bool) else [text]
        return emit_alt(nfa, start, [lambda n, x, sp=sp: emit_bytes(n, x, sp) for sp in spellings])
    s = emit_bytes(nfa, start, b'"')
    for ch in value:
        s = emit_alt(nfa, s, [lambda n, x, sp=sp: emit_bytes(n, x, sp) for sp in _char_spellings(ch)])
    return emit_bytes(nfa, s, b'"')


def _char_spellings(ch: str) -> list[bytes]:
    code = ord(ch)
    if ch == '"':
        return [b'\\"']
    if ch == "\\":
        return [b"\\\\"]
    if code >= 0x20:
        return [ch.encode()]
    hexes = {f"\\u{code:04x}", f"\\u{code:04X}"}
    return ([_SHORT[code]] if code in _SHORT else []) + [h.encode() for h in sorted(hexes)]


def branch_if(schema: dict, ptr: str) -> dict | bool:
    """``if``/``then``/``else`` as anyOf[(if and then), (not if and else)]; then or else
    without if, or if without both, have no effect."""
    rest = {k: v for k, v in schema.items() if k not in ("if", "then", "else")}
    if "if" not in schema or "then" not in schema and "else" not in schema:
        return rest
    cond, then, other = schema["if"], schema.get("then", True), schema.get("else", True)
    if cond is True or cond is False:
        return {**rest, "allOf": [*rest.get("allOf", []), then if cond else other]}
    if "anyOf" in rest or "oneOf" in rest:
        raise UnsupportedSchemaError.at("if", f"{ptr}/if", "next to anyOf/oneOf is not supported")
    return {**rest, "anyOf": [{"allOf": [cond, then]}, {"allOf": [{"not": cond}, other]}]}
