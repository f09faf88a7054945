"""API keys: any number, from --api-key (repeatable), a file (--api-key-file, one key a
line, ``#`` comments) or the ``SGLANG_LITE_API_KEYS`` environment variable (comma- or
newline-separated), so a key need not appear in ``ps``. Checked in constant time against
every key."""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterable, Mapping

ENV_VAR = "SGLANG_LITE_API_KEYS"


def load_api_keys(cli_keys: Iterable[str] | None = None, key_file: str | None = None,
                  env: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """Every configured key, in order, without duplicates; ValueError for an empty key or
    an unreadable file."""
    keys: list[str] = list(cli_keys or [])
    if key_file is not None:
        try:
            with open(key_file, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise ValueError(f"--api-key-file: cannot read {key_file}: {e.strerror}") from None
        keys += [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    keys += [k.strip() for k in env.get(ENV_VAR, "").replace("\n", ",").split(",") if k.strip()]
    if any(not k or any(c.isspace() for c in k) for k in keys):
        raise ValueError("api key: keys must be non-empty and contain no whitespace")
    return tuple(dict.fromkeys(keys))


def authorized(authorization: bytes, keys: tuple[str, ...]) -> bool:
    """Whether an ``Authorization`` header value is ``Bearer <one of keys>`` (every key is
    compared, so the time taken says nothing about which one nearly matched)."""
    ok = False
    for key in keys:
        ok |= hmac.compare_digest(authorization, b"Bearer " + key.encode())
    return ok
