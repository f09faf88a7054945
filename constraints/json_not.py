"""`not`, where its complement is exact (`if`/`then`/`else` becomes the two disjoint branches
(if and then) or (not if and else): json_merge.branch_if).

`not` of types, of enum/const values (strings, booleans, null; integers where only integers
are generated), of a pattern, of required names, of one property's schema, of an anyOf (each
negated in turn), of a oneOf whose branches are disjoint (its anyOf); and of several keywords
at once by De Morgan: not (K1 and K2) is (not K1) or (not K2), one anyOf branch per keyword,
each ``rest`` narrowed to the values failing it (bounds and counts flip, `items` becomes a
contains of its negation and `contains` an items of it, `additionalProperties` and
`patternProperties` over an object whose names are known become one branch per name that
could fail). Any other `not` is an UnsupportedSchemaError: subtracting an over-constrained
automaton would let through values the negated schema matches but we do not spell. Where an
exact complement is beyond us (or larger) and the negated schema requires names ``rest`` does
not, the objects lacking one of them are generated: a subset, over- never under-constrained.

A oneOf is generated as the anyOf of its branches each less the others (exclusive_one_of),
which emission and a `not` beside a oneOf share: the `not` is distributed over those branches,
never over the branches as written (a subset of a branch would widen its complement).
"""

from __future__ import annotations

import json
from collections import Counter

