"""Arrays and objects of a JSON schema, emitted into the schema's NFA."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from .errors import (
    ConstraintError,
    GrammarTooComplexError,
    InvalidConstraintError,
    UnsupportedSchemaError,
)
from .fsm import determinize, product, trim_and_minimize
from .json_contains import emit_contains
from .json_context import Ctx, emit_leaf, finite_texts, flatten, merge_or_fail, punct
from .json_leaves import json_string, key_dfa, leaf_budget, pattern_matches, string_dfa
from .json_merge import (
    ALSO_PATTERNS,
    ASSERTIONS,
    CONTAINS,
    EXCLUDED,
    NOT_PATTERNS,
    OTHER_TYPES_ONLY,
    PRESENCE,
    TYPE_ONLY,
    branch_if,
    type_list,
)
from .json_not import narrow_not
from .json_presence import is_name, lift_presence
from .nfa import NFA, emit_bytes, emit_call, emit_nothing, emit_repeat


def emit_array(ctx: Ctx, nfa: NFA, start: int, schema: dict, ptr: str, refs: tuple,
               item_rule: bool = False) -> int:
    """``item_rule``: each item a call of a rule of its own (ItemRule), so no byte of an
    item lies in the array's own rule (an open-value unique array: unique_items.py)."""
    if CONTAINS in schema:
        return emit_contains(ctx, nfa, start, schema, ptr, refs, lambda plain: emit_array(
            ctx, nfa, start, plain, ptr, refs, item_rule))
    prefix = schema.get("prefixItems", [])
    items = schema.get("items", True)
    lo = int(schema.get("minItems", 0))
    hi = schema.get("maxItems")
    hi = None if hi is None else int(hi)
    if not isinstance(prefix, list):
        raise InvalidConstraintError(f"prefixItems at {ptr}/prefixItems must be a list")
    if schema.get("uniqueItems") is True:
        kind = unique_item_kind(ctx, schema, ptr, refs)
        if kind is not None:
            return emit_unique_array(ctx, nfa, start, schema, kind, ptr, refs)
        return _emit_unique(ctx, nfa, start, schema, lo, hi, ptr)
    s = punct(ctx, nfa, start, b"[")
    ends = []
    for i, sub in enumerate(prefix):
        if hi is not None and i >= hi:
            break
        if i >= lo:
            ends.append(s)
        if i:
            s = punct(ctx, nfa, s, b",")
        if item_rule:
            s = _call_item_rule(ctx, nfa, s, sub, f"{ptr}/prefixItems/{i}", refs)
        else:
            s = ctx.emit_schema(nfa, s, sub, f"{ptr}/prefixItems/{i}", refs)
    else:
        ends.append(_emit_rest(ctx, nfa, s, items, len(prefix), lo, hi, ptr, refs, item_rule))
    if len(prefix) >= lo and (hi is None or len(prefix) <= hi) and prefix:
        ends.append(s)
    end = nfa.new_state()
    for e in ends:
        nfa.add_eps(e, end)
    return punct(ctx, nfa, end, b"]")


@dataclass(frozen=True, slots=True, eq=False)
class UniqueArray:
    """An array with uniqueItems over strings or numbers: a rule of its own, whose states
    tell the matcher's duplicate check (unique_items.py) where an array of ``kind`` opens."""

    schema: dict  # without uniqueItems
    ptr: str
    refs: tuple
    kind: str


@dataclass(frozen=True, slots=True)
class ItemRule:
    """A value as a rule of its own: the items of an open-value unique array or of a long
    bounded array, and a member too big to inline in its object's rule (_Members)."""

    schema: object = field(compare=False)
    ptr: str = field(compare=False)
    refs: tuple
    text: str  # Ctx.canonical of schema: equal for equal JSON


def _call_item_rule(ctx, nfa: NFA, start: int, schema, ptr: str, refs: tuple, text: str | None = None) -> int:
    """A call of ``schema``'s ItemRule (one rule per JSON and refs in a compile); ``text``:
    its canonical key where the caller has it."""
    key = ItemRule(schema, ptr, refs, ctx.canonical(schema) if text is None else text)
    return emit_call(nfa, start, ctx.rule_index(key, ptr))


def emit_unique_array(ctx: Ctx, nfa: NFA, start: int, schema: dict, kind: str, ptr: str,
                      refs: tuple) -> int:
    plain = {k: v for k, v in schema.items() if k != "uniqueItems"}
    if kind.startswith("value"):
        plain["items"] = open_items(plain.get("items", True))
        if plain.get("prefixItems"):
            plain["prefixItems"] = [open_items(p) for p in plain["prefixItems"]]
    return emit_call(nfa, start, ctx.rule_index(UniqueArray(plain, ptr, refs, kind), ptr))


_MAX_UNIQUE_VALUES = 64
# Item schemas whose every prefix has infinitely many completions (unique_items.py), by type:
# the keywords they may carry beyond annotations. Integers less a few values (`not` of an
# enum: winget's non-zero exit codes) still go on from every prefix in infinitely many ways.
_UNIQUE_ITEM_KEYWORDS = {"string": {"type", "minLength"},
                         "integer": {"type", "minimum", "exclusiveMinimum", EXCLUDED},
                         "number": {"type", "minimum", "exclusiveMinimum"}}


