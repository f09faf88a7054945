"""Schema algebra: allOf merging, type inference, and the oneOf disjointness test."""

from __future__ import annotations

import json
import math
from functools import lru_cache

from .errors import UnsupportedSchemaError
from .json_keywords import ANNOTATIONS

# Internal keywords `not` leaves behind: JSON texts of removed values; numbers only with a
# fraction; patterns no string may match.
EXCLUDED = "x-sglang-lite-excluded"
FRACTIONAL = "x-sglang-lite-fractional"
NOT_PATTERNS = "x-sglang-lite-not-patterns"
# Patterns a string must match beside `pattern` (allOf parts with differing patterns).
ALSO_PATTERNS = "x-sglang-lite-also-patterns"
# Formats a string must have beside `format` (allOf parts, or a $ref and its siblings, with
# differing formats: Renovate's "regex" extractVersion under an additionalProperties "uri").
ALSO_FORMATS = "x-sglang-lite-also-formats"
# contains / minContains / maxContains of a schema and its allOf parts: (schema, lo, hi) each.
CONTAINS = "x-sglang-lite-contains"
# Which of a few names an object may have (json_presence.py): (names, allowed), the names
# sorted, each allowed pattern the sorted tuple of the names present.
PRESENCE = "x-sglang-lite-presence"
MAX_PRESENCE_NAMES = 12  # names two merged presence keywords may track (4,096 patterns)

TYPES = ("null", "boolean", "object", "array", "string", "number", "integer")
# Keywords that constrain values of one type only; every other type passes them.
TYPE_ONLY = {
    "object": frozenset({"properties", "required", "additionalProperties", "patternProperties",
                         "propertyNames", "minProperties", "maxProperties", "dependentRequired",
                         PRESENCE}),
    "array": frozenset({"items", "prefixItems", "minItems", "maxItems", "uniqueItems", CONTAINS}),
    "string": frozenset({"minLength", "maxLength", "pattern", "format"}),
    "number": frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}),
}
TYPE_ONLY["integer"] = TYPE_ONLY["number"]
OTHER_TYPES_ONLY = {t: frozenset().union(*(kws for u, kws in TYPE_ONLY.items() if kws is not TYPE_ONLY.get(t)))
                     for t in ("null", "boolean", "object", "array", "string", "number", "integer")}
_CONDITIONAL = {"if", "then", "else"}
_MAX_OF = {"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"}
_MIN_OF = {"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"}
_IGNORED = {"title", "description", "default", "examples", "$comment", "$schema", "$defs",
            "definitions", "$anchor", "deprecated", "readOnly", "writeOnly"}
# Keywords that assert something. Any other key (an annotation such as $id or a draft-4 `id`
# left in a 2020-12 document, an `x-` extension, an unknown keyword) never blocks a merge.
ASSERTIONS = {"type", "enum", "const", "properties", "required", "additionalProperties", "items",
              "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
              "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf",
              "$ref", "nullable", "uniqueItems", "multipleOf", "patternProperties", "propertyNames",
              "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "not", "if",
              "then", "else", "contains", "minContains", "maxContains", "unevaluatedProperties",
              "unevaluatedItems", "$dynamicRef", "$recursiveRef", EXCLUDED, FRACTIONAL, NOT_PATTERNS,
              ALSO_PATTERNS, ALSO_FORMATS, CONTAINS, PRESENCE}


def merge_presence(a, b):
    """Both presence keywords (PRESENCE) as one: the patterns over all their names that each
    allows on its own names; either where the other is None."""
    if a is None or b is None:
        return b if a is None else a
    names = tuple(sorted(set(a[0]) | set(b[0]), key=atom_order))
    ok_a, ok_b = set(a[1]), set(b[1])
    allowed = []
    for k in range(1 << len(names)):
        present = tuple(n for i, n in enumerate(names) if k >> i & 1)
        if (tuple(n for n in present if n in a[0]) in ok_a
                and tuple(n for n in present if n in b[0]) in ok_b):
            allowed.append(present)
    return names, tuple(sorted(allowed, key=lambda p: [atom_order(n) for n in p]))


