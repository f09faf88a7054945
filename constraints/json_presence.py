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

A predicate may also read `propertyNames` as an enum (or const) of names, with a count
(minProperties / maxProperties) beside it ("only these names, at least two of them": TSON's
partials). Such a node is an atom of its own, the object having a member named outside the
enum (``outside``), not written (the count is then of the enum's names present); emit_object
sets the atom on a declared name outside the enum or an extra member whose name is.

Every leaf holds for a value that is not an object (`required`, propertyNames and the counts
read objects only): a predicate is evaluated once for those; where it fails, the schema keeps
objects only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from itertools import combinations

from .json_keywords import ANNOTATIONS
from .json_merge import MAX_PRESENCE_NAMES, PRESENCE, atom_order, merge_presence, type_list

MAX_NAMES = 8  # names a presence keyword tracks: at most 2**8 patterns, tried one by one
_MAX_DEPTH = 6  # nesting of combinators read
_COMBINATORS = ("anyOf", "oneOf", "allOf", "not")

Predicate = Callable[[frozenset | None], bool]  # the atoms present; None: not an object
_OUTSIDE = "outside"


def outside(names) -> tuple[str, tuple[str, ...]]:
    """The atom "a member whose name is not one of ``names``"."""
    return (_OUTSIDE, tuple(sorted(set(names))))


def is_name(atom) -> bool:
    return isinstance(atom, str)


def atom_holds(atom, value: dict) -> bool:
    """Whether the object ``value`` has ``atom``: the name, or a member named outside."""
    return atom in value if isinstance(atom, str) else any(k not in atom[1] for k in value)


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
    order = tuple(sorted(names, key=atom_order))
    allowed = tuple(sorted((tuple(a for a in order if a in s) for s in _subsets(order) if test(s)),
                           key=lambda p: [atom_order(a) for a in p]))
    return order, allowed, test(None)


def _worth_lifting(schema: dict, keys: list[str]) -> bool:
    if len(keys) > 1:
        return True  # a `not` beside a branching, or two branchings of names
    value = schema[keys[0]]
    if keys[0] == "not":
        return not _plain_required(value)
    return any(not _plain_required(b) for b in value)


def _reads_required_only(node, depth: int = 0) -> bool:
    """Whether ``node`` is a predicate (``predicate``): `required` lists, true and false,
    enumerated propertyNames with their counts, under anyOf / oneOf / allOf / not; read
    without building it."""
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
    if keys & _COUNTS and _enumerated(node.get("propertyNames")) is None:
        return False
    if "not" in keys and not _reads_required_only(node["not"], depth + 1):
        return False
    for key in ("anyOf", "oneOf", "allOf"):
        branches = node.get(key)
        if key in keys and not (isinstance(branches, list) and branches
                                and all(_reads_required_only(b, depth + 1) for b in branches)):
            return False
    return True


_COUNTS = frozenset({"minProperties", "maxProperties"})
_PREDICATE_KEYS = frozenset({"required", "propertyNames", *_COUNTS, *_COMBINATORS})


def _enumerated(names) -> frozenset | None:
    """The names a propertyNames schema lists (an enum or const of strings, a string type
    beside it), None for any other."""
    if not isinstance(names, dict) or not set(names) - ANNOTATIONS <= {"enum", "const", "type"}:
        return None
    if names.get("type", "string") not in ("string", ["string"]):
        return None
    values = names["enum"] if "enum" in names else [names["const"]] if "const" in names else None
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        return None
    out = frozenset(values)
    return out if "const" not in names or names["const"] in out else frozenset()


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
    if not keys or not keys <= _PREDICATE_KEYS:
        return None
    parts: list[Predicate] = []
    names: set = set()
    if "required" in keys:
        need = node["required"]
        if not isinstance(need, list) or not all(isinstance(n, str) for n in need):
            return None
        need = frozenset(need)
        parts.append(lambda s, need=need: s is None or need <= s)
        names |= need
    if "propertyNames" in keys:
        listed = _enumerated(node["propertyNames"])
        if listed is None:
            return None
        atom = outside(listed)
        parts.append(lambda s, atom=atom: s is None or atom not in s)
        names |= {*listed, atom}
        for key in _COUNTS & keys:  # members are the listed names: counted over those present
            bound = node[key]
            if not isinstance(bound, int) or isinstance(bound, bool):
                return None
            most = key == "maxProperties"
            parts.append(lambda s, listed=listed, bound=bound, most=most: s is None or (
                len(s & listed) <= bound if most else len(s & listed) >= bound))
    elif keys & _COUNTS:
        return None  # a count of every member: extra ones included
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
