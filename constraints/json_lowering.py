"""Keywords the compiler has no emitter for, rewritten into ones it has, each exactly or into a
subset of its language (never a superset); what cannot be is an UnsupportedSchemaError.

- `contains` / `minContains` / `maxContains`: one CONTAINS constraint, emitted exactly by
  json_compound where it can (items matching anywhere, counted); else, and beside
  unevaluatedItems, the first minContains items also satisfy the contains schema (so at
  least that many do), and at most maxContains match where the later positions provably
  cannot, else the array holds at most maxContains items.
- `unevaluatedProperties` / `unevaluatedItems`: the names (positions) that the schema and its
  in-place applicators (allOf, $ref, anyOf/oneOf, if/then/else) surely evaluate, computed on
  the document: what no applicator can evaluate is then governed by the keyword. Branches
  count only what every branch evaluates (fewer evaluated names: a smaller language).
- `dependentSchemas`: one anyOf case per choice of which watched names are present, each with
  the schemas its present names bring; requirements between the cases prune them.

Runs on the output of json_drafts.normalize_drafts: every $ref is a root-relative pointer.
"""

from __future__ import annotations

from .errors import InvalidConstraintError, UnsupportedSchemaError
from .json_drafts import subschemas
from .json_keywords import ANNOTATIONS
from .json_merge import CONTAINS, provably_disjoint

_MAX_CASES = 64
_IN_PLACE = ("allOf", "anyOf", "oneOf", "$ref", "if", "dependentSchemas")


def lower_keywords(root):
    """``root`` with contains, unevaluated* and dependentSchemas lowered, in place."""
    if isinstance(root, dict):
        _Lowering(root).walk(root, "")
    return root


class _Lowering:
    def __init__(self, root: dict):
        self.root = root
        self.done: set[int] = set()

    def walk(self, node, ptr: str) -> None:
        if not isinstance(node, dict) or id(node) in self.done:
            return
        self.done.add(id(node))
        if {"contains", "minContains", "maxContains"} & node.keys():
            _lower_contains(node, ptr)
        if "unevaluatedProperties" in node:
            self._lower_unevaluated_properties(node, ptr)
        if "unevaluatedItems" in node:
            self._lower_unevaluated_items(node, ptr)
        if "dependentSchemas" in node:
            _lower_dependent_schemas(node, ptr)
        for key, sub_key, sub in list(subschemas(node)):
            self.walk(sub, f"{ptr}/{key}" if sub_key is None else f"{ptr}/{key}/{_escape(sub_key)}")
        target = self.target(node)
        if target is not None:
            self.walk(target, node["$ref"][1:])

    def target(self, node: dict):
        ref = node.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            return None
        from .json_drafts import resolve_pointer

        return resolve_pointer(self.root, ref)

    # ---- unevaluatedProperties ------------------------------------------------------------

    def _lower_unevaluated_properties(self, node: dict, ptr: str) -> None:
        rest = node.pop("unevaluatedProperties")
        if rest is True or rest == {}:
            return
        if not any(k in node for k in _IN_PLACE):
            node.setdefault("additionalProperties", rest)  # evaluated: its own names only
            return
        evaluated = self.evaluated_names(node, set())
        if evaluated is None:
            return  # some applicator evaluates every name
        names, patterns = evaluated
        if rest is False:
            allowed = [{"enum": sorted(names)}] if names else []
            allowed += [{"pattern": p} for p in sorted(patterns)]
            only = False if not allowed else allowed[0] if len(allowed) == 1 else {"anyOf": allowed}
            node.setdefault("allOf", []).append({"propertyNames": only})
        else:
            part = {"properties": {n: {} for n in sorted(names)}, "additionalProperties": rest}
            if patterns:
                part["patternProperties"] = {p: {} for p in sorted(patterns)}
            node.setdefault("allOf", []).append(part)

    def evaluated_names(self, node, seen: set):
        """(names, patterns) every valid instance has evaluated, or None for all names."""
        if node is False:
            return None  # never valid: nothing to constrain
        if not isinstance(node, dict) or id(node) in seen:
            return frozenset(), frozenset()
        seen = seen | {id(node)}
        if "additionalProperties" in node or "unevaluatedProperties" in node:
            return None
        parts = [(frozenset(_mapping(node, "properties")), frozenset(_mapping(node, "patternProperties")))]
        parts += [self.evaluated_names(p, seen) for p in _list(node, "allOf")]
        target = self.target(node)
        if target is not None:
            parts.append(self.evaluated_names(target, seen))
        for key in ("anyOf", "oneOf"):
            if _list(node, key):
                parts.append(_meet([self.evaluated_names(b, seen) for b in node[key]]))
        if "if" in node:
            taken = _join([self.evaluated_names(node["if"], seen), self.evaluated_names(node.get("then", True), seen)])
            parts.append(_meet([taken, self.evaluated_names(node.get("else", True), seen)]))
        return _join(parts)

    # ---- unevaluatedItems -----------------------------------------------------------------

    def _lower_unevaluated_items(self, node: dict, ptr: str) -> None:
        rest = node.pop("unevaluatedItems")
        if rest is True or rest == {}:
            return
        if not any(k in node for k in _IN_PLACE):
            node.setdefault("items", rest)  # evaluated: its own prefixItems (and items)
            return
        count = self.evaluated_items(node, set())
        if count is None:
            return
        part = {"maxItems": count} if rest is False else {"prefixItems": [{}] * count, "items": rest}
        node.setdefault("allOf", []).append(part)

    def evaluated_items(self, node, seen: set):
        """How many leading positions every valid instance has evaluated (None: all)."""
        if node is False:
            return None
        if not isinstance(node, dict) or id(node) in seen:
            return 0
        seen = seen | {id(node)}
        if "items" in node or "unevaluatedItems" in node:
            return None
        counts = [len(_list(node, "prefixItems"))]
        counts += [self.evaluated_items(p, seen) for p in _list(node, "allOf")]
        target = self.target(node)
        if target is not None:
            counts.append(self.evaluated_items(target, seen))
        for key in ("anyOf", "oneOf"):
            if _list(node, key):
                counts.append(_fewest([self.evaluated_items(b, seen) for b in node[key]]))
        if "if" in node:
            taken = _most([self.evaluated_items(node["if"], seen), self.evaluated_items(node.get("then", True), seen)])
            counts.append(_fewest([taken, self.evaluated_items(node.get("else", True), seen)]))
        return _most(counts)