def unique_item_kind(ctx, schema: dict, ptr: str, refs: tuple) -> str | None:
    """"string", "integer" or "number" where uniqueItems is checked in the matcher (the
    array then is a rule of its own); None where it is not (finite items, or refused)."""
    items = schema.get("items", True)
    items = {} if items is True else items  # any value
    prefix = schema.get("prefixItems")
    if ctx.inline_leaves or not isinstance(items, dict):
        return None
    if prefix:
        # Every item is compared with every other, the prefix's too: open values at each
        # position (Travis's webhooks: a first URL of its own schema, then any more), or
        # values compared as texts where every position spells a value alike (canonical).
        return open_value_kind(ctx, open_items({"anyOf": [*prefix, items]}), f"{ptr}/prefixItems", refs)
    flat, _ = flatten(ctx, items, f"{ptr}/items", refs)
    if not isinstance(flat, dict):
        return None
    kind = flat.get("type")
    if isinstance(kind, str) and kind in _UNIQUE_ITEM_KEYWORDS and _asserted(flat) <= _UNIQUE_ITEM_KEYWORDS[kind]:
        return kind
    texts = finite_texts(ctx, items, f"{ptr}/items")
    if texts is not None:
        # A finite domain: distinct values in the domain's order (_emit_unique), or a long
        # enum of strings (CFF's 459 SPDX licenses, JSCS's 62 node types of ~20 letters whose
        # ordered spelling is 33,000 bytes) compared as texts, one spelling each: the array
        # never runs out of new items before minItems while it has that many.
        lo = _count(schema, "minItems", ptr, 0)
        long = len(texts) > _MAX_UNIQUE_VALUES or _ordered_bytes(texts, lo, _count(schema, "maxItems", ptr, None)) > _MAX_ORDERED_BYTES
        many_strings = long and all(t[:1] == b'"' for t in texts) and len(texts) >= lo
        return f"value+texts#{len(texts)}:string" if many_strings else None
    return open_value_kind(ctx, open_items(items), f"{ptr}/items", refs, int(schema.get("minItems", 0)))


_MAX_ALTERNATIVES = 64


def open_items(items):
    """``items`` generating, where it leaves additionalProperties out, objects with any
    further member (what the schema allows anyway): every object item can then go on."""
    if not isinstance(items, dict):
        return items
    out = dict(items)
    if "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = True
    for key in ("anyOf", "oneOf"):
        if isinstance(out.get(key), list):
            out[key] = [open_items(b) for b in out[key]]
    return out


def open_value_kind(ctx, items, ptr: str, refs: tuple, min_items: int | None = None) -> str | None:
    """"value", "value:integer" or "value:number" where every alternative of ``items`` is an
    open value (unique_items.py: each prefix has infinitely many completions), else None.
    Where some are closed objects of open members ("value+ahead..."), a prefix has infinitely
    many completions or exactly one (the rest is forced), and the matcher looks ahead
    through forced bytes for a duplicate. ``min_items``: the array's, where ``items`` are
    its items (a bounded string alternative of at least that many values never runs out)."""
    numbers, closed, texts, others, strings, open_strings = set(), [], [], 0, 0, 0
    values = 0  # the most strings one bounded string alternative takes (a lower bound)
    literals = 0  # true, false or null: after the first letter, the rest is forced
    todo = [(items, refs)]
    seen = 0
    while todo:
        schema, srefs = todo.pop()
        seen += 1
        if schema is False:
            continue
        schema = {} if schema is True else schema
        if seen > _MAX_ALTERNATIVES or not isinstance(schema, dict):
            return None
        flat, srefs = flatten(ctx, schema, ptr, srefs)
        if flat is False:
            continue
        if isinstance(flat, dict) and {"if", "then", "else"} & flat.keys():
            todo.append((branch_if(flat, ptr), srefs))  # its alternatives, as emit_schema reads it
            continue
        if isinstance(flat, dict):
            flat = lift_presence(flat)  # as emit_schema: required names under combinators, one set
            if flat is False:
                continue
        if isinstance(flat, dict) and "not" in flat and not {"enum", "const"} & flat.keys():
            try:  # the alternatives `not` leaves (a string less a pattern, say)
                todo.append((narrow_not(ctx, flat, ptr), srefs))
            except UnsupportedSchemaError:
                return None
            continue
        listed = _listed_strings(flat) if isinstance(flat, dict) else None
        if listed is not None:  # an enum of strings (Chrome's permission names beside any
            strings += 1  # string): one spelling each, compared as texts
            values = max(values, listed)
            continue
        if not isinstance(flat, dict) or {"not", "if", "enum", "const"} & flat.keys():
            return None
        branches = [k for k in ("anyOf", "oneOf") if k in flat]
        if len(branches) > 1:
            return None
        if branches:
            rest = {k: v for k, v in flat.items() if k != branches[0]}
            todo += [(open_items(merge_or_fail(ctx, rest, b, ptr)), srefs) for b in flat[branches[0]]]
            continue
        for t in type_list(flat):
            if t == "integer" and "number" in type_list(flat):
                continue
            if t == "object" and _more_required_than_allowed(flat):
                continue  # no object at all (a branch a `not` or an if/else left): no items
            if t == "object" and _closed_of_open_members(ctx, flat, ptr, srefs, closed):
                continue
            if t == "object" and _closed_of_texts(ctx, flat, ptr, srefs, texts):
                continue
            if t in ("boolean", "null") and not _asserted(flat) - {"type", "nullable"} - OTHER_TYPES_ONLY[t]:
                literals += 1
                others += 1
                continue
            if not _open_alternative(ctx, flat, t, ptr):
                n = _string_count(flat) if t == "string" else 0
                if n:  # bounded: compared as texts below
                    strings += 1
                    values = max(values, n)
                    continue
                return None
            others += t != "string"  # strings have one spelling each: texts too
            open_strings += t == "string"
            if t in ("integer", "number"):
                numbers.add(t)
    if texts or strings:
        # Bounded strings, or objects of them: exact only where every item is one (a single
        # spelling per value) and new items cannot run out: some alternative takes a million
        # (no output within a context holds that many items), or at least minItems (the
        # array may end once it has them; CFF's two- or three-letter language codes).
        texts += closed
        # true, false and null are one spelling each too (winget's tags: a string or null)
        if others > literals or ctx.flexible and texts or not canonical(ctx, [(o, refs, ptr) for o in texts]):
            return None
        rich = values >= _RICH or open_strings or any(_rich_member(ctx, o, ptr, refs) for o in texts)
        if rich or not texts and min_items is not None and values >= min_items:
            # "#n": at least n values (a comma needs the check that one is left only past n items)
            return f"value+texts#{_RICH if rich else values}" + (":string" if strings or open_strings else "")
        return None
    if literals and literals == others and not open_strings and not closed:
        return None  # only literals: a few values, not an endless start
    return ("value" + ("+ahead" if closed or literals else "")
            + (":number" if "number" in numbers else ":integer" if numbers else ""))


