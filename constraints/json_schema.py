"""JSON Schema (draft 2020-12; older drafts normalized first) -> a pushdown grammar of rules.

Output format: compact JSON (json.dumps separators (",", ":")), object properties in the
schema's `properties` order. Every validation keyword is either enforced or rejected with
UnsupportedSchemaError naming it and its JSON pointer (`lenient=True` skips the rejection).
Where a schema admits more than we can generate (extra properties when `properties` are
declared, any-depth values) we generate a subset: over-constrained, never under-constrained.
Rules (pushdown.py): the root structure, each nested object (_SubRule), each $ref met again
inside its own expansion, and the leaves they call (string bodies, numbers, formats, keys:
shared DFAs, see emit_leaf); a schema that calls nothing stays one DFA.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache, partial

import jsonschema

from .automaton import DFAAutomaton
from .budget import CompileBudget
from .errors import (
    ConstraintError,
    GrammarTooComplexError,
    InvalidConstraintError,
    UnsupportedSchemaError,
)
from .fsm import ByteDFA, determinize, embed_dfa, product, trim_and_minimize
from .json_compound import ItemRule, UniqueArray, emit_array, emit_object
from .json_context import (
    Ctx,
    RefCall,
    emit_leaf,
    flatten,
    literal_texts,
    merge_or_fail,
    punct,
    resolve_ref,
)
from .json_drafts import normalize_drafts
from .json_keywords import UNSUPPORTED
from .json_leaves import (
    COUNTED_RUN_MIN,
    FORMATS,
    counted_class_run,
    counted_pattern,
    key_dfa,
    leaves_within,
    literals_dfa,
    regex_leaf,
    string_dfa,
)
from .json_lowering import lower_keywords
from .json_merge import (
    ALSO_FORMATS,
    ALSO_PATTERNS,
    FRACTIONAL,
    NOT_PATTERNS,
    TYPES,
    branch_if,
    type_list,
)
from .json_not import excluded, exclusive_one_of, narrow_not, spellings_dfa
from .json_presence import lift_presence
from .leaves import CountedLeaf, walk_whole
from .nfa import NFA, emit_alt, emit_bytes, emit_call, emit_nothing, emit_repeat
from .numbers import (
    INTEGER,
    NUMBER,
    as_decimal,
    integer_bounds,
    integer_range_regex,
    lower_bound_regex,
    multiple_of_table,
)
from .pushdown import PushdownAutomaton, build_pushdown
from .vocab import TokenizerInfo

MAX_RULES = 4096  # rules of one schema's pushdown automaton
ANY_DEPTH = 3  # nesting depth of values under an unconstrained schema ({} / true)


@dataclass(frozen=True, slots=True)
class _SubRule:
    """A nested object emitted as a rule of its own, so the structure's automaton grows by
    the sum of its objects' automata, not by every way of nesting them in one DFA. Equal
    schemas (by their JSON, keys sorted) are one rule wherever they occur: the $refs being
    expanded around a schema decide only whether a $ref inside it is inlined or called,
    never what it accepts, so the rule is emitted afresh (no $refs around it)."""

    schema: dict = field(compare=False)
    ptr: str = field(compare=False)  # where it was first met (for errors)
    text: str  # Ctx.canonical of schema: equal for equal JSON


def _sub_rule(ctx: Ctx, schema: dict, ptr: str) -> _SubRule:
    return _SubRule(schema, ptr, ctx.canonical(schema))


def json_schema_to_automaton(info: TokenizerInfo, root, whitespace: str, lenient: bool,
                             budget: CompileBudget) -> DFAAutomaton:
    """``root``: the schema freshly parsed (limits.check_json_schema), not read elsewhere."""
    if whitespace not in ("compact", "flexible"):
        raise InvalidConstraintError(f"whitespace must be 'compact' or 'flexible', not {whitespace!r}")
    root = lower_keywords(normalize_drafts(root))
    ctx = Ctx(root, lenient, whitespace == "flexible", budget, emit_schema)
    ctx.validator = jsonschema.Draft202012Validator(root if isinstance(root, (dict, bool)) else {})
    nfa = NFA(budget)
    start = nfa.new_state()
    with leaves_within(budget):
        end = emit_schema(ctx, nfa, start, root, "", ("#",))
        if ctx.rules:
            return _pushdown_automaton(ctx, info, (nfa, start, end))
    return DFAAutomaton(info, trim_and_minimize(determinize(nfa, start, end, budget)))


def _pushdown_automaton(ctx: Ctx, info: TokenizerInfo, main: tuple) -> PushdownAutomaton:
    """One rule per recursive $ref, each emitted like any schema (calls where it recurses),
    and one per shared leaf, whose DFA is the rule as it is."""
    fragments: list = [main]
    keys: list = []
    while len(fragments) <= len(ctx.rules):  # compiling a rule may discover further rules
        # Rules are small NFAs each (their own state caps never trip): time and count are
        # checked across all of them.
        ctx.budget.check_time()
        if len(ctx.rules) > MAX_RULES:
            raise GrammarTooComplexError(f"schema needs more than {MAX_RULES} grammar rules "
                                         "(nested objects, arrays and shared leaves); simplify it")
        if len(keys) < len(ctx.rules):
            keys = list(ctx.rules)
        key = keys[len(fragments) - 1]
        if isinstance(key, (ByteDFA, CountedLeaf)):
            fragments.append(key)
            continue
        nfa = NFA(ctx.budget)
        start = nfa.new_state()
        if isinstance(key, _SubRule):
            end = emit_object(ctx, nfa, start, key.schema, key.ptr, ())
        elif isinstance(key, RefCall):  # a recursive $ref and its siblings: expanded once more
            end = emit_schema(ctx, nfa, start, key.as_schema(), ctx.rules[key], ())
        elif isinstance(key, UniqueArray):
            end = emit_array(ctx, nfa, start, key.schema, key.ptr, key.refs,
                             item_rule=key.kind.startswith("value"))
        elif isinstance(key, ItemRule):
            end = emit_schema(ctx, nfa, start, key.schema, key.ptr, key.refs)
        else:
            target = resolve_ref(ctx, key, ctx.rules[key])
            end = emit_schema(ctx, nfa, start, target, key[1:], (key,))
        fragments.append((nfa, start, end))
    pointers = [key[1:] if isinstance(key, str) else ptr for key, ptr in ctx.rules.items()]
    unique = {1 + k: key.kind for k, key in enumerate(ctx.rules) if isinstance(key, UniqueArray)}
    return build_pushdown(info, fragments, pointers, ctx.budget, unique)


def emit_schema(ctx: Ctx, nfa: NFA, start: int, schema, ptr: str, refs: tuple) -> int:
    if schema is True:
        return _emit_any(ctx, nfa, start)
    if schema is False:
        return emit_nothing(nfa, start)
    if isinstance(schema, RefCall):
        return _emit_call(ctx, nfa, start, schema, ptr)
    if not isinstance(schema, dict):
        raise InvalidConstraintError(f"schema at {ptr or '/'} must be an object or boolean")
    schema, refs = flatten(ctx, schema, ptr, refs)
    if schema is False:
        return emit_nothing(nfa, start)
    if isinstance(schema, RefCall):
        return _emit_call(ctx, nfa, start, schema, ptr)
    _check_keywords(ctx, schema, ptr)
    if {"if", "then", "else"} & schema.keys():
        schema = branch_if(schema, ptr)
        if schema is False:
            return emit_nothing(nfa, start)
        schema, refs = flatten(ctx, schema, ptr, refs)
        if schema is False:
            return emit_nothing(nfa, start)
    lifted = lift_presence(schema)  # required names under anyOf / oneOf / not, as one set
    if lifted is False:
        return emit_nothing(nfa, start)
    schema = lifted
    if "not" in schema and not {"enum", "const"} & schema.keys():
        try:
            narrowed = narrow_not(ctx, schema, ptr)
        except UnsupportedSchemaError:
            if not ctx.lenient:
                raise
            narrowed = {k: v for k, v in schema.items() if k != "not"}
        # Emitted from the top: not (not X) merges X in, with its own $ref, allOf or not.
        return emit_schema(ctx, nfa, start, narrowed, ptr, refs)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return _emit_branches(ctx, nfa, start, schema, key, ptr, refs)
    if "enum" in schema or "const" in schema:
        return _emit_literals(ctx, nfa, start, schema, ptr)
    branches = [partial(_emit_typed, ctx=ctx, schema=schema, t=t, ptr=ptr, refs=refs)
                for t in type_list(schema) if not (t == "integer" and "number" in type_list(schema))]
    return emit_alt(nfa, start, branches)


def _emit_call(ctx: Ctx, nfa: NFA, start: int, call: RefCall, ptr: str) -> int:
    return emit_call(nfa, start, ctx.rule_index(call.ref if call.siblings is None else call, ptr))


def _check_keywords(ctx: Ctx, schema: dict, ptr: str) -> None:
    if ctx.lenient:
        return
    for key in schema:
        if key in UNSUPPORTED:
            raise UnsupportedSchemaError.at(key, f"{ptr}/{key}")


def _emit_branches(ctx: Ctx, nfa: NFA, start: int, schema: dict, key: str, ptr: str,
                   refs: tuple) -> int:
    rest = {k: v for k, v in schema.items() if k != key}
    branches, branch_refs, raw = [], [], []
    for i, branch in enumerate(schema[key]):
        bptr = f"{ptr}/{key}/{i}"
        brefs = refs
        if isinstance(branch, dict):
            branch, brefs = flatten(ctx, branch, bptr, refs)
        raw.append(branch)
        branches.append(merge_or_fail(ctx, rest, branch, bptr))
        branch_refs.append(brefs)
    if key == "oneOf" and not ctx.lenient:
        branches = exclusive_one_of(ctx, branches, raw, ptr)
    emits = [partial(emit_schema, ctx, schema=b, ptr=f"{ptr}/{key}/{i}", refs=r)
             for i, (b, r) in enumerate(zip(branches, branch_refs))]
    return emit_alt(nfa, start, [lambda n, s, e=e: e(n, s) for e in emits])


LEAF_LITERAL_BYTES = 4096  # an enum of more text is a leaf (json_leaves.literals_dfa)


def _emit_literals(ctx: Ctx, nfa: NFA, start: int, schema: dict, ptr: str) -> int:
    """enum/const: every listed value that the whole schema accepts (jsonschema decides)."""
    texts = [spelling for t in literal_texts(ctx, schema, ptr) for spelling in _spellings(t)]
    if sum(map(len, texts)) > LEAF_LITERAL_BYTES:  # a long enum: a shared leaf
        return emit_leaf(ctx, nfa, start, literals_dfa(tuple(texts)), ptr)
    return emit_alt(nfa, start, [lambda n, s, t=t: emit_bytes(n, s, t) for t in texts])


def _spellings(text: bytes) -> list[bytes]:
    """A listed value's compact JSON, and for a whole number also its other plain spelling
    (2 and 2.0 are one value: a listed 2.0 accepts 2, a listed 2 accepts 2.0)."""
    if not text[:1].isdigit() and text[:1] != b"-":
        return [text]
    if text.endswith(b".0"):
        return [text, text[:-2]]
    return [text, text + b".0"] if text.lstrip(b"-").isdigit() else [text]


def _emit_typed(nfa: NFA, start: int, ctx: Ctx, schema: dict, t: str, ptr: str,
                refs: tuple) -> int:
    if t == "null":
        return emit_nothing(nfa, start) if excluded(schema, type(None)) else emit_bytes(nfa, start, b"null")
    if t == "boolean":
        return emit_alt(nfa, start, [lambda n, s, t=t: emit_bytes(n, s, t) for t in (b"true", b"false")
                                     if json.loads(t) not in excluded(schema, bool)])
    if t in ("integer", "number"):
        return _emit_number(ctx, nfa, start, schema, t, ptr)
    if t == "string":
        return _emit_string(ctx, nfa, start, schema, ptr)
    if t == "array":
        return emit_array(ctx, nfa, start, schema, ptr, refs)
    if ptr and not ctx.inline_leaves:
        return emit_call(nfa, start, ctx.rule_index(_sub_rule(ctx, schema, ptr), ptr))
    return emit_object(ctx, nfa, start, schema, ptr, refs)


def _emit_number(ctx: Ctx, nfa: NFA, start: int, schema: dict, t: str, ptr: str) -> int:
    names = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
    bounds = [schema.get(k) for k in names]
    for k, b in zip(names, bounds):
        if b is not None and (isinstance(b, bool) or not isinstance(b, (int, float))):
            raise InvalidConstraintError(f"'{k}' at {ptr}/{k} must be a number")
    if t == "integer":
        dfa = regex_leaf(INTEGER if all(b is None for b in bounds)
                         else integer_range_regex(*integer_bounds(*bounds)))
    else:
        dfa = regex_leaf(NUMBER)
        if schema.get(FRACTIONAL):  # `not` of integers: a nonzero digit after the point
            dfa = _bounded(dfa, regex_leaf(r"-?[0-9]+\.[0-9]*[1-9][0-9]*"), ctx.budget)
        for k, b in zip(names, bounds):
            if b is not None:
                dfa = _bounded(dfa, _bound_dfa(k, as_decimal(b)), ctx.budget)
    if "multipleOf" in schema:
        dfa = _bounded(dfa, _multiple_of_dfa(ctx, schema["multipleOf"], ptr), ctx.budget)
    return emit_leaf(ctx, nfa, start, _minus_excluded(dfa, schema, int, ctx.budget), ptr)


def _minus_excluded(dfa, schema: dict, kind: type, budget: CompileBudget):
    """``dfa`` without the spellings of the values of ``kind`` that `not` removed."""
    values = excluded(schema, kind)
    if not values:
        return dfa
    texts = [json.dumps(v, ensure_ascii=False).encode() for v in values]
    return trim_and_minimize(product(dfa, spellings_dfa(texts, budget), "diff", budget))


_MAX_MULTIPLE_STATES = 20_000


def _multiple_of_dfa(ctx: Ctx, step, ptr: str):
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not step > 0:
        raise InvalidConstraintError(f"'multipleOf' at {ptr}/multipleOf must be a number > 0")
    table = multiple_of_table(as_decimal(step), min(_MAX_MULTIPLE_STATES, ctx.budget.max_states))
    if table is None:
        raise UnsupportedSchemaError.at(
            "multipleOf", f"{ptr}/multipleOf", f"value {step!r}: its remainder automaton would "
            f"exceed {_MAX_MULTIPLE_STATES} states")
    return ByteDFA(*table)


@lru_cache(maxsize=256)
def _bound_dfa(keyword: str, bound):
    exclusive = keyword.startswith("exclusive")
    if keyword.endswith("inimum"):
        return regex_leaf(lower_bound_regex(bound, exclusive))
    return regex_leaf(lower_bound_regex(-bound, exclusive, negate=True))


def _bounded(dfa, other, budget: CompileBudget):
    return trim_and_minimize(product(dfa, other, "and", budget))


def _emit_string(ctx: Ctx, nfa: NFA, start: int, schema: dict, ptr: str) -> int:
    lo = schema.get("minLength", 0)
    hi = schema.get("maxLength")
    pattern = schema.get("pattern")
    fmt = schema.get("format")
    if fmt is not None and ctx.lenient:
        fmt = fmt if fmt in FORMATS else None
    lo, hi = int(lo), None if hi is None else int(hi)
    if hi is not None and hi < lo:
        return emit_nothing(nfa, start)
    not_patterns = schema.get(NOT_PATTERNS, ())
    if (not_patterns or schema.get(ALSO_PATTERNS)) and pattern is None:
        pattern = ""  # unescaped text, as the subtracted patterns' automata read it
    if (pattern is None and fmt is None and (lo or hi is not None) and not ctx.inline_leaves
            and not excluded(schema, str)):
        # A length-bounded plain string: one shared leaf and a count, not a DFA per length.
        leaf = CountedLeaf.of_plain_string(string_dfa(0, None, None, None), lo, hi)
        return emit_call(nfa, start, ctx.rule_index(leaf, ptr))
    shared = (fmt is None and not not_patterns and not schema.get(ALSO_PATTERNS)
              and not ctx.inline_leaves and not excluded(schema, str))
    run = counted_class_run(pattern, lo, hi) if shared else None
    if run is not None:
        # ^C{m,n}$ (one character class repeated): the same shared leaf and count, over C*.
        dfa, run_lo, run_hi = run
        if run_hi is not None and run_hi < run_lo:
            return emit_nothing(nfa, start)
        return emit_call(nfa, start, ctx.rule_index(CountedLeaf.of_plain_string(dfa, run_lo, run_hi), ptr))
    counted = (counted_pattern(pattern, lo, hi) if shared and pattern is not None and hi is not None
               and hi >= COUNTED_RUN_MIN else None)
    if counted is not None:
        # Any other pattern under a maxLength where a count of committed length is exact.
        dfa, starts, least, most = counted
        return emit_call(nfa, start, ctx.rule_index(CountedLeaf(dfa, least, most, starts), ptr))
    try:
        dfa = string_dfa(int(lo), None if hi is None else int(hi), pattern, fmt,
                         ctx.budget.max_states)
    except UnsupportedSchemaError as e:
        raise UnsupportedSchemaError.at(e.keyword, f"{ptr}/{e.keyword}", "value is not supported") from e
    except ConstraintError as e:
        if ctx.lenient:
            dfa = string_dfa(lo, hi, None, fmt)
        else:
            keyword = "pattern" if pattern is not None else "format" if fmt is not None else "maxLength"
            raise UnsupportedSchemaError.at(keyword, f"{ptr}/{keyword}", f"cannot be enforced: {e}") from e
    for p in not_patterns:
        dfa = _minus_pattern(dfa, p, ctx.budget, ptr)
    for p in schema.get(ALSO_PATTERNS, ()):
        dfa = _matching_pattern(dfa, p, ctx.budget, ptr)
    for f in schema.get(ALSO_FORMATS, ()):
        if not ctx.lenient or f in FORMATS:
            dfa = _having_format(dfa, f, ctx.budget, ptr)
    return emit_leaf(ctx, nfa, start, _minus_excluded(dfa, schema, str, ctx.budget), ptr)


def _minus_pattern(dfa, pattern: str, budget: CompileBudget, ptr: str):
    """``dfa`` (unescaped strings) without the strings ``pattern`` matches (a `not`)."""
    try:
        matching = string_dfa(0, None, pattern, None, budget.max_states)
    except ConstraintError as e:
        raise UnsupportedSchemaError.at("not", f"{ptr}/not/pattern", f"cannot be enforced: {e}") from e
    return trim_and_minimize(product(dfa, matching, "diff", budget))


def _matching_pattern(dfa, pattern: str, budget: CompileBudget, ptr: str):
    """``dfa`` (unescaped strings) less those ``pattern`` does not match (a second pattern)."""
    try:
        matching = string_dfa(0, None, pattern, None, budget.max_states)
        return trim_and_minimize(product(dfa, matching, "and", budget))
    except ConstraintError as e:
        raise UnsupportedSchemaError.at("pattern", f"{ptr}/pattern", f"{pattern!r} beside another "
                                        f"pattern cannot be enforced: {e}") from e


def _having_format(dfa, fmt: str, budget: CompileBudget, ptr: str):
    """``dfa`` (quoted strings) less those without format ``fmt`` (a second format)."""
    try:
        return trim_and_minimize(product(dfa, string_dfa(0, None, None, fmt, budget.max_states), "and", budget))
    except ConstraintError as e:
        raise UnsupportedSchemaError.at("format", f"{ptr}/format", f"{fmt!r} beside another format "
                                        f"cannot be enforced: {e}") from e


def _emit_any(ctx: Ctx, nfa: NFA, start: int) -> int:
    return emit_leaf(ctx, nfa, start, walk_whole(any_value_dfa(ANY_DEPTH, ctx.flexible)))


@lru_cache(maxsize=8)
def any_value_dfa(depth: int, flexible: bool):
    """Any JSON value nested at most `depth` containers deep (deeper values are not generated)."""
    budget = CompileBudget(max_states=200_000, timeout_s=60.0)
    ctx = Ctx({}, True, flexible, budget, emit_schema)
    nfa = NFA(budget)
    start = nfa.new_state()
    end = _emit_any_value(ctx, nfa, start, depth)
    return trim_and_minimize(determinize(nfa, start, end, budget))


def _emit_any_value(ctx: Ctx, nfa: NFA, start: int, depth: int) -> int:
    scalars = [lambda n, s, t=t: emit_bytes(n, s, t) for t in (b"null", b"true", b"false")]
    scalars += [lambda n, s: embed_dfa(n, s, regex_leaf(NUMBER)),
                lambda n, s: embed_dfa(n, s, string_dfa(0, None, None, None))]
    if depth == 0:
        return emit_alt(nfa, start, scalars)

    def inner(n, s):
        # Embedding the minimized shallower automaton keeps the NFA linear in depth.
        return embed_dfa(n, s, any_value_dfa(depth - 1, ctx.flexible))

    def member(n, s):
        return inner(n, punct(ctx, n, embed_dfa(n, s, key_dfa(())), b":"))

    def container(n, s, open_, item, close):
        body = emit_repeat(n, punct(ctx, n, s, open_), item, 0, None,
                           sep=lambda n2, s2: punct(ctx, n2, s2, b","))
        return punct(ctx, n, body, close)

    return emit_alt(nfa, start, scalars + [
        lambda n, s: container(n, s, b"[", inner, b"]"),
        lambda n, s: container(n, s, b"{", member, b"}")])


__all__ = ["TYPES", "emit_schema", "json_schema_to_automaton"]