def _join(parts):
    """Names evaluated by all of these applicators together."""
    if any(p is None for p in parts):
        return None
    return frozenset().union(*(p[0] for p in parts)), frozenset().union(*(p[1] for p in parts))


def _meet(parts):
    """Names evaluated whichever of these branches is the valid one."""
    known = [p for p in parts if p is not None]
    if not known:
        return None
    return frozenset.intersection(*(p[0] for p in known)), frozenset.intersection(*(p[1] for p in known))


def _most(counts):
    return None if any(c is None for c in counts) else max(counts)


def _fewest(counts):
    known = [c for c in counts if c is not None]
    return min(known) if known else None


# ---- contains ------------------------------------------------------------------------------

def _lower_contains(node: dict, ptr: str) -> None:
    """contains / minContains / maxContains as one CONTAINS constraint (emitted exactly where
    json_compound can: matching items anywhere), or, beside unevaluatedItems (which counts
    the items contains evaluates as its first ones), the prefix form of contains_as_prefix."""
    if "contains" not in node:
        node.pop("minContains", None)  # no effect without contains
        node.pop("maxContains", None)
        return
    sub = node.pop("contains")
    lo = _count(node.pop("minContains", 1), f"{ptr}/minContains")
    hi = node.pop("maxContains", None)
    hi = None if hi is None else _count(hi, f"{ptr}/maxContains")
    if lo == 0 and hi is None:
        return
    if "unevaluatedItems" in node:
        part = contains_as_prefix(node, (sub, lo, hi))
        if part:
            node.setdefault("allOf", []).append(part)
        return
    node[CONTAINS] = (*node.get(CONTAINS, ()), (sub, lo, hi))


