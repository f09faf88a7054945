"""What every part of a JSON schema's emission shares: the compile context of one schema,
$ref inlining and allOf merging (flatten), enum/const values, punctuation, shared leaves.

The emitters of values (json_schema) and of arrays and objects (json_compound) recurse into
each other through ``Ctx.emit_schema``, so the modules import in one direction: both import
this one, json_schema imports json_compound, nothing here imports either.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote

import jsonschema

from .budget import CompileBudget
from .errors import ConstraintError, InvalidConstraintError, UnsupportedSchemaError
from .fsm import ByteDFA, embed_dfa
from .json_keywords import ANNOTATIONS
from .json_leaves import pattern_matches
from .json_merge import (
    ALSO_PATTERNS,
    CONTAINS,
    EXCLUDED,
    FRACTIONAL,
    NOT_PATTERNS,
    PRESENCE,
    declared_types,
    merge_schemas,
    type_list,
)
from .json_presence import atom_holds
from .nfa import NFA, emit_alt, emit_bytes, emit_call, emit_repeat
from .unique_items import scalar_key

_FLEX_WS = b" \t\n"
_FLEX_WS_MAX = 8
LEAF_CALL_MIN_STATES = 4


@dataclass(slots=True)
class Ctx:
    """The compile context of one schema: its root (for $refs), options, budget, and the
    pushdown rules met so far."""

    root: object
    lenient: bool
    flexible: bool
    budget: CompileBudget
    # The emitter of any subschema (json_schema.emit_schema), called by arrays and objects.
    emit: Callable[..., int]
    validator: object = field(default=None)
    # Pushdown rules in call order: a recursive $ref (str) or a shared leaf (ByteDFA) -> the
    # pointer it was first met at; rule k is called by symbol CALL_BASE + k.
    rules: dict[str | ByteDFA, str] = field(default_factory=dict)

    def rule_index(self, key: str | ByteDFA, ptr: str) -> int:
        if key not in self.rules:
            self.rules[key] = ptr
            self._rule_ids[key] = len(self._rule_ids)
        return self._rule_ids[key]

    _rule_ids: dict[str | ByteDFA, int] = field(default_factory=dict)
    inline_leaves: bool = False  # emitting a fragment that becomes a plain DFA: no calls
    # canonical_key's tokens of this compile's dicts and lists: by identity, and by text
    keys_by_id: dict[int, tuple[object, str]] = field(default_factory=dict)
    keys_by_text: dict[str, str] = field(default_factory=dict)

    def canonical(self, value) -> str:
        """``canonical_key`` of ``value`` in this compile: equal for equal JSON."""
        return canonical_key(value, self.keys_by_id, self.keys_by_text)

    def emit_schema(self, nfa: NFA, start: int, schema, ptr: str, refs: tuple) -> int:
        """Emit ``schema`` (at JSON pointer ``ptr``, inside the expansion of ``refs``) from
        ``start``; returns the end state."""
        return self.emit(self, nfa, start, schema, ptr, refs)


@dataclass(frozen=True, slots=True)
class RefCall:
    """A $ref met again inside its own expansion: matched by calling the ref's rule. With
    ``siblings`` (keywords beside it, or a schema it is combined with), the call is to a rule
    of its own for the conjunction: the target expanded once more with the siblings merged in
    (json_schema), where meeting the ref again is a plain call."""

    ref: str
    siblings: dict | None = field(default=None, compare=False)
    text: str = ""  # canonical JSON of siblings: equal conjunctions are one rule

    def conjoined(self, other) -> RefCall:
        """This call and ``other`` (a schema or another call) both."""
        if isinstance(other, RefCall):
            other = other.as_schema()
        siblings = other if self.siblings is None else {"allOf": [self.siblings, other]}
        return RefCall(self.ref, siblings, json.dumps(siblings, sort_keys=True, default=repr))

    def as_schema(self) -> dict:
        """The schema the call stands for (its ref, then its siblings)."""
        ref = {"$ref": self.ref}
        return ref if self.siblings is None else {"allOf": [ref, self.siblings]}


_ENCODE_STR = json.encoder.encode_basestring_ascii
_SCALAR_TEXT = {True: "true", False: "false", None: "null"}


def canonical_key(value, texts: dict[int, tuple[object, str]], interned: dict[str, str]) -> str:
    """A key two values share exactly where their JSON (keys sorted, as ``json.dumps(value,
    sort_keys=True, default=repr)``) is equal: a scalar's JSON; a dict's or list's own
    members written with their values' keys, interned as a short token (``<n>``, never
    JSON). Equal tokens mean equal JSON by induction, so the tokens key the rules of one
    compile, and a nested object's key costs its own members, not its whole subtree: with
    whole JSON texts each object's text was written again at every level above it (Azure
    Pipelines: 363 MB of text, 4.6 of its 15 seconds under cProfile). ``texts`` keeps the token of each
    dict and list met, by identity (the entry holds the object, so its id is not reused);
    the emitters build new dicts rather than change the schema's, so a kept one stays right."""
    kind = type(value)
    if kind is str:
        return _ENCODE_STR(value)
    if kind is dict or kind is list or kind is tuple:
        hit = texts.get(id(value))
        if hit is not None:
            return hit[1]
        if kind is not dict:
            text = "[" + ", ".join([canonical_key(v, texts, interned) for v in value]) + "]"
        elif all(type(k) is str for k in value):
            text = "{" + ", ".join([f"{_ENCODE_STR(k)}: {canonical_key(value[k], texts, interned)}"
                                    for k in sorted(value)]) + "}"
        else:  # keys json.dumps would convert: its own spelling
            text = json.dumps(value, sort_keys=True, default=repr)
        token = interned.get(text)
        if token is None:
            token = interned[text] = f"<{len(interned)}>"
        texts[id(value)] = (value, token)
        return token
    if kind is int:
        return int.__repr__(value)
    if kind is bool or value is None:
        return _SCALAR_TEXT[value]
    return json.dumps(value, default=repr)  # floats (nan, inf), sets, RefCalls