def _asserted(flat: dict) -> set[str]:
    """The keywords of ``flat`` that assert something: not its annotations, nor an ``x-``
    extension or another keyword no validator reads (cargo-make's ``x-taplo`` on a closed
    object of unique items), which the shapes read here never turn on."""
    return flat.keys() & ASSERTIONS


def _listed_strings(flat: dict) -> int | None:
    """How many strings an enum or const of strings alone lists (besides annotations, a type
    of string and keywords of other types, which strings pass); None for any other schema."""
    values = flat["enum"] if "enum" in flat else [flat["const"]] if "const" in flat else None
    if (not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values)
            or _asserted(flat) - OTHER_TYPES_ONLY["string"] - {"enum", "const", "type"}
            or flat.get("type", "string") not in ("string", ["string"])):
        return None
    return len(set(values))


def _more_required_than_allowed(flat: dict) -> bool:
    """Whether an object schema requires more distinct members than its maxProperties
    allows: emit_object then writes no object (each required member is written, and none past
    maxProperties)."""
    most, required = flat.get("maxProperties"), flat.get("required", [])
    return (isinstance(most, int) and not isinstance(most, bool) and isinstance(required, list)
            and len(set(map(str, required))) > most)


def _closed_of_open_members(ctx, flat: dict, ptr: str, refs: tuple, closed: list) -> bool:
    """A closed object (additionalProperties false, no patternProperties or propertyNames)
    whose last member is an open value (CloudFormation's Tags: {Key, Value} strings; SARIF's
    objects, whose last member is an open property bag). Members are written in schema order,
    so each prefix of one has infinitely many completions (the last member is still to come,
    or being written), or only its forced rest (``}`` after the last member). The member is
    judged as emitted (json_compound.emit_object), not opened as the items are. Recorded in
    ``closed``."""
    props = _closed_properties(ctx, flat, ptr)
    if props is None or len(closed) >= _MAX_ALTERNATIVES:
        return False
    present = [(name, member) for name, member in props.items() if member is not False]
    if not present:
        return False
    name, member = present[-1]
    kind = open_value_kind(ctx, member, f"{ptr}/properties/{name}", refs)
    if kind is None or kind.startswith("value+texts"):  # bounded: _closed_of_texts
        return False
    closed.append(flat)
    return True


def _closed_properties(ctx, flat: dict, ptr: str) -> dict | None:
    """The declared members of a closed object (additionalProperties false, no pattern or
    count keyword on its names), None for any other object."""
    extra = flat.get("additionalProperties", True)
    if isinstance(extra, dict):
        extra, _ = flatten(ctx, extra, ptr, ())
    props = flat.get("properties", {})
    if (extra is not False or not isinstance(props, dict) or not props
            or {"patternProperties", "propertyNames", "maxProperties", "minProperties",
                "dependentRequired", PRESENCE} & flat.keys()):
        return None
    return props


def _closed_of_texts(ctx, flat: dict, ptr: str, refs: tuple, texts: list) -> bool:
    """A closed object (as ``_closed_of_open_members``) whose members are strings, bounded
    or not, string enums, booleans or null: values of one spelling each in our grammar (no
    whitespace, members in schema order, one escape per character), so two items are equal
    exactly where their texts are. unique_items.py then finds, at each token, whether the
    item's prefix has a completion no earlier item's text has. Recorded in ``texts``."""
    if (_closed_properties(ctx, flat, ptr) is None or len(texts) >= _MAX_ALTERNATIVES
            or not canonical(ctx, [(flat, refs, ptr)])):
        return False
    texts.append(flat)
    return True


def _member_schemas(ctx, obj: dict, ptr: str, refs: tuple):
    """(name, flattened member schema, its refs, its pointer) of each member an object may have."""
    for name, member in obj.get("properties", {}).items():
        if member is not False:
            mptr = f"{ptr}/properties/{_escape(name)}"
            flat, mrefs = flatten(ctx, member, mptr, refs) if isinstance(member, dict) else (member, refs)
            yield name, flat, mrefs, mptr


_TEXT_TYPES = {"string", "boolean", "null"}
_CANONICAL_DEPTH = 4  # containers inside an item compared as text
_CANONICAL_ARRAY_KEYWORDS = {"items", "minItems", "maxItems", "uniqueItems"}