def atom_order(atom) -> tuple:
    """Sort key of PRESENCE's atoms: the names, then the outside atoms (json_presence.outside)."""
    return (0, atom, ()) if isinstance(atom, str) else (1, "", atom[1])


def declared_types(schema: dict) -> set[str]:
    t = schema.get("type")
    types = set(TYPES) if t is None else ({t} if isinstance(t, str) else set(t))
    if "number" in types:
        types.add("integer")
    if schema.get("nullable") is True:
        types.add("null")
    return types


def type_list(schema: dict) -> list[str]:
    """The schema's types in TYPES order: the declared ones, every type where `type` is absent
    (a keyword of one type, `maxLength` say, leaves values of the others alone)."""
    types = declared_types(schema)
    return [t for t in TYPES if t in types]


def free_types(schema) -> set[str]:
    """The types whose every value ``schema`` accepts: declared, and no keyword of it reads
    them (only annotations and keywords of other types). Empty where anything else may
    reject a value (enum, not, anyOf, $ref, ...)."""
    if schema is True:
        return set(TYPES)
    if not isinstance(schema, dict):
        return set()
    keys = set(schema) - ANNOTATIONS - {"type", "nullable"}
    return {t for t in declared_types(schema) if keys <= OTHER_TYPES_ONLY[t]}


def without_types(schema: dict, removed: set[str]) -> dict | bool:
    """``schema`` less the values of the ``removed`` types (False where none is left)."""
    types = [t for t in type_list(schema) if t not in removed]
    out = {**schema, "type": types}
    if "integer" in removed and "number" in types:
        out[FRACTIONAL] = True  # numbers, but not integers: a nonzero digit after the point
    return out if types else False


def merge_schemas(a, b, ptr: str) -> dict | bool:
    """Conjunction of two schemas as one dict (exact, or UnsupportedSchemaError)."""
    if a is False or b is False:
        return False
    if isinstance(a, dict) and isinstance(b, dict) and _CONDITIONAL & a.keys() and _CONDITIONAL & b.keys():
        b = branch_if(b, ptr)  # two ifs: one as its branches (an anyOf, or an allOf part)
        if b is False:
            return False
    if a is True or a == {}:
        return b if b is not True else {}
    if b is True or b == {}:
        return a
    if "const" in a and "const" in b and _canon(a["const"]) != _canon(b["const"]):
        return False
    out = dict(a)
    positional = _merge_array_positions(out, a, b)
    for key, bv in b.items():
        if key in _IGNORED or key in ("items", "prefixItems") and (positional or key in a):
            continue
        if key not in out:
            out[key] = bv
        elif key == "pattern" and out[key] != bv and isinstance(bv, str):
            out[ALSO_PATTERNS] = tuple(dict.fromkeys((*out.get(ALSO_PATTERNS, ()), bv)))  # both must match
        elif key == "format" and out[key] != bv and isinstance(bv, str):
            out[ALSO_FORMATS] = tuple(dict.fromkeys((*out.get(ALSO_FORMATS, ()), bv)))  # both must hold
        else:
            out[key] = _merge_key(key, out[key], bv, a, b, ptr)
    _merge_additional(out, a, b, ptr)
    return out