def emit_leaf(ctx: Ctx, nfa: NFA, start: int, dfa: ByteDFA, ptr: str = "") -> int:
    """A terminal (string body, number, format, key): called as a rule of its own, so its DFA
    is shared by every schema that uses it (its token walks too) and never copied into the
    structure's automaton, whose size then adds to the leaves' instead of multiplying.
    Tiny leaves are inlined: a call costs more than it saves."""
    if ctx.inline_leaves or dfa.num_states < LEAF_CALL_MIN_STATES or dfa.accept[0]:
        return embed_dfa(nfa, start, dfa)
    return emit_call(nfa, start, ctx.rule_index(dfa, ptr))


def flatten(ctx: Ctx, schema: dict, ptr: str, refs: tuple) -> tuple[dict | bool | RefCall, tuple]:
    """Inline local $refs and merge allOf into one dict (siblings of $ref apply too).

    `refs` are the $refs being expanded around this point: meeting one again is recursion,
    returned as a RefCall of that ref's rule (exact, through the pushdown automaton).
    """
    while "$ref" in schema or "allOf" in schema:
        if "$ref" in schema:
            ref = schema["$ref"]
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            if ref in refs:
                if not is_annotation_only(rest) and not _implied_by_ref(ctx, rest, ref, ptr):
                    return RefCall(ref).conjoined(rest), refs
                return RefCall(ref), refs
            target = resolve_ref(ctx, ref, ptr)
            refs = refs + (ref,)
            schema = merge_or_fail(ctx, target, rest, ptr + "/$ref")
        else:
            parts = schema["allOf"]
            merged: dict | bool | RefCall = {k: v for k, v in schema.items() if k != "allOf"}
            parts, chain = split_if_chain(parts)
            if chain is not None:
                merged = merge_or_fail(ctx, merged, chain, f"{ptr}/allOf")
            for i, part in enumerate(parts):
                if isinstance(part, dict) and "$ref" in part:
                    part, refs = flatten(ctx, part, f"{ptr}/allOf/{i}", refs)
                merged = merge_or_fail(ctx, merged, part, f"{ptr}/allOf/{i}")
            schema = merged
        if schema is True:
            return {}, refs
        if schema is False or isinstance(schema, RefCall):
            return schema, refs
    return schema, refs