def canonical(ctx, schemas: list[tuple], depth: int = 0) -> bool:
    """Whether every value the (flattened schema, refs, pointer) alternatives take has one
    spelling in our grammar across all of them, so equal values are equal texts: strings
    (one escape per character), booleans, null, enums of them; closed objects whose members
    come in one order in every alternative (written in schema order), each member canonical
    across the alternatives that declare it; arrays whose items are, a few levels deep.
    Numbers are not (1, 1.0 and 1e0 are one value; the integers' ``-0`` is 0)."""
    if depth > _CANONICAL_DEPTH:
        return False
    objects, items = [], []
    for flat, refs, ptr in _alternatives(ctx, schemas):
        if flat is False:
            continue
        if not isinstance(flat, dict):
            return False
        values = flat["enum"] if "enum" in flat else [flat["const"]] if "const" in flat else None
        if values is not None:
            if not isinstance(values, list) or not all(isinstance(v, (str, bool)) or v is None for v in values):
                return False
            continue
        types = set(type_list(flat))
        keys = _asserted(flat) - {"type", "nullable"} - _STRING_KEYWORDS - TYPE_ONLY["number"]  # no numbers
        if not types <= _TEXT_TYPES | {"object", "array"} or not keys <= TYPE_ONLY["object"] | _CANONICAL_ARRAY_KEYWORDS:
            return False
        if "object" in types:
            if _closed_properties(ctx, flat, ptr) is None:
                return False
            objects.append((flat, refs, ptr))
        if "array" in types:
            if not isinstance(flat.get("items", True), dict) or "prefixItems" in flat:
                return False
            items.append((flat["items"], refs, f"{ptr}/items"))
    if len(objects) > 1 and not _one_member_order([list(o[0]["properties"]) for o in objects]):
        return False
    members: dict[str, list] = {}
    for obj, refs, ptr in objects:
        for name, flat, mrefs, mptr in _member_schemas(ctx, obj, ptr, refs):
            members.setdefault(name, []).append((flat, mrefs, mptr))
    return (all(canonical(ctx, alts, depth + 1) for alts in members.values())
            and (not items or canonical(ctx, items, depth + 1)))


def _alternatives(ctx, schemas: list[tuple]):
    """Each schema flattened, its anyOf / oneOf branches (with the rest merged in) in its place."""
    todo = list(schemas)
    seen = 0
    while todo:
        schema, refs, ptr = todo.pop()
        seen += 1
        if seen > _MAX_ALTERNATIVES:
            yield None, refs, ptr  # too many to judge
            return
        flat, refs = flatten(ctx, schema, ptr, refs) if isinstance(schema, dict) else (schema, refs)
        key = next((k for k in ("anyOf", "oneOf") if isinstance(flat, dict) and k in flat), None)
        if key is None:
            yield flat, refs, ptr
            continue
        if not isinstance(flat[key], list) or "anyOf" in flat and "oneOf" in flat:
            yield None, refs, ptr
            return
        rest = {k: v for k, v in flat.items() if k != key}
        for i, branch in enumerate(flat[key]):
            bptr = f"{ptr}/{key}/{i}"
            if isinstance(branch, dict):
                branch, brefs = flatten(ctx, branch, bptr, refs)
            else:
                brefs = refs
            todo.append((merge_or_fail(ctx, rest, branch, bptr), brefs, bptr))


def _one_member_order(orders: list[list[str]]) -> bool:
    """Whether the names of these member lists fit one order (each list's names in it)."""
    rank: dict[str, set] = {}
    for order in orders:
        for i, name in enumerate(order):
            rank.setdefault(name, set()).update(order[i + 1:])
    return not any(a in rank.get(b, ()) for a, later in rank.items() for b in later)


# Items a unique array can never run out of: no output within any model's context holds a
# million items.
_RICH = 1 << 20
_RICH_BYTES = 64


def _rich_member(ctx, obj: dict, ptr: str, refs: tuple, depth: int = 0) -> bool:
    """Some member takes over a million values (a string of one character or more, or a
    pattern's: counted over its texts of up to 64 bytes that maxLength allows; a branch, an
    object member or an array item that does), so a unique array of these objects never
    runs out of new items."""
    return any(_rich_value(ctx, flat, mptr, mrefs, depth) for _, flat, mrefs, mptr in _member_schemas(ctx, obj, ptr, refs))


def _rich_value(ctx, flat, ptr: str, refs: tuple, depth: int) -> bool:
    if depth > _CANONICAL_DEPTH:
        return False
    for alt, arefs, aptr in _alternatives(ctx, [(flat, refs, ptr)]):  # each anyOf / oneOf branch
        if not isinstance(alt, dict):
            continue
        types = type_list(alt)
        if "string" in types and _rich_string(alt):
            return True
        if ("object" in types and _closed_properties(ctx, alt, aptr) is not None
                and _rich_member(ctx, alt, aptr, arefs, depth + 1)):
            return True
        if "array" in types and isinstance(alt.get("items"), dict) and alt.get("maxItems", 1) != 0:
            items, irefs = flatten(ctx, alt["items"], f"{aptr}/items", arefs)
            if _rich_value(ctx, items, f"{aptr}/items", irefs, depth + 1):
                return True
    return False


def _rich_string(flat: dict) -> bool:
    """Whether a string schema (lengths, patterns, format) takes over a million strings."""
    return _string_count(flat) >= _RICH


def _string_count(flat: dict) -> int:
    """How many strings a string schema (lengths, patterns, format) takes, counted up to a
    million over its texts of up to 64 bytes that maxLength allows (a lower bound: a text's
    bytes are at least its characters); 0 where it is not such a schema."""
    if _asserted(flat) - OTHER_TYPES_ONLY["string"] <= {"type", "nullable", "minLength", "maxLength"}:
        # over a million characters (counted in bytes below: far fewer)
        if flat.get("maxLength", 1) >= max(1, flat.get("minLength", 0)):
            return _RICH
    if {"enum", "const"} & flat.keys() or not _asserted(flat) - OTHER_TYPES_ONLY["string"] <= _STRING_KEYWORDS | {"type"}:
        return 0
    try:
        dfa = _string_body(flat)
    except ConstraintError:
        return 0
    return count_strings(dfa, min(int(flat.get("maxLength", _RICH_BYTES)), _RICH_BYTES) + 2, _RICH)


def count_strings(dfa, max_bytes: int, cap: int) -> int:
    """How many strings of at most ``max_bytes`` bytes the DFA accepts, counted up to ``cap``."""
    trans = dfa.trans[:, :256]
    live = trans >= 0
    to = np.clip(trans, 0, None)
    counts = dfa.accept[:dfa.num_states].astype(np.int64)
    for _ in range(max_bytes):
        counts = np.minimum(dfa.accept[:dfa.num_states] + np.where(live, counts[to], 0).sum(axis=1), cap)
        if counts[0] >= cap:
            break
    return int(counts[0])