from .errors import InvalidConstraintError, UnsupportedSchemaError
from .fsm import ByteDFA, determinize, trim_and_minimize
from .json_context import RefCall, flatten, shape
from .json_keywords import ANNOTATIONS
from .json_leaves import pattern_matches
from .json_merge import (
    ASSERTIONS,
    CONTAINS,
    EXCLUDED,
    NOT_PATTERNS,
    declared_types,
    exclusive_branches,
    free_types,
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
        own = _member_schema(rest, name)
        if "object" not in type_list(rest):
            return False
        if own is False or subsumed(own, sub):  # no value of p fails S: only p absent is left
            if keys == {"properties"}:
                return False
            return {**_with_property(rest, name, False), "type": ["object"]}
        out = _with_property(rest, name, {"allOf": [own, {"not": sub}]})
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
    if keys == {"oneOf"} and isinstance(neg["oneOf"], list) and _exclusive(ctx, neg["oneOf"]):
        keys, neg = {"anyOf"}, {"anyOf": neg["oneOf"]}  # no value matches two: oneOf is anyOf
    if keys == {"anyOf"} and isinstance(neg["anyOf"], list):
        # not (X or Y) is (not X) and (not Y): narrow by each in turn.
        out = rest
        for i, sub in enumerate(neg["anyOf"]):
            both = {"anyOf": [out["not"], sub]} if "not" in out else sub  # a not X merged in stays
            out = narrow_not(ctx, {**out, "not": both}, f"{where}/anyOf/{i}")
            if out is False:
                return False
        return out
    missing = _unrequired_names(rest, neg, keys)
    try:
        exact = _not_by_parts(ctx, rest, neg, keys & ASSERTIONS, where)
    except UnsupportedSchemaError:
        if not missing:
            raise
    else:
        if not missing or _count(exact) <= len(missing):
            return exact
    # An object schema with required names: generate the objects that lack one of the names
    # it requires and `rest` does not, a subset of what fails it (objects that have them all
    # but fail another of its keywords are left out: over-constrained, never under). Taken
    # where the exact complement is beyond us, or has more alternatives (each `not` of a
    # oneOf's overlapping branches multiplies those of the ones before).
    return narrow_not(ctx, {**rest, "not": {"required": missing}}, where)


_MAX_PARTS = 32  # anyOf branches one `not` may become


def _not_by_parts(ctx, rest: dict, neg: dict, keys: set, where: str) -> dict | bool:
    """not (K1 and K2 and ...) is (not K1) or (not K2) or ...: one anyOf branch per keyword of
    ``neg``, each ``rest`` narrowed to the values failing that keyword (a keyword of one type
    fails values of that type only; values of a type ``neg`` does not allow fail it whole).
    Exact where each keyword's failure is. A keyword whose failure we cannot generate (a
    format's complement, arrays with a duplicate) is left out while others are left: the
    values failing only it are not generated, a subset (over-, never under-constrained);
    with none left, an UnsupportedSchemaError."""
    for key in ("anyOf", "oneOf"):
        if key in rest:  # (A or B) and not N is (A and not N) or (B and not N); for oneOf too
            return _distribute(ctx, rest, neg, where, key)
    types = declared_types(neg)
    branches = [without_types(rest, types)] if "type" in keys else []
    beyond: list[UnsupportedSchemaError] = []
    for key in [k for k in neg if k in keys and k != "type"]:
        try:
            part = _failing(ctx, rest, neg, key, types, where)
        except UnsupportedSchemaError as e:
            beyond.append(e)
            continue
        branches += part["anyOf"] if isinstance(part, dict) and set(part) == {"anyOf"} else [part]
    branches = [b for b in branches if b is not False]
    if beyond and not branches:
        raise beyond[0]
    if not branches:
        return False
    return _bounded(branches[0] if len(branches) == 1 else {"anyOf": branches}, where)


def _bounded(schema, where: str):
    """``schema``, unless its nested anyOf/oneOf alternatives number more than _MAX_PARTS (one
    `not` after another multiplies them): then an UnsupportedSchemaError, which narrow_not
    answers with a subset where it has one."""
    if _count(schema) > _MAX_PARTS:
        raise UnsupportedSchemaError.at("not", where, f"would be more than {_MAX_PARTS} alternatives")
    return schema


def _count(schema) -> int:
    """The alternatives of ``schema``: its nested anyOf/oneOf branches, counted at the leaves."""
    count, todo = 0, [schema]
    while todo and count <= _MAX_PARTS:
        s = todo.pop()
        key = next((k for k in ("anyOf", "oneOf") if isinstance(s, dict) and k in s), None)
        if key is None:
            count += 1
        else:
            todo += s[key]
    return count


# A bound's failure: the opposite bound (strict where the bound was not).
_FLIPPED = {"minimum": "exclusiveMaximum", "maximum": "exclusiveMinimum",
            "exclusiveMinimum": "maximum", "exclusiveMaximum": "minimum"}
_COUNTS = {"minLength": ("string", "maxLength", -1), "maxLength": ("string", "minLength", 1),
           "minItems": ("array", "maxItems", -1), "maxItems": ("array", "minItems", 1),
           "minProperties": ("object", "maxProperties", -1), "maxProperties": ("object", "minProperties", 1)}


def _failing(ctx, rest: dict, neg: dict, key: str, types: set, where: str) -> dict | bool:
    """``rest`` narrowed to the values of ``neg``'s types that fail ``neg[key]``."""
    value = neg[key]
    if key in _FLIPPED and isinstance(value, (int, float)) and not isinstance(value, bool):
        kind = ["number"] if "number" in types else ["integer"] if "integer" in types else []
        return _narrowed(rest, {"type": kind, _FLIPPED[key]: value}, where)
    if key in _COUNTS and isinstance(value, int) and not isinstance(value, bool):
        kind, opposite, step = _COUNTS[key]
        if step < 0 and value <= 0 or kind not in types:
            return False  # every value passes a minimum of 0
        return _narrowed(rest, {"type": [kind], opposite: value + step}, where)
    if key == "pattern":
        return _without_pattern(rest, {"pattern": value}, where) if "string" in types else False
    if key == "required" and "object" not in types:
        return False
    if key == "oneOf" and isinstance(value, list) and _exclusive(ctx, value):
        key = "anyOf"
    if key in ("required", "anyOf", "not", "enum", "const"):
        one = {key: value, "const": neg["const"]} if key == "enum" and "const" in neg else {key: value}
        return narrow_not(ctx, {**rest, "not": one}, where)
    if key == "properties" and isinstance(value, dict):
        if "object" not in types:
            return False
        parts = [narrow_not(ctx, {**rest, "not": {"properties": {name: sub}}}, f"{where}/properties/{name}")
                 for name, sub in value.items()]
        return {"anyOf": [p for p in parts if p is not False]} if len(parts) > 1 else parts[0] if parts else False
    if key in ("additionalProperties", "patternProperties") and "object" in types:
        return _extra_names_failing(rest, neg, key, where)
    if key == "dependentRequired" and isinstance(value, dict) and "object" in types:
        parts = [_narrowed(rest, {"type": ["object"], "required": [name], "properties": {other: False}}, where)
                 for name, others in value.items() for other in others]
        return {"anyOf": [p for p in parts if p is not False]} if parts else False
    if key == "items" and "array" in types and not neg.get("prefixItems"):
        if subsumed(rest.get("items", True) if not rest.get("prefixItems") else True, value):
            return False  # every item rest allows passes
        # Some item fails `items`: an array containing a value of not items.
        return _narrowed(rest, {"type": ["array"], CONTAINS: (({"not": value} if value is not False else True, 1, None),)}, where)
    if key == CONTAINS and "array" in types and len(value) == 1 and value[0][1:] == (1, None):
        return _narrowed(rest, {"type": ["array"], "items": {"not": value[0][0]}}, where)
    if key == "uniqueItems" and value is False:
        return False
    raise UnsupportedSchemaError.at("not", where, f"is enforced for type, enum/const, bounds, lengths, counts, "
                                    f"pattern, required, properties, additionalProperties over a closed "
                                    f"object, items, contains, and anyOf/not of these; not {key!r}")


def _exclusive(ctx, branches: list) -> bool:
    """Whether no value matches two of these oneOf branches (so it is their anyOf)."""
    shapes = [shape(ctx, b) for b in branches]
    return all(exclusive_branches(shapes[i], shapes[j]) for i in range(len(shapes)) for j in range(i))


def _narrowed(rest: dict, failure: dict, where: str) -> dict | bool:
    if not failure.get("type", True):
        return False
    out = merge_schemas(rest, failure, where)
    return False if out is False or isinstance(out, dict) and out.get("type") == [] else out


def _extra_names_failing(rest: dict, neg: dict, key: str, where: str) -> dict | bool:
    """Objects of ``rest`` failing ``neg``'s additionalProperties (a name it does not declare
    with a value failing that schema) or patternProperties (a name matching a pattern with a
    value failing its schema). Exact where ``rest`` is closed (its names are known): one
    branch per name that could fail."""
    if "object" not in type_list(rest):
        return False
    if rest.get("additionalProperties", True) is not False or rest.get("patternProperties"):
        raise UnsupportedSchemaError.at("not", where, f"of {key} over an object open to further names "
                                        "is not supported")
    declared = neg.get("properties", {}) if isinstance(neg.get("properties"), dict) else {}
    patterns = neg.get("patternProperties", {}) if isinstance(neg.get("patternProperties"), dict) else {}
    parts = []
    for name, own in rest.get("properties", {}).items():
        if own is False:
            continue
        if key == "patternProperties":
            subs = [sub for p, sub in patterns.items() if pattern_matches(p, name)]
        elif name in declared or any(pattern_matches(p, name) for p in patterns):
            continue
        else:
            subs = [neg[key]]
        subs = [sub for sub in subs if not subsumed(own, sub)]
        if not subs:
            continue
        value = {"not": subs[0]} if len(subs) == 1 else {"not": {"allOf": subs}}
        parts.append(_narrowed(rest, {"type": ["object"], "required": [name], "properties": {name: value}}, where))
    parts = [p for p in parts if p is not False]
    return {"anyOf": parts} if parts else False


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


def _distribute(ctx, rest: dict, neg: dict, where: str, key: str = "anyOf") -> dict | bool:
    """``rest`` and not ``neg`` where ``rest`` branches (``key``: anyOf, or oneOf): each branch
    narrowed on its own. A oneOf is made exclusive first (each branch less the others, as
    json_schema emits it), then distributed as an anyOf: narrowing the branches first and
    the oneOf after would complement each narrowed branch, and a narrowing that is a subset
    (a keyword of ``neg`` left out, _not_by_parts) would then let a value match one branch
    where it matches two."""
    base = {k: v for k, v in rest.items() if k != key}
    merged_branches, raw = [], []
    for i, branch in enumerate(rest[key]):
        branch, _ = flatten(ctx, branch, f"{where}/{key}/{i}", ()) if isinstance(branch, dict) else (branch, ())
        if isinstance(branch, RefCall):
            raise UnsupportedSchemaError.at("not", where, "beside a recursive $ref is not supported")
        raw.append(branch)
        merged_branches.append(False if branch is False else base if branch is True
                               else merge_schemas(base, branch, f"{where}/{key}/{i}"))
    if key == "oneOf" and not ctx.lenient:
        merged_branches = exclusive_one_of(ctx, merged_branches, raw, where)
    out = []
    for merged in merged_branches:
        if merged is False:
            continue
        both = {"anyOf": [merged["not"], neg]} if "not" in merged else neg  # (not A) and (not N)
        narrowed = narrow_not(ctx, {**merged, "not": both}, where)
        if narrowed is not False:
            out.append(narrowed)
    return _bounded({"anyOf" if key == "oneOf" and not ctx.lenient else key: out}, where) if out else False


def exclusive_one_of(ctx, branches: list, raw: list, ptr: str) -> list:
    """oneOf ``branches`` (each merged with what is beside the oneOf; ``raw`` as written) as
    alternatives no two of which share a value: an anyOf that is exactly the oneOf."""
    return _one_of_disjoint(ctx, _without_shared_free_types(branches), raw, ptr)


def _without_shared_free_types(branches: list) -> list:
    """oneOf branches without the types that two of them accept whole: every value of such a
    type matches both, so none is valid (branches of object keywords alone, say, leave
    every non-object to both)."""
    counts = Counter(t for b in branches for t in free_types(b))
    shared = {t for t, n in counts.items() if n >= 2}
    if not shared:
        return branches
    return [b if b is False else without_types({} if b is True else b, shared) for b in branches]


def _one_of_disjoint(ctx, branches: list, raw: list, ptr: str) -> list:
    """oneOf generated as anyOf, exactly: branches provably disjoint stay as they are; a
    branch that may overlap another is narrowed by `not` of it (branch i and not branch j:
    i's own part beside the oneOf already holds j's), exact where narrow_not is."""
    shapes = [shape(ctx, b) for b in branches]
    apart = {(i, j) for i in range(len(shapes)) for j in range(i)  # exclusive_branches is symmetric
             if exclusive_branches(shapes[i], shapes[j])}
    out = list(branches)
    for i in range(len(branches)):
        for j in range(len(branches)):
            if i == j or out[i] is False or (max(i, j), min(i, j)) in apart:
                continue
            try:
                out[i] = _narrow_by_not(ctx, out[i], raw[j], f"{ptr}/oneOf/{i}")
            except UnsupportedSchemaError as e:
                raise UnsupportedSchemaError.at(
                    "oneOf", f"{ptr}/oneOf", f"branches {min(i, j)} and {max(i, j)} may overlap, and "
                    f"branch {i} without branch {j} cannot be enforced ({e})") from e
    return out


def _narrow_by_not(ctx, branch, other, ptr: str):
    if not isinstance(branch, dict) or isinstance(other, RefCall):
        raise UnsupportedSchemaError.at("not", f"{ptr}/not", "of a recursive $ref is not supported")
    if "not" in branch:  # (not A) and (not B) is not (A or B)
        both = {**branch, "not": {"anyOf": [branch["not"], other]}}
        # Listed values are each validated against the whole schema: both nots hold.
        return both if {"enum", "const"} & branch.keys() else narrow_not(ctx, both, ptr)
    return narrow_not(ctx, {**branch, "not": other}, ptr)


def _member_schema(rest: dict, name: str):
    """The schema ``rest`` applies to a member ``name``: its property, else the patterns the
    name matches, else additionalProperties."""
    props = rest.get("properties", {})
    if name in props:
        return props[name]
    matched = [sub for p, sub in rest.get("patternProperties", {}).items() if pattern_matches(p, name)]
    if matched:
        return matched[0] if len(matched) == 1 else {"allOf": matched}
    return rest.get("additionalProperties", True)


# Keywords whose meaning depends on others beside them: equal only together.
_TOGETHER = {"additionalProperties": ("properties", "patternProperties"), "items": ("prefixItems",),
             "then": ("if",), "else": ("if",)}


def subsumed(own, sub) -> bool:
    """True only when every value ``own`` accepts satisfies ``sub``: ``sub`` is true, or each
    of its assertions stands in ``own`` with the same value (so own and not sub is empty)."""
    if sub is True or own is False or own == sub or isinstance(sub, dict) and not set(sub) & ASSERTIONS:
        return True
    if not isinstance(own, dict) or not isinstance(sub, dict):
        return False
    for key in set(sub) & ASSERTIONS:
        if key not in own or own[key] != sub[key]:
            return False
        if any(own.get(k) != sub.get(k) for k in _TOGETHER.get(key, ())):
            return False
    return True


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
    """Every spelling of each of these values a JSON text may use (a quoted string: each
    control character with a short escape or either \\u00XX case; our strings use one of
    them, json_leaves.emit_json_char), as one DFA to subtract."""
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