def split_if_chain(parts: list) -> tuple[list, dict | None]:
    """allOf parts that are ``{"if": {"properties": {P: {"enum": V}}}, "then": T, "else": E}``
    on one name P with disjoint value sets (a discriminated chain, as JSON Schema Store writes
    tagged unions), as one anyOf: per V_k, P in V_k, T_k and every other part's E; and P in
    none of them with every E. Objects without P (every `if` holds: every T) are not
    generated: a subset, over- never under-constrained. Returns (other parts, anyOf or None)."""
    tests = [_if_test(p) for p in parts]
    names = {t[0] for t in tests if t is not None}
    chain = [i for i, t in enumerate(tests) if t is not None]
    if len(chain) < 2 or len(names) != 1:
        return parts, None
    (name,) = names
    values = [tests[i][1] for i in chain]
    seen: list = []
    for vs in values:
        if any(json_equal(v, w) for v in vs for w in seen):
            return parts, None
        seen += vs
    elses = {i: parts[i]["else"] for i in chain if "else" in parts[i]}
    branches = []
    for i, vs in zip(chain, values):
        others = [e for j, e in elses.items() if j != i]
        branches.append({"type": "object", "required": [name], "properties": {name: {"enum": vs}},
                         "allOf": [parts[i].get("then", True), *others]})
    branches.append({"type": "object", "required": [name], "properties": {name: {"not": {"enum": seen}}},
                     "allOf": list(elses.values())})
    return [p for i, p in enumerate(parts) if i not in set(chain)], {"anyOf": branches}


def _if_test(part) -> tuple[str, list] | None:
    """(P, V) where ``part`` is an if/then/else whose `if` only tests P against values."""
    if not isinstance(part, dict) or "if" not in part or set(part) - ANNOTATIONS - {"if", "then", "else"}:
        return None
    cond = part["if"]
    if not isinstance(cond, dict) or set(cond) - ANNOTATIONS != {"properties"}:
        return None
    props = cond["properties"]
    if not isinstance(props, dict) or len(props) != 1:
        return None
    ((name, sub),) = props.items()
    if not isinstance(sub, dict) or set(sub) - ANNOTATIONS not in ({"enum"}, {"const"}):
        return None
    values = sub["enum"] if "enum" in sub else [sub["const"]]
    return (name, list(values)) if isinstance(values, list) and values else None


def _implied_by_ref(ctx: Ctx, siblings, ref: str, ptr: str) -> bool:
    """Whether every sibling of a recursive $ref is already said by its target: the same
    keyword with the same value, or a type the target's types fall within (``{"type":
    "object", "anyOf": [{"$ref": node}, ...]}`` with node an object), so the call alone is
    the conjunction."""
    if not isinstance(siblings, dict):
        return False
    target = resolve_ref(ctx, ref, ptr)
    if not isinstance(target, dict):
        return False
    for key in set(siblings) - ANNOTATIONS:
        if key == "type" and "type" in target:
            if not declared_types(target) <= declared_types(siblings):
                return False
        elif key not in target or not json_equal(siblings[key], target[key]):
            return False
    return True


_SHAPE_DEPTH = 3  # levels of $ref, anyOf/oneOf branches and properties the disjointness test reads
_SHAPE_WIDTH = 64  # branches or properties of one schema inlined; wider ones are read as written