def _open_alternative(ctx, flat: dict, t: str, ptr: str) -> bool:
    keys = _asserted(flat) - {"type", "nullable"} - OTHER_TYPES_ONLY[t]
    if t in ("integer", "number"):
        return keys <= _UNIQUE_ITEM_KEYWORDS[t]
    if t == "string":
        return keys <= {"minLength"} or keys <= _STRING_KEYWORDS and _endless_string(flat)
    if t == "array":
        return ("maxItems" not in flat and not flat.get("prefixItems") and flat.get("uniqueItems") is not True
                and flat.get("items", True) is not False)
    if t == "object":
        return not {"maxProperties", "propertyNames"} & keys and _endless_extras(ctx, flat, ptr)
    return False  # null, boolean: one value each


def _endless_extras(ctx, flat: dict, ptr: str) -> bool:
    """Whether an object takes members of infinitely many undeclared names (additionalProperties,
    or a patternProperties pattern such as SchemaStore's ``^x-``), values not false. Those
    members follow the declared ones and repeat, so every prefix of such an object goes on in
    infinitely many ways. additionalProperties is read as emit_object reads it: absent beside
    properties or patterns, no undeclared member is written."""
    patterns = flat.get("patternProperties", {})
    props = flat.get("properties", {})
    extra = flat.get("additionalProperties", None if props or patterns else True)
    if isinstance(extra, dict):  # merged parts may leave {"allOf": [false, ...]}
        extra, _ = flatten(ctx, extra, ptr, ())
    if not isinstance(extra, (bool, dict, type(None))) or not isinstance(patterns, dict):
        return False
    if not patterns:
        return extra is not None and extra is not False
    try:
        classes = _extra_classes(tuple(props), patterns, extra, None, ptr)
    except ConstraintError:
        return False
    for keys, value, _, _ in classes:
        if isinstance(value, dict):
            value, _ = flatten(ctx, value, ptr, ())
        if value is not False and _infinite(keys):
            return True
    return False


def _infinite(dfa) -> bool:
    """Whether a trimmed DFA accepts infinitely many strings: some state lies on a cycle."""
    return bool(_on_endless_paths(dfa).any())


def _on_endless_paths(dfa) -> np.ndarray:
    """The states of a trimmed DFA from which infinitely many strings go on: states are
    dropped while none of their successors is kept, and what stays has infinite paths."""
    trans = dfa.trans[:dfa.num_states, :256]
    keep = np.ones(dfa.num_states, dtype=bool)
    while True:
        alive = np.where(trans >= 0, keep[np.clip(trans, 0, None)], False).any(axis=1) & keep
        if (alive == keep).all():
            return keep
        keep = alive


_STRING_KEYWORDS = TYPE_ONLY["string"] | {NOT_PATTERNS, ALSO_PATTERNS}


def _endless_string(flat: dict) -> bool:
    """A string (patterns, patterns it must not match, format, lengths) whose every prefix goes
    on in infinitely many ways."""
    if "maxLength" in flat:
        return False
    try:
        return endless_everywhere(_string_body(flat))
    except ConstraintError:
        return False


def _string_body(flat: dict):
    """The quoted strings of a string schema's patterns, format and minLength (maxLength
    left out)."""
    nots, also = flat.get(NOT_PATTERNS, ()), flat.get(ALSO_PATTERNS, ())
    pattern = flat.get("pattern", "" if nots or also else None)  # "": unescaped text, as theirs
    budget = leaf_budget()
    dfa = string_dfa(int(flat.get("minLength", 0)), None, pattern, flat.get("format"))
    for p, op in [*((p, "diff") for p in nots), *((p, "and") for p in also)]:
        dfa = trim_and_minimize(product(dfa, string_dfa(0, None, p, None), op, budget))
    return dfa


def endless_everywhere(dfa) -> bool:
    """Whether from every non-accepting state of a trimmed DFA infinitely many strings go on."""
    return bool(_on_endless_paths(dfa)[~dfa.accept[:dfa.num_states]].all())


_MAX_ORDERED_BYTES = 8192  # bytes _emit_unique may spell for a finite domain of strings


def _ordered_bytes(texts: list[bytes], lo: int, hi: int | None) -> int:
    """The bytes _emit_unique spells: each value after every earlier one (and first), once
    for each count it tracks."""
    return _ordered_counts(len(texts), lo, hi)[1] * sum((j + 1) * len(t) for j, t in enumerate(texts))


def _ordered_counts(k: int, lo: int, hi: int | None) -> tuple[int, int]:
    """For a domain of ``k`` values: the most items (``hi`` within ``k``), and the counts
    _emit_unique tells apart (past the cap they are all alike)."""
    hi = k if hi is None else min(hi, k)
    return hi, hi if hi < k else max(lo, 1)