def _merge_key(key: str, av, bv, a: dict, b: dict, ptr: str):
    if av == bv:
        return av
    if key == "type":  # a part that `not` left without integers (FRACTIONAL) adds none back
        ta = _type_set(av) - ({"integer"} if a.get(FRACTIONAL) else set())
        tb = _type_set(bv) - ({"integer"} if b.get(FRACTIONAL) else set())
        return sorted(ta & tb)
    if key == "required":
        return list(dict.fromkeys(list(av) + list(bv)))
    if key in _MAX_OF:
        return max(av, bv)
    if key in _MIN_OF:
        return min(av, bv)
    if key == "properties":
        return {k: _and(av.get(k), bv.get(k)) for k in list(av) + [k for k in bv if k not in av]}
    if key == "enum":
        return [v for v in av if any(_canon(v) == _canon(w) for w in bv)]
    if key in ("items", "additionalProperties", "propertyNames"):
        return {"allOf": [av, bv]}
    if key == "patternProperties":
        return {p: _and(av.get(p), bv.get(p)) for p in list(av) + [p for p in bv if p not in av]}
    if key == "dependentRequired":
        return {k: list(dict.fromkeys(list(av.get(k, [])) + list(bv.get(k, []))))
                for k in list(av) + [k for k in bv if k not in av]}
    if key == "multipleOf":
        return _lcm(av, bv, ptr)
    if key == CONTAINS:
        return (*av, *[c for c in bv if c not in av])
    if key in (EXCLUDED, NOT_PATTERNS, ALSO_PATTERNS, ALSO_FORMATS):
        return tuple(dict.fromkeys((*av, *bv)))
    if key == PRESENCE:
        if len(set(av[0]) | set(bv[0])) > MAX_PRESENCE_NAMES:
            raise UnsupportedSchemaError.at("allOf", ptr, f"required names under anyOf, oneOf or not: "
                                            f"more than {MAX_PRESENCE_NAMES} names in one object")
        return merge_presence(av, bv)
    if key in ("anyOf", "oneOf") and isinstance(av, list) and isinstance(bv, list):
        # (A1 or A2) and (B1 or B2) is (A1 and (B1 or B2)) or (A2 and (B1 or B2)); for oneOf,
        # exactly one Ai holding beside exactly one Bj: the same with exactly one branch.
        return [{"allOf": [branch, {key: bv}]} for branch in av]
    if key == "allOf":
        return list(av) + list(bv)
    if key == "not":  # (not A) and (not B) is not (A or B)
        return {"anyOf": [av, bv]}
    if key == "uniqueItems" and isinstance(av, bool) and isinstance(bv, bool):
        return av or bv
    if key not in ASSERTIONS:
        return av  # an annotation: either value will do
    raise UnsupportedSchemaError.at("allOf", ptr, f"cannot merge differing '{key}'")


def _lcm(a, b, ptr: str):
    """The smallest step both multipleOf steps divide (decimal steps: p / 10**q)."""
    from decimal import Decimal

    from .numbers import as_decimal

    try:
        da, db = as_decimal(a), as_decimal(b)
    except ValueError as e:
        raise UnsupportedSchemaError.at("allOf", ptr, f"multipleOf: {e}") from e
    q = max(-da.normalize().as_tuple().exponent, -db.normalize().as_tuple().exponent, 0)
    ia, ib = int(da.scaleb(q)), int(db.scaleb(q))
    if ia <= 0 or ib <= 0 or da.scaleb(q) != ia or db.scaleb(q) != ib:
        raise UnsupportedSchemaError.at("allOf", ptr, f"multipleOf {a!r} and {b!r} cannot be merged")
    value = Decimal(math.lcm(ia, ib)).scaleb(-q)
    return int(value) if value == int(value) else float(value)


def _and(x, y):
    """Both of two member schemas, either absent (None) from its part: a `true` one met with
    an absent one stays `true` (a declared name that takes any value)."""
    if x is None or x is True:
        return True if y is None else y
    if y is None or y is True:
        return x
    return {"allOf": [x, y]}


def _merge_array_positions(out: dict, a: dict, b: dict) -> bool:
    """`items` covers only positions past its own schema's prefixItems: merge per position
    (True when both parts had array positions to merge)."""
    if not ({"items", "prefixItems"} & a.keys() and {"items", "prefixItems"} & b.keys()):
        return False
    pa, pb = a.get("prefixItems", []), b.get("prefixItems", [])
    ia, ib = a.get("items", True), b.get("items", True)
    prefix = []
    for i in range(max(len(pa), len(pb))):
        xa = pa[i] if i < len(pa) else ia
        xb = pb[i] if i < len(pb) else ib
        prefix.append(_and(xa, xb))
    out.pop("prefixItems", None)
    if prefix:
        out["prefixItems"] = prefix
    out["items"] = _and(ia, ib)
    return True