def shape(ctx: Ctx, schema, depth: int = _SHAPE_DEPTH):
    """What the oneOf disjointness test reads of ``schema``: its $refs inlined, and those of its
    anyOf/oneOf branches and properties, ``depth`` levels deep (a recursive call stands for its
    target one level down). Where a $ref does not inline, True: any value, which is never
    disjoint from anything (the test stays sound)."""
    if isinstance(schema, RefCall):
        schema = schema.as_schema()
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema or "allOf" in schema:
        try:
            schema, _ = flatten(ctx, schema, "", ())
        except ConstraintError:
            return True
        if isinstance(schema, RefCall):
            return True
        if not isinstance(schema, dict):
            return schema
    if depth <= 0:
        return schema
    out = dict(schema)
    for key in ("anyOf", "oneOf"):
        if isinstance(out.get(key), list) and len(out[key]) <= _SHAPE_WIDTH:
            out[key] = [shape(ctx, b, depth - 1) for b in out[key]]
    props = out.get("properties")
    if isinstance(props, dict) and len(props) <= _SHAPE_WIDTH:
        out["properties"] = {name: shape(ctx, p, depth - 1) for name, p in props.items()}
    return out


def is_annotation_only(schema) -> bool:
    return schema is True or isinstance(schema, dict) and set(schema) <= ANNOTATIONS


def merge_or_fail(ctx: Ctx, a, b, ptr: str) -> dict | bool | RefCall:
    if isinstance(a, RefCall) or isinstance(b, RefCall):
        call, other = (a, b) if isinstance(a, RefCall) else (b, a)
        if other is False:
            return False
        if is_annotation_only(other) or _implied_by_ref(ctx, other, call.ref, ptr):
            return call
        return call.conjoined(other)
    try:
        return merge_schemas(a, b, ptr)
    except UnsupportedSchemaError:
        if ctx.lenient:
            return a if isinstance(a, dict) else b
        raise


def resolve_ref(ctx: Ctx, ref: str, ptr: str):
    if not isinstance(ref, str) or not ref.startswith("#") or (len(ref) > 1 and ref[1] != "/"):
        raise UnsupportedSchemaError.at("$ref", ptr, f"value {ref!r}: only local '#/...' refs")
    node = ctx.root
    for raw in ref[2:].split("/") if len(ref) > 1 else []:
        part = _unescape_pointer(raw)
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError) as e:
            raise InvalidConstraintError(f"$ref {ref!r} at {ptr or '/'} does not resolve") from e
    return node


def _unescape_pointer(part: str) -> str:
    return unquote(part).replace("~1", "/").replace("~0", "~")


def literal_texts(ctx: Ctx, schema: dict, ptr: str) -> list[bytes]:
    """The compact JSON of each enum/const value the schema accepts, one per distinct value
    (1 and 1.0 are the same value)."""
    values = schema["enum"] if "enum" in schema else [schema["const"]]
    if "enum" in schema and "const" in schema:
        values = [v for v in values if json_equal(v, schema["const"])]
    # Each value is checked against the other keywords: it is one of the enum's values by
    # construction, and the validator's own enum check is a scan of the enum (quadratic over
    # a long one: dependabot's 597 time zones).
    accepts = _value_check(ctx, {k: w for k, w in schema.items() if k not in ("enum", "const")})
    removed = [json.loads(t) for t in schema.get(EXCLUDED, ())]
    texts, seen, seen_scalars = [], [], set()
    for v in values:
        scalar = scalar_key(v)
        if scalar is not None and scalar in seen_scalars:
            continue
        try:
            ok = accepts(v)
        except jsonschema.exceptions.SchemaError as e:
            raise InvalidConstraintError(f"invalid schema at {ptr or '/'}: {e}") from e
        if ok and any(json_equal(v, w) for w in removed):  # a `not` merged in from outside
            ok = False
        if ok and isinstance(v, str) and (any(pattern_matches(p, v) for p in schema.get(NOT_PATTERNS, ()))
                                          or not all(pattern_matches(p, v) for p in schema.get(ALSO_PATTERNS, ()))):
            ok = False
        if ok and isinstance(v, list):  # contains, held apart from the keywords the validator reads
            ok = all(ctx.validator.evolve(schema=_contains_schema(c)).is_valid(v) for c in schema.get(CONTAINS, ()))
        if ok and isinstance(v, dict) and PRESENCE in schema:  # combinators json_presence folded in
            names, allowed = schema[PRESENCE]
            ok = tuple(n for n in names if atom_holds(n, v)) in allowed
        if ok and schema.get(FRACTIONAL) and isinstance(v, (int, float)) and not isinstance(v, bool):
            ok = v != int(v) if math.isfinite(v) else False  # `not` of integers (json_merge.without_types)
        if ok and (scalar is not None or not any(json_equal(v, w) for w in seen)):
            if scalar is None:
                seen.append(v)
            else:
                seen_scalars.add(scalar)
            texts.append(json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode())
    return texts