def _emit_unique(ctx, nfa: NFA, start: int, schema: dict, lo: int, hi: int | None, ptr: str) -> int:
    """uniqueItems over a finite item domain: distinct values, written in the domain's order
    (a valid subset: every set of values has exactly one spelling). States: the index of the
    last value written, and the count so far where min/maxItems need it."""
    texts = None if schema.get("prefixItems") else finite_texts(ctx, schema.get("items", True), f"{ptr}/items")
    if texts is None or len(texts) > _MAX_UNIQUE_VALUES:
        raise UnsupportedSchemaError.at(
            "uniqueItems", f"{ptr}/uniqueItems", f"(true) is enforced only for items from a finite set "
            f"(enum, const, boolean, null; at most {_MAX_UNIQUE_VALUES} values, or more strings) or open "
            f"values: strings every prefix of which goes on endlessly (no maxLength or enum), numbers "
            f"with lower bounds only, arrays without maxItems, objects open to further members (no "
            f"maxProperties or propertyNames) or whose last member is such; or strings with maxLength "
            f"or a pattern (a million of them, or as many as minItems) and closed objects of such "
            f"values, booleans, null, closed objects and arrays of them (one spelling each, one "
            f"member of a million)")
    k = len(texts)
    hi, cap = _ordered_counts(k, lo, hi)
    s0 = punct(ctx, nfa, start, b"[")
    end = nfa.new_state()
    if lo == 0:
        nfa.add_eps(s0, end)
    after = {}  # (count, index of the last value) -> state
    for j, text in enumerate(texts):
        after[(1, j)] = emit_bytes(nfa, s0, text)
    for c in range(1, cap + 1):
        nxt = min(c + 1, cap)
        for i in range(k):  # ascending: the capped count loops onto later indices only
            s = after.get((c, i))
            if s is None:
                continue
            if c >= lo:
                nfa.add_eps(s, end)
            if c == hi:
                continue
            comma = punct(ctx, nfa, s, b",")
            for j in range(i + 1, k):
                written = emit_bytes(nfa, comma, texts[j])
                if (nxt, j) in after:
                    nfa.add_eps(written, after[(nxt, j)])
                else:
                    after[(nxt, j)] = written
    return punct(ctx, nfa, end, b"]")


_INLINE_ITEM_STATES = 4096  # NFA states a bounded array may spend on copies of its item


def _emit_rest(ctx, nfa: NFA, s: int, items, done: int, lo: int, hi: int | None, ptr: str,
               refs: tuple, item_rule: bool = False) -> int:
    """Items after the prefixItems: count in [max(lo - done, 0), hi - done]."""
    rest_lo = max(lo - done, 0)
    rest_hi = None if hi is None else hi - done
    if items is False or rest_hi == 0:
        return s if rest_lo == 0 else emit_nothing(nfa, s)

    as_rule = [item_rule]

    def item(n, x):
        if as_rule[0]:
            return _call_item_rule(ctx, n, x, items, f"{ptr}/items", refs)
        size = n.num_states
        end = ctx.emit_schema(n, x, items, f"{ptr}/items", refs)
        # A bounded array repeats its item maxItems times: where the copies would outgrow a
        # small rule (arrays of bounded arrays multiply), the rest are calls of one item rule.
        if rest_hi is not None and not ctx.inline_leaves and (n.num_states - size) * rest_hi > _INLINE_ITEM_STATES:
            as_rule[0] = True
        return end

    def sep(n, x):
        return punct(ctx, n, x, b",")

    if done == 0:
        return emit_repeat(nfa, s, item, rest_lo, rest_hi, sep=sep)
    return emit_repeat(nfa, s, lambda n, x: item(n, sep(n, x)), rest_lo, rest_hi)


def emit_object(ctx: Ctx, nfa: NFA, start: int, schema: dict, ptr: str, refs: tuple) -> int:
    """Declared properties in schema order (optional ones skippable), then extra ones.

    The states after each property form tracks keyed by (members written so far, capped;
    which watched names are present): count 0 needs no comma before the next member, and
    minProperties / maxProperties / dependentRequired / PRESENCE (json_presence.py) read the
    key; PRESENCE's outside atoms (a member named outside a list) join the key with the first
    such member, declared or extra. Without those keywords there are two tracks, nothing
    written and something written.
    """
    patterns = _mapping(schema, "patternProperties", ptr)
    deps = _dependent_required(schema, ptr)
    lo, hi = _count(schema, "minProperties", ptr, 0), _count(schema, "maxProperties", ptr, None)
    props = dict(schema.get("properties", {}))
    required = list(schema.get("required", []))
    extra = schema.get("additionalProperties", None if props or patterns else True)
    # Names the object spells out: declared, required, those dependentRequired or PRESENCE
    # watches, and an enumerated propertyNames (each then written at most once).
    presence = schema.get(PRESENCE)  # (atoms, allowed patterns): json_presence.py
    atoms = presence[0] if presence else ()
    outs = [a for a in atoms if not is_name(a)]
    by_deps = list(dict.fromkeys(n for name, needed in deps.items() for n in (name, *needed)))
    watched = list(dict.fromkeys([*by_deps, *(a for a in atoms if is_name(a))]))
    presence_only = set(watched) - set(by_deps)  # forgotten once PRESENCE is decided
    for name in [*required, *watched, *_enumerated_names(schema.get("propertyNames"))]:
        if name not in props:
            # An undeclared name takes any value where additionalProperties is absent.
            props[name] = True if _matching(patterns, name, ptr) else (extra if extra is not None else True)
    props = {name: _with_patterns(sub, _matching(patterns, name, ptr)) for name, sub in props.items()}
    names = _property_names_dfa(ctx, schema, ptr)
    if names is not None:
        props = {k: v if names.matches(json_string(k)) else False for k, v in props.items()}
    marks = {name: frozenset(a for a in outs if name not in a[1]) for name in props}  # outside atoms set
    order = list(props)
    members = _Members(ctx, props)
    cap = hi if hi is not None else max(lo, 1)
    tracks: dict[tuple, int] = {(0, frozenset()): punct(ctx, nfa, start, b"{")}
    for i, (name, sub) in enumerate(props.items()):
        new: dict[tuple, int] = {}
        for (c, present), s in tracks.items():  # leave it out
            if name not in required and not any(name in deps.get(t, ()) for t in present):
                _join(nfa, new, (c, present), s)
        earlier = set(order[:i])
        dests: dict[tuple, list[tuple[int, int]]] = {}
        for (c, present), s in tracks.items():  # write it
            if (hi is None or c < hi) and all(d in present for d in deps.get(name, ()) if d in earlier):
                dest = (min(c + 1, cap), (present | {name} if name in watched else present) | marks[name])
                dests.setdefault(dest, []).append((c, s))
        for dest, sources in dests.items():
            # One spelling of the key for every track that writes it, a comma before it where
            # something was written: the tracks' states after its first byte are one (two
            # copies of every name in the subset construction made an object of 475 optional
            # members pass the state cap before minimization could merge them).
            key_start = nfa.new_state()
            for c, s in sources:
                nfa.add_eps(s if c == 0 else punct(ctx, nfa, s, b","), key_start)
            entry = _key(ctx, nfa, key_start, name)
            _join(nfa, new, dest, members.emit(nfa, entry, sub, f"{ptr}/properties/{_escape(name)}", refs))
        tracks = new
        if presence is not None and name in presence[0]:
            tracks, presence = _presence_passed(nfa, tracks, presence, set(order[:i + 1]), presence_only)
    classes = _extra_classes(tuple(props), patterns, extra, names, ptr)
    for atom in outs:  # extra names in the atom's list, and those outside it (which set it)
        listed, budget = _property_names_dfa(ctx, {"propertyNames": {"enum": list(atom[1])}}, ptr), leaf_budget()
        classes = [(trim_and_minimize(product(k, listed, mode, budget)), v, p, m | {atom} if mode == "diff" else m)
                   for k, v, p, m in classes for mode in ("and", "diff")]
        classes = [c for c in classes if not c[0].is_empty()]
    if classes:
        tracks = _emit_extras(ctx, nfa, tracks, classes, cap, hi, refs)
    end = nfa.new_state()
    for (c, present), s in tracks.items():
        if c >= lo and (presence is None or _pattern(presence, present) in presence[1]):
            nfa.add_eps(s, end)
    return punct(ctx, nfa, end, b"}")