def contains_as_prefix(node: dict, constraint: tuple) -> dict:
    """A subset of one contains constraint (sub, lo, hi) of ``node`` as an allOf part: the
    first lo items also satisfy sub (so at least lo do); at most hi match where the later
    positions provably cannot, else the array holds at most hi items."""
    sub, lo, hi = constraint
    part = {}
    if lo:
        part = {"prefixItems": [sub] * lo, "minItems": lo}
    if hi is not None:
        if lo > hi:
            part["maxItems"] = lo - 1  # no array can: minItems > maxItems
        elif not _later_items_disjoint(node, sub, lo):
            part["maxItems"] = hi  # at most hi items, so at most hi matches
    return part


def _later_items_disjoint(node: dict, sub, start: int) -> bool:
    """No item at position >= start can satisfy ``sub`` (this schema's own item schemas
    already exclude it; other parts can only narrow them)."""
    later = _list(node, "prefixItems")[start:] + [node.get("items", True)]
    return all(provably_disjoint(s, sub) for s in later)


# ---- dependentSchemas ---------------------------------------------------------------------

def _lower_dependent_schemas(node: dict, ptr: str) -> None:
    where = f"{ptr}/dependentSchemas"
    deps = node.pop("dependentSchemas")
    if not isinstance(deps, dict):
        raise InvalidConstraintError(f"dependentSchemas at {where} must be an object")
    cases = [(frozenset(), frozenset(), ())]  # (absent names, present names, schemas)
    for name, sub in deps.items():
        grown = []
        for absent, present, extra in cases:
            if name in absent:
                grown.append((absent, present, extra))
                continue
            if name not in present:
                grown.append((absent | {name}, present, extra))
            case = _with_dependency(absent, present | {name}, extra, sub)
            if case is not None:
                grown.append(case)
        cases = list(dict.fromkeys(grown))
        if len(cases) > _MAX_CASES:
            raise UnsupportedSchemaError.at("dependentSchemas", where, f"expands to more than {_MAX_CASES} cases")
    open_object = not {"properties", "additionalProperties", "patternProperties", "$ref", "allOf"} & node.keys()
    schemas = [_case_schema(case, open_object) for case in cases]
    if len(schemas) == 1:
        node.setdefault("allOf", []).append(schemas[0])
    elif "anyOf" in node or "oneOf" in node:
        raise UnsupportedSchemaError.at("dependentSchemas", where, "next to anyOf/oneOf is not supported")
    else:
        node["anyOf"] = schemas


def _with_dependency(absent, present, extra, sub):
    """The case extended by ``sub`` (a name-presence schema is folded in), or None if it
    contradicts the case."""
    if sub is False:
        return None
    keys = set(sub) - ANNOTATIONS if isinstance(sub, dict) else set()
    if keys == {"required"} and _names(sub["required"]):
        present = present | set(sub["required"])
    elif keys == {"not"} and isinstance(sub["not"], dict) and set(sub["not"]) - ANNOTATIONS == {"required"} \
            and _names(sub["not"]["required"]) and len(sub["not"]["required"]) == 1:
        absent = absent | set(sub["not"]["required"])
    elif sub is not True and keys:
        extra = extra + (_Frozen(sub),)
    if absent & present:
        return None
    return frozenset(absent), frozenset(present), extra


class _Frozen:
    """A schema in a case (compared by identity: the same dependency's schema)."""

    __slots__ = ("schema",)

    def __init__(self, schema):
        self.schema = schema


def _case_schema(case, open_object: bool) -> dict:
    absent, present, extra = case
    out = {}
    if present:
        out["required"] = sorted(present)
    if absent and open_object:  # declaring them would close an object that allows any names
        out["propertyNames"] = {"not": {"enum": sorted(absent)}}
    elif absent:
        out["properties"] = {n: False for n in sorted(absent)}
    if extra:
        out["allOf"] = [e.schema for e in extra]
    return out


# ---- helpers -------------------------------------------------------------------------------

def _names(value) -> bool:
    return isinstance(value, list) and all(isinstance(n, str) for n in value)


def _list(node: dict, key: str) -> list:
    value = node.get(key)
    return value if isinstance(value, list) else []


def _mapping(node: dict, key: str) -> dict:
    value = node.get(key)
    return value if isinstance(value, dict) else {}


def _count(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
        raise InvalidConstraintError(f"{where.rsplit('/', 1)[-1]} at {where} must be a non-negative integer")
    return int(value)


def _escape(name) -> str:
    return str(name).replace("~", "~0").replace("/", "~1")


__all__ = ["lower_keywords"]
