"""Prefix-cache isolation: a second tenant sees cached_tokens 0 on the first tenant's
prefix, by `cache_salt` and by --cache-salt-by user / api_key."""

from __future__ import annotations

import uuid

import httpx

from sglang_lite.server import create_app
from tests.server.conftest import LiveServer


def _prompt() -> str:
    # Long enough for several whole pages, unique so no earlier test has cached it.
    return f"Secret {uuid.uuid4().hex}: " + "the quick brown fox jumps over the lazy dog " * 8


def _cached(c: httpx.Client, prompt: str, **extra) -> int:
    r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1, "temperature": 0, **extra})
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_cache_salt_separates_tenants(http):
    prompt = _prompt()
    assert _cached(http, prompt, cache_salt="tenant-a") == 0
    assert _cached(http, prompt, cache_salt="tenant-a") > 0  # the same tenant hits
    assert _cached(http, prompt, cache_salt="tenant-b") == 0
    assert _cached(http, prompt) == 0  # unsalted requests are a namespace of their own
    chat = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": prompt}],
                                                   "max_tokens": 1, "cache_salt": "tenant-c"})
    assert chat.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    gen = http.post("/generate", json={"text": prompt, "cache_salt": "tenant-a",
                                       "sampling_params": {"max_new_tokens": 1}})
    assert gen.json()["meta_info"]["cached_tokens"] > 0


def test_cache_salt_by_user(engine):
    live = LiveServer(create_app(engine, cache_salt_by="user")).start()
    try:
        with httpx.Client(base_url=live.base_url, timeout=120) as c:
            prompt = _prompt()
            assert _cached(c, prompt, user="alice") == 0
            assert _cached(c, prompt, user="alice") > 0
            assert _cached(c, prompt, user="bob") == 0
            # carol guesses the start of alice's prompt: alice's pages are not hers to hit
            assert _cached(c, prompt[:120], user="carol") == 0
            assert _cached(c, prompt[:120], user="alice") > 0
    finally:
        live.stop()


def test_cache_salt_by_api_key(engine):
    live = LiveServer(create_app(engine, api_key="k1", cache_salt_by="api_key")).start()
    try:
        with httpx.Client(base_url=live.base_url, timeout=120) as c:
            prompt = _prompt()
            one = {"Authorization": "Bearer k1"}
            body = {"prompt": prompt, "max_tokens": 1}
            first = c.post("/v1/completions", json=body, headers=one).json()
            again = c.post("/v1/completions", json=body, headers=one).json()
            assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
            assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
            other = c.post("/v1/completions", json={**body, "cache_salt": "x"}, headers=one).json()
            assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    finally:
        live.stop()