_INLINE_MEMBER_STATES = 1024  # NFA states the copies of a member's value may spend inline
_COUNTED_MEMBERS = 16  # objects with more members count the members of each value


class _Members:
    """The values of one object's members, each inline in the object's rule or a call of a
    rule of its own (ItemRule): a rule where inline its copies would take more than
    _INLINE_MEMBER_STATES NFA states, one big value (an array of a long enum, a $ref to a
    big definition) or one value of many members (putout's 475 rules, each a $ref to one
    definition). The object's rule then holds calls and the rules' sizes add, instead of one
    rule holding every member's automaton (a config file's 163 members made one rule of
    over 20,000 states). A value is tried inline first, and rolled back where it is too big
    (the rules it met are the ones its rule of its own calls); a value found too big is
    called at once wherever the object meets it again."""

    def __init__(self, ctx: Ctx, props: dict):
        self.ctx = ctx
        self.copies: dict[str, int] | None = None  # canonical value -> members with it
        if len(props) > _COUNTED_MEMBERS and not ctx.inline_leaves:
            self.copies = {}
            for sub in props.values():
                key = ctx.canonical(sub)
                self.copies[key] = self.copies.get(key, 0) + 1
        self.called: set[str] = set()

    def emit(self, nfa: NFA, entry: int, sub, ptr: str, refs: tuple) -> int:
        ctx = self.ctx
        if ctx.inline_leaves:
            return ctx.emit_schema(nfa, entry, sub, ptr, refs)
        key = ctx.canonical(sub) if self.copies is not None else None
        if key is None or key not in self.called:
            mark = nfa.mark()
            end = ctx.emit_schema(nfa, entry, sub, ptr, refs)
            copies = 1 if key is None else self.copies.get(key, 1)
            if (nfa.num_states - mark[0]) * copies <= _INLINE_MEMBER_STATES:
                return end
            nfa.rollback(mark)
            key = key if key is not None else ctx.canonical(sub)
            self.called.add(key)
        return _call_item_rule(ctx, nfa, entry, sub, ptr, refs, key)


def _pattern(presence, present: frozenset) -> tuple:
    return tuple(n for n in presence[0] if n in present)


def _presence_passed(nfa: NFA, tracks: dict, presence, passed: set, own: set):
    """Tracks after a property PRESENCE reads (json_presence.py), every name in ``passed``
    written or left out for good: those whose names so far no allowed pattern has are
    dropped; once all of its names are passed, the pattern is decided, so the tracks that
    remain forget the names only it watches (``own``: not dependentRequired's), and the
    keyword is done (None). Without this the object would be written once per pattern to
    its end, extra members included."""
    names, allowed = presence
    seen = {tuple(n for n in p if n in passed) for p in allowed}
    kept: dict[tuple, int] = {}
    done = all(n in passed for n in names)  # never with outside atoms: set up to the end
    for (c, present), s in tracks.items():
        if tuple(n for n in names if n in present and n in passed) not in seen:
            continue
        _join(nfa, kept, (c, present - own) if done else (c, present), s)
    return kept, None if done else presence


def _join(nfa: NFA, tracks: dict, key: tuple, state: int) -> None:
    """Merge ``state`` into the track ``key`` of the property being built: each track gets a
    fresh state (joining into a state of the previous property would loop back over it)."""
    if key not in tracks:
        tracks[key] = nfa.new_state()
    nfa.add_eps(state, tracks[key])


def _emit_extras(ctx, nfa: NFA, tracks: dict, classes: list, cap: int, hi: int | None, refs: tuple) -> dict:
    """Extra members after the declared ones: from each track, one more member moves to the
    next count (the capped count loops on itself)."""
    loops = {}
    for key, s in tracks.items():
        loops[key] = nfa.new_state()
        nfa.add_eps(s, loops[key])
    todo = sorted(loops, key=lambda k: k[0])
    done = set()
    while todo:
        c, present = key = todo.pop(0)
        if key in done or (hi is not None and c >= hi):
            continue
        done.add(key)
        entry = loops[key] if c == 0 else punct(ctx, nfa, loops[key], b",")
        for key_dfa_, value, vptr, marks in classes:
            dest = (min(c + 1, cap), present | marks)
            if dest not in loops:
                loops[dest] = nfa.new_state()
                todo.append(dest)
            key_end = punct(ctx, nfa, emit_leaf(ctx, nfa, entry, key_dfa_), b":")
            nfa.add_eps(ctx.emit_schema(nfa, key_end, value, vptr, refs), loops[dest])
    return loops


