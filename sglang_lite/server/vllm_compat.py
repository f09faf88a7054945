"""vLLM's request spellings, mapped onto the engine's: ``guided_json``, ``guided_regex``,
``guided_choice``, ``guided_grammar`` and ``structured_outputs: {json | regex | choice |
grammar | json_object}`` become the engine's ``json_schema``, ``regex``, ``choices`` and
``ebnf``; and ``stream_options.continuous_usage_stats``.

One constraint per request, whichever spelling carries it: a second is a 400 naming it.
"""

from __future__ import annotations

from typing import Any

from sglang_lite.errors import InvalidRequest

# (request field, engine key), in the order conflicts are reported.
_FLAT = (("json_schema", "json_schema"), ("regex", "regex"), ("ebnf", "ebnf"), ("choices", "choices"),
         ("guided_json", "json_schema"), ("guided_regex", "regex"), ("guided_choice", "choices"),
         ("guided_grammar", "ebnf"))
_STRUCTURED = {"json": "json_schema", "regex": "regex", "choice": "choices", "grammar": "ebnf",
               "json_object": "json_schema"}
# Accepted and without effect here: which backend vLLM compiles with, and its options.
_STRUCTURED_IGNORED = {"backend", "disable_fallback", "disable_any_whitespace",
                       "disable_additional_properties", "whitespace_pattern"}


def constraint_params(body) -> dict[str, Any]:
    """The engine's constraint key (at most one) from every spelling ``body`` may use."""
    found: list[tuple[str, str, Any]] = []  # (field as the client named it, engine key, spec)
    for name, key in _FLAT:
        value = getattr(body, name, None)
        if value is not None:
            found.append((name, key, value))
    found += _structured(getattr(body, "structured_outputs", None))
    if len(found) > 1:
        first, second = found[0][0], found[1][0]
        raise InvalidRequest(second, f"only one constraint per request (also got {first})")
    if not found:
        return {}
    name, key, spec = found[0]
    if key == "ebnf":
        _check_lark(name, spec)
    return {key: spec}


def _structured(so: dict[str, Any] | None) -> list[tuple[str, str, Any]]:
    if so is None:
        return []
    out = []
    for field, value in so.items():
        where = f"structured_outputs.{field}"
        if field in _STRUCTURED_IGNORED or value is None or (field == "json_object" and value is False):
            continue
        if field not in _STRUCTURED:
            raise InvalidRequest(where, f"not supported (supported: {sorted(_STRUCTURED)})")
        if field == "json_object":
            value = {"type": "object"}
        out.append((where, _STRUCTURED[field], value))
    return out


def _check_lark(name: str, grammar: Any) -> None:
    if isinstance(grammar, str) and "::=" in grammar:
        raise InvalidRequest(name, "GBNF grammars (rules written with '::=') are not supported; "
                                   "write it as a Lark grammar with a 'start' rule")


def continuous_usage(body) -> bool:
    """vLLM's per-chunk usage: both include_usage and continuous_usage_stats must be set."""
    opts = body.stream_options
    return bool(body.stream and opts and opts.include_usage and opts.continuous_usage_stats)