def _merge_additional(out: dict, a: dict, b: dict, ptr: str) -> None:
    """A part's additionalProperties also governs the other part's extra property names."""
    if "properties" in out:
        out["properties"] = dict(out["properties"])  # never mutate the caller's schema
    for this, other in ((a, b), (b, a)):
        if "additionalProperties" not in this or this["additionalProperties"] is True:
            continue
        theirs = other.get("patternProperties")
        if theirs is not None and set(theirs) != set(this.get("patternProperties", {})):
            if this.get("properties") or this.get("patternProperties"):
                # Which names this part's additionalProperties covers depends on its own names.
                raise UnsupportedSchemaError.at("allOf", ptr, "cannot merge additionalProperties with "
                                                "another part's patternProperties")
            # It covers every name (JReleaser's map of distributions, its keys under a pattern
            # in one part): the other part's pattern members too.
            out["patternProperties"] = {p: _and(v, this["additionalProperties"])
                                        for p, v in out["patternProperties"].items()}
        own = this.get("properties", {})
        for name in other.get("properties", {}):
            if name not in own:
                out["properties"][name] = _and(out["properties"][name],
                                               this["additionalProperties"])
        for name in other.get("required", []):
            if name not in own and name not in out.get("properties", {}):
                out.setdefault("properties", {})[name] = this["additionalProperties"]


def _type_set(t) -> set[str]:
    types = {t} if isinstance(t, str) else set(t)
    if "number" in types:
        types.add("integer")
    return types


def _canon(v):
    if isinstance(v, bool) or v is None:
        return (type(v).__name__, v)
    if isinstance(v, (int, float)):
        return ("number", float(v))
    if isinstance(v, str):
        return ("string", v)
    return ("json", json.dumps(v, sort_keys=True))


def _value_type(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int) or isinstance(v, float) and v.is_integer():
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}[type(v)]


def _possible_types(s) -> set[str]:
    """A superset of the types of the values ``s`` accepts: its declared types, narrowed by
    its listed values, by each allOf part and by the union of its anyOf (oneOf) branches."""
    if not isinstance(s, dict):
        return set(TYPES) if s is not False else set()
    values = s["enum"] if "enum" in s else [s["const"]] if "const" in s else None
    types = set(declared_types(s))
    for key in ("anyOf", "oneOf"):
        if isinstance(s.get(key), list) and s[key]:
            types &= set().union(*(_possible_types(b) for b in s[key]))
    for part in s.get("allOf", ()) if isinstance(s.get("allOf"), list) else ():
        types &= _possible_types(part)
    if values is not None:
        types &= {_value_type(v) for v in values} | {"number" for v in values if isinstance(v, float)}
    return types


def provably_disjoint(a, b) -> bool:
    """True only when no JSON value can satisfy both (so oneOf == anyOf for them)."""
    for x, y in ((a, b), (b, a)):
        if isinstance(x, dict) and isinstance(x.get("allOf"), list):  # each part narrows x
            own = {k: v for k, v in x.items() if k != "allOf"}
            return any(provably_disjoint(part, y) for part in [own, *x["allOf"]])
    ta, tb = _possible_types(a), _possible_types(b)
    if not (ta & tb) or _values_negated(a, b) or _values_negated(b, a) or _disjoint_values(a, b, ta & tb):
        return True
    for x, y in ((a, b), (b, a)):
        for key in ("anyOf", "oneOf"):  # x's values are among its branches' values
            if isinstance(x, dict) and isinstance(x.get(key), list) and x[key] and all(
                    provably_disjoint(branch, y) for branch in x[key]):
                return True
    return False


