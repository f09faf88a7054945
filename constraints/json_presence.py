"""Which of a few names an object has: `required` under anyOf / oneOf / allOf / not, as one set.

Schemas say "exactly one of min, minimum, min frequency", "not both repeat and repeat ratio" or
"none of these, or exactly one" with combinators whose leaves are only `required` lists
(SchemaStore's TSON, among others). Each such combinator is a predicate on which of its names
are present, so over the few names it mentions it is the set of presence patterns it allows:
every subset of the names, each tried. The compiler keeps that set as one internal keyword,
PRESENCE (names, allowed patterns), and emit_object writes the object once, tracking which of
the names it has written (as it does for dependentRequired) and closing it only on an allowed
pattern: exact, where branching into one object per pattern would copy the object many times
(three such predicates over eight names: 3 x 4 x 4 = 48 copies), and where `not` of a oneOf or
a oneOf of overlapping branches has no exact complement among our other rewrites.

A `required` holds for every value that is not an object, so a predicate holds for those as it
does where every name is present; where it does not, the schema keeps objects only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from itertools import combinations

from .json_keywords import ANNOTATIONS
from .json_merge import MAX_PRESENCE_NAMES, PRESENCE, merge_presence, type_list

MAX_NAMES = 8  # names a presence keyword tracks: at most 2**8 patterns, tried one by one
_MAX_DEPTH = 6  # nesting of combinators read
_COMBINATORS = ("anyOf", "oneOf", "allOf", "not")

Predicate = Callable[[frozenset], bool]


def lift_presence(schema: dict) -> dict | bool:
    """``schema`` with its predicate combinators (a `not`, an anyOf or a oneOf whose every
    branch reads only `required` lists) folded into PRESENCE, where that is what makes them
    exact: a `not` or a branch holding a combinator, or two of them side by side (a `not` of
    several names beside a oneOf has no rewrite of its own). A lone oneOf / anyOf of plain
    `required` lists or a lone `not` of one list stay for the branch and `not` rewrites, which
    handle them already. False where no value is left."""
    keys = [k for k in ("not", "anyOf", "oneOf") if k in schema]  # most schemas: none
    if not keys:
        return schema
    keys = [k for k in keys if _reads_required_only(schema[k] if k == "not" else {k: schema[k]})]
    if not keys or not _worth_lifting(schema, keys) or "object" not in type_list(schema):
        return schema
    try:
        text = json.dumps({k: schema[k] for k in keys}, sort_keys=True)
    except (TypeError, ValueError):
        return schema
    found = _patterns(text)  # the same combinators come back once per track an object has
    if found is None:
        return schema
    order, allowed, others_pass = found
    if PRESENCE in schema and len(set(order) | set(schema[PRESENCE][0])) > MAX_PRESENCE_NAMES:
        return schema
    out = {k: v for k, v in schema.items() if k not in keys}
    if not others_pass:  # a value that is not an object fails it
        out["type"] = ["object"]
    merged = merge_presence(out.get(PRESENCE), (order, allowed))
    if not merged[1]:  # no object passes
        others = [t for t in type_list(out) if t != "object"]
        return {**out, "type": others} if others else False
    out[PRESENCE] = merged
    return out


@lru_cache(maxsize=1024)
def _patterns(text: str) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...], bool] | None:
    """For combinators (their JSON text) read as predicates: the names they read (sorted), the
    patterns of present names they allow (each sorted), and whether a value that is not an
    object passes; None past MAX_NAMES names."""
    found = predicate(json.loads(text))
    if found is None or len(found[1]) > MAX_NAMES:
        return None
    test, names = found
    order = tuple(sorted(names))
    allowed = tuple(sorted(tuple(sorted(s)) for s in _subsets(order) if test(s)))
    return order, allowed, test(names)


def _worth_lifting(schema: dict, keys: list[str]) -> bool:
    if len(keys) > 1:
        return True  # a `not` beside a branching, or two branchings of names
    value = schema[keys[0]]
    if keys[0] == "not":
        return not _plain_required(value)
    return any(not _plain_required(b) for b in value)


def _reads_required_only(node, depth: int = 0) -> bool:
    """Whether ``node`` is a predicate (``predicate``): `required` lists, true and false,
    under anyOf / oneOf / allOf / not; read without building it."""
    if node is True or node is False:
        return True
    if not isinstance(node, dict) or depth > _MAX_DEPTH:
        return False
    keys = node.keys() - ANNOTATIONS
    if not keys or not keys <= _PREDICATE_KEYS:
        return False
    if "required" in keys and not (isinstance(node["required"], list)
                                   and all(isinstance(n, str) for n in node["required"])):
        return False
    if "not" in keys and not _reads_required_only(node["not"], depth + 1):
        return False
    for key in ("anyOf", "oneOf", "allOf"):
        branches = node.get(key)
        if key in keys and not (isinstance(branches, list) and branches
                                and all(_reads_required_only(b, depth + 1) for b in branches)):
            return False
    return True


_PREDICATE_KEYS = frozenset({"required", *_COMBINATORS})


def _plain_required(node) -> bool:
    return isinstance(node, dict) and set(node) - ANNOTATIONS == {"required"}


def predicate(node, depth: int = 0) -> tuple[Predicate, frozenset] | None:
    """``node`` as a predicate on the set of names present, and the names it reads; None
    where it reads anything else (a property's schema, a count, a $ref)."""
    if node is True or node is False:
        return (lambda s, v=node: v), frozenset()
    if not isinstance(node, dict) or depth > _MAX_DEPTH:
        return None
    keys = set(node) - ANNOTATIONS
    if not keys or not keys <= {"required", *_COMBINATORS}:
        return None
    parts: list[Predicate] = []
    names: set[str] = set()
    if "required" in keys:
        need = node["required"]
        if not isinstance(need, list) or not all(isinstance(n, str) for n in need):
            return None
        need = frozenset(need)
        parts.append(lambda s, need=need: need <= s)
        names |= need
    if "not" in keys:
        inner = predicate(node["not"], depth + 1)
        if inner is None:
            return None
        parts.append(lambda s, p=inner[0]: not p(s))
        names |= inner[1]
    for key in ("anyOf", "oneOf", "allOf"):
        if key not in keys:
            continue
        branches = node[key]
        if not isinstance(branches, list) or not branches:
            return None
        found = [predicate(b, depth + 1) for b in branches]
        if any(f is None for f in found):
            return None
        preds = tuple(f[0] for f in found)
        names |= frozenset().union(*(f[1] for f in found))
        if key == "anyOf":
            parts.append(lambda s, ps=preds: any(p(s) for p in ps))
        elif key == "oneOf":
            parts.append(lambda s, ps=preds: sum(p(s) for p in ps) == 1)
        else:
            parts.append(lambda s, ps=preds: all(p(s) for p in ps))
    if len(names) > MAX_NAMES:
        return None
    return (lambda s, ps=tuple(parts): all(p(s) for p in ps)), frozenset(names)


def _subsets(names: tuple[str, ...]):
    for k in range(len(names) + 1):
        for chosen in combinations(names, k):
            yield frozenset(chosen)