_MAX_OVERLAPPING_PATTERNS = 4  # up to this many patterns, names that several match are written too


def _extra_classes(declared: tuple, patterns: dict, extra, names, ptr: str) -> list:
    """(key automaton, value schema, pointer) for undeclared names: one class per set of
    patterns a name matches (and no other pattern does), whose value satisfies each of their
    schemas, as every matching pattern's schema applies (beyond four patterns, only names one
    pattern alone matches: a valid subset); then additionalProperties (names no pattern
    matches), each within propertyNames."""
    classes = []
    plist = list(patterns)
    overlaps = len(plist) <= _MAX_OVERLAPPING_PATTERNS
    sets = [s for k in range(1, len(plist) + 1 if overlaps else 2) for s in combinations(range(len(plist)), k)]
    for chosen in sets:
        inside = [plist[i] for i in chosen]
        keys = _pattern_keys(declared, inside[0], tuple(p for p in plist if p not in inside), ptr)
        for pattern in inside[1:]:
            keys = trim_and_minimize(product(keys, _pattern_keys((), pattern, (), ptr), "and", leaf_budget()))
        value = patterns[inside[0]] if len(inside) == 1 else {"allOf": [patterns[p] for p in inside]}
        classes.append((keys, value, f"{ptr}/patternProperties/{_escape(inside[0])}", frozenset()))
    if extra is not None and extra is not False:
        keys = _pattern_keys(declared, None, tuple(plist), ptr) if plist else key_dfa(declared)
        classes.append((keys, extra, f"{ptr}/additionalProperties", frozenset()))
    if names is not None:
        budget = leaf_budget()
        classes = [(trim_and_minimize(product(k, names, "and", budget)), v, p, m) for k, v, p, m in classes]
    return [c for c in classes if not c[0].is_empty()]


def _pattern_keys(declared: tuple, matching: str | None, not_matching: tuple, ptr: str):
    try:
        return key_dfa(declared, matching, not_matching)
    except UnsupportedSchemaError:
        raise
    except ConstraintError as e:
        raise UnsupportedSchemaError.at("patternProperties", f"{ptr}/patternProperties",
                                        f"cannot be enforced: {e}") from e


def _matching(patterns: dict, name: str, ptr: str) -> list:
    out = []
    for pattern, sub in patterns.items():
        try:
            if pattern_matches(pattern, name):
                out.append(sub)
        except ConstraintError as e:
            raise UnsupportedSchemaError.at("patternProperties", f"{ptr}/patternProperties",
                                            f"cannot be enforced: {e}") from e
    return out


def _with_patterns(sub, pattern_schemas: list):
    """A declared property's value also satisfies every pattern its name matches."""
    parts = [p for p in [sub, *pattern_schemas] if p is not True and p != {}]
    if any(p is False for p in parts):
        return False
    return parts[0] if len(parts) == 1 else {"allOf": parts} if parts else True


def _property_names_dfa(ctx, schema: dict, ptr: str):
    """The quoted names propertyNames allows, or None when it allows any."""
    names = schema.get("propertyNames", True)
    if names is True or names == {}:
        return None
    if names is not False and not isinstance(names, dict):
        raise InvalidConstraintError(f"propertyNames at {ptr}/propertyNames must be a schema")
    sub = NFA(ctx.budget)
    start = sub.new_state()
    ctx.inline_leaves, outer = True, ctx.inline_leaves
    try:
        end = ctx.emit_schema(sub, start, names, f"{ptr}/propertyNames", ())
        return trim_and_minimize(determinize(sub, start, end, ctx.budget))
    except (GrammarTooComplexError, UnsupportedSchemaError) as e:
        # Names are one automaton (keys are no counted leaves): a long maxLength (Mergify's
        # 1,024) is cut to a quarter until it fits, a valid subset of the names.
        most = names.get("maxLength") if isinstance(names, dict) else None
        if not isinstance(most, int) or most < 64 or getattr(e, "keyword", "maxLength") != "maxLength":
            raise
        return _property_names_dfa(ctx, {"propertyNames": {**names, "maxLength": most // 4}}, ptr)
    finally:
        ctx.inline_leaves = outer


def _enumerated_names(names) -> list[str]:
    if not isinstance(names, dict):
        return []
    values = names["enum"] if "enum" in names else [names["const"]] if "const" in names else []
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []


def _mapping(schema: dict, keyword: str, ptr: str) -> dict:
    value = schema.get(keyword, {})
    if not isinstance(value, dict):
        raise InvalidConstraintError(f"{keyword} at {ptr}/{keyword} must be an object")
    return value


def _dependent_required(schema: dict, ptr: str) -> dict[str, tuple[str, ...]]:
    deps = _mapping(schema, "dependentRequired", ptr)
    for name, needed in deps.items():
        if not isinstance(needed, list) or not all(isinstance(n, str) for n in needed):
            raise InvalidConstraintError(
                f"dependentRequired at {ptr}/dependentRequired/{_escape(name)} must be a list of names")
    return {name: tuple(n for n in needed if n != name) for name, needed in deps.items() if needed}


def _count(schema: dict, keyword: str, ptr: str, default):
    value = schema.get(keyword, default)
    if value is default:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
        raise InvalidConstraintError(f"{keyword} at {ptr}/{keyword} must be a non-negative integer")
    return int(value)


def _key(ctx, nfa: NFA, start: int, name: str) -> int:
    return punct(ctx, nfa, emit_bytes(nfa, start, json_string(name)), b":")


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


__all__ = ["ItemRule", "UniqueArray", "emit_array", "emit_object", "emit_unique_array", "unique_item_kind"]