def _disjoint_values(a, b, common: set[str]) -> bool:
    """Disjoint by listed values, patterns, or object members (``common``: the types both
    may have)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    va, vb = _values(a), _values(b)
    if va is not None and vb is not None:
        return not ({_canon(v) for v in va} & {_canon(v) for v in vb})
    if common == {"string"}:
        return _values_fail_pattern(va, b) or _values_fail_pattern(vb, a) or _patterns_disjoint(
            a.get("pattern"), b.get("pattern"))
    return common == {"object"} and (_discriminated(a, b) or _objects_fail(a, b) or _objects_fail(b, a)
                                     or _names_excluded(a, b) or _names_excluded(b, a))


def _values_negated(a, b) -> bool:
    """Every value ``a`` lists is one ``b``'s `not` lists (a tagged union's catch-all branch:
    {"not": {"enum": [the other tags]}})."""
    if not isinstance(a, dict) or not isinstance(b, dict) or not isinstance(b.get("not"), dict):
        return False
    va, neg = _values(a), b["not"]
    vn = _values(neg) if set(neg) - ANNOTATIONS <= {"enum", "const"} else None
    return va is not None and vn is not None and {_canon(v) for v in va} <= {_canon(v) for v in vn}


def _values_fail_pattern(values, s: dict) -> bool:
    """Whether no string of ``values`` matches the pattern of ``s`` (None: no values)."""
    from .errors import ConstraintError
    from .json_leaves import pattern_matches

    pattern = s.get("pattern")
    if values is None or not isinstance(pattern, str):
        return False
    try:
        return not any(isinstance(v, str) and pattern_matches(pattern, v) for v in values)
    except ConstraintError:
        return False


@lru_cache(maxsize=1024)
def _patterns_disjoint(pa, pb) -> bool:
    """Whether no string matches both patterns (their search automata intersect empty)."""
    from .errors import ConstraintError
    from .fsm import product, trim_and_minimize
    from .json_leaves import leaf_budget

    if not isinstance(pa, str) or not isinstance(pb, str):
        return False
    try:
        both = product(_search_leaf(pa), _search_leaf(pb), "and", leaf_budget())
        return trim_and_minimize(both, minimize=False).is_empty()
    except ConstraintError:
        return False


@lru_cache(maxsize=512)
def _search_leaf(pattern: str):
    from .json_leaves import leaf_budget
    from .regex import search_dfa

    return search_dfa(pattern, leaf_budget())


def exclusive_branches(a, b) -> bool:
    """True only when no value generated from either oneOf branch satisfies the other, so
    generating their anyOf is exact. What one branch generates (its inferred types, or its
    listed values) is tested against the other's whole language, never against what we
    would generate from it."""
    return provably_disjoint(a, b) or _generated_fail(a, b) and _generated_fail(b, a)


def _generated_fail(a, b) -> bool:
    """Every value generated from ``a`` fails ``b``."""
    if a is False or b is False:
        return True
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    common = _generated_types(a) & _possible_types(b)
    if not common:
        return True
    va, vb = _values(a), _values(b)
    if va is not None:
        return vb is not None and not ({_canon(v) for v in va} & {_canon(v) for v in vb})
    return common == {"object"} and _objects_fail(a, b)


def _generated_types(s: dict) -> set[str]:
    """The types the compiler generates for a flattened schema (its language's types where
    branching keywords could add others)."""
    values = _values(s)
    if values is not None:
        return _possible_types(s)
    if {"anyOf", "oneOf", "if", "then", "else", "allOf", "$ref", "not"} & s.keys():
        return _possible_types(s)
    types = set(type_list(s))
    return types | {"integer"} if "number" in types else types


def _objects_fail(a: dict, b: dict) -> bool:
    """Every object ``a`` accepts fails ``b``: a name ``a`` requires has values there that
    ``b`` rejects (a disjoint const/enum/type, or the name forbidden), or a name ``b``
    requires is forbidden by ``a``."""
    a_props = a.get("properties", {}) if isinstance(a.get("properties"), dict) else {}
    for name in _required(a):
        theirs = _property_schema(b, name)
        if theirs is not None and provably_disjoint(a_props.get(name, True), theirs):
            return True
    return any(_property_schema(a, name) is False for name in _required(b))


def _names_excluded(a: dict, b: dict) -> bool:
    """Every object ``a`` accepts has a member, named among its declared properties (a closed
    object), and ``b`` forbids each of those names (CircleCI's logic: an object of one
    operator, or an object whose propertyNames exclude the operators)."""
    props = a.get("properties")
    if (not isinstance(props, dict) or a.get("patternProperties")
            or _false_if_false(a.get("additionalProperties", True)) is not False
            or not (_required(a) or isinstance(a.get("minProperties"), int) and a["minProperties"] >= 1)):
        return False
    return all(_property_schema(b, name) is False or _name_rejected(b.get("propertyNames"), name)
               for name, sub in props.items() if _false_if_false(sub) is not False)


def _name_rejected(names, name: str) -> bool:
    """Whether the propertyNames schema ``names`` rejects ``name`` (a validator decides; a
    schema with a $ref is not looked into)."""
    if names is False:
        return True
    if not isinstance(names, dict) or "$ref" in json.dumps(names):
        return False
    import jsonschema

    try:
        return not jsonschema.Draft202012Validator(names).is_valid(name)
    except jsonschema.exceptions.SchemaError:
        return False


def _required(s: dict) -> list[str]:
    names = s.get("required", [])
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def _property_schema(s: dict, name: str):
    """The schema ``s`` applies to property ``name`` as far as it is known without regex
    matching (False: the name is forbidden), or None."""
    names = s.get("propertyNames")
    if isinstance(names, dict) and _values(names) is not None and name not in _values(names):
        return False
    props = s.get("properties", {})
    if isinstance(props, dict) and name in props:
        return _false_if_false(props[name])
    if s.get("patternProperties"):
        return None
    extra = _false_if_false(s.get("additionalProperties", True))
    return extra if extra is False or isinstance(extra, dict) else None


def _false_if_false(s):
    """``s``, or False where it is written as a conjunction with false, or as the negation of
    a schema every value matches (``{"not": {}}``: a property name so forbidden)."""
    if isinstance(s, dict) and isinstance(s.get("allOf"), list) and any(p is False for p in s["allOf"]):
        return False
    if isinstance(s, dict) and "not" in s and set(s) - ANNOTATIONS == {"not"} and (
            s["not"] is True or isinstance(s["not"], dict) and set(s["not"]) <= ANNOTATIONS):
        return False
    return s


def _values(s: dict):
    return s["enum"] if "enum" in s else [s["const"]] if "const" in s else None


def _discriminated(a: dict, b: dict) -> bool:
    shared = set(a.get("required", [])) & set(b.get("required", []))
    for name in shared:
        pa = a.get("properties", {}).get(name)
        pb = b.get("properties", {}).get(name)
        if isinstance(pa, dict) and isinstance(pb, dict) and provably_disjoint(pa, pb):
            return True
    return False


def branch_if(schema: dict, ptr: str) -> dict | bool:
    """``if``/``then``/``else`` as anyOf[(if and then), (not if and else)]; then or else
    without if, or if without both, have no effect."""
    rest = {k: v for k, v in schema.items() if k not in ("if", "then", "else")}
    if "if" not in schema or "then" not in schema and "else" not in schema:
        return rest
    cond, then, other = schema["if"], schema.get("then", True), schema.get("else", True)
    if cond is True or cond is False:
        return {**rest, "allOf": [*rest.get("allOf", []), then if cond else other]}
    branches = [{"allOf": [cond, then]}, {"allOf": [{"not": cond}, other]}]
    if "anyOf" in rest:  # both hold: merged as allOf parts (json_merge distributes them)
        return {**rest, "allOf": [*rest.get("allOf", []), {"anyOf": branches}]}
    return {**rest, "anyOf": branches}