def _value_check(ctx: Ctx, rest: dict) -> Callable[[object], bool]:
    """Whether a value satisfies ``rest`` (a schema without its enum and const), as the
    validator says, asking it only where needed: a schema with no keyword the validator reads
    (annotations, words of no draft such as "doNotSuggest") accepts every value, and one
    whose only such keyword is a pattern is the validator's own test (``re.search`` on
    strings) without a validator and its errors per value. Azure Pipelines' steps are 256
    branches told apart by a pattern on the task name, each met with the 259 task names."""
    read = rest.keys() & ctx.validator.VALIDATORS.keys()
    if not read:
        return lambda v: True
    if read == {"pattern"} and isinstance(rest["pattern"], str):
        try:
            search = re.compile(rest["pattern"]).search
        except re.error:
            search = None  # the validator's own error, as before
        if search is not None:
            return lambda v: not isinstance(v, str) or search(v) is not None
    return ctx.validator.evolve(schema=rest).is_valid


def _contains_schema(constraint: tuple) -> dict:
    sub, lo, hi = constraint
    return {"contains": sub, "minContains": lo, **({} if hi is None else {"maxContains": hi})}


def finite_texts(ctx: Ctx, schema, ptr: str) -> list[bytes] | None:
    """Every value of a schema with a finite domain (enum, const, boolean, null) as compact
    JSON, one per distinct value; None when the domain is not one of those."""
    if schema is False:
        return []
    if not isinstance(schema, dict):
        return None
    schema, _ = flatten(ctx, schema, ptr, ())
    if not isinstance(schema, dict) or "anyOf" in schema or "oneOf" in schema:
        return None if schema is not False else []
    if "enum" in schema or "const" in schema:
        return literal_texts(ctx, schema, ptr)
    types = type_list(schema)
    if set(types) <= {"boolean", "null"} and set(schema) - ANNOTATIONS <= {"type", "nullable"}:
        return [t for name, ts in (("boolean", [b"false", b"true"]), ("null", [b"null"]))
                if name in types for t in ts]
    return None


def json_equal(a, b) -> bool:
    return type(a) is type(b) and a == b or (
        isinstance(a, (int, float)) and isinstance(b, (int, float))
        and not isinstance(a, bool) and not isinstance(b, bool) and a == b)


def _ws(ctx: Ctx, nfa: NFA, start: int) -> int:
    if not ctx.flexible:
        return start
    return emit_repeat(nfa, start, lambda n, s: emit_alt(
        n, s, [lambda n2, s2, b=b: emit_bytes(n2, s2, bytes([b])) for b in _FLEX_WS]), 0, _FLEX_WS_MAX)


def punct(ctx: Ctx, nfa: NFA, start: int, char: bytes) -> int:
    return _ws(ctx, nfa, emit_bytes(nfa, _ws(ctx, nfa, start), char))
