"""Prefix-cache namespaces per tenant.

A shared prefix cache is a side channel: ``cached_tokens`` (and time to first token) tell a
caller whether someone else's prompt starts with a guessed text. A request's ``cache_salt``
(vLLM's field) puts it in its own namespace; ``--cache-salt-by api_key|user`` does that for
every request, by the API key it presented or its ``user`` field. Only requests with the
same effective salt share cached prefixes.
"""

from __future__ import annotations

import hashlib

from sglang_lite.errors import InvalidRequest

SALT_BY = ("none", "api_key", "user")
MAX_SALT_CHARS = 256


def effective_salt(state, request, cache_salt: str | None, user: str | None = None) -> str | None:
    """The salt the engine keys this request's prefixes with (a digest), or None."""
    if cache_salt is not None and (not isinstance(cache_salt, str) or not cache_salt
                                   or len(cache_salt) > MAX_SALT_CHARS):
        raise InvalidRequest("cache_salt", f"must be a non-empty string of at most {MAX_SALT_CHARS} "
                            "characters")
    parts = []
    by = getattr(state, "cache_salt_by", "none")
    if by == "api_key":
        parts.append("key\0" + request.headers.get("authorization", ""))
    elif by == "user":
        parts.append("user\0" + (user or ""))
    if cache_salt is not None:
        parts.append("salt\0" + cache_salt)
    if not parts:
        return None
    return hashlib.sha256("\0\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
