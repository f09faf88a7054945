"""No input gives a 5xx: schemathesis generates valid and invalid requests for every
operation in our own /openapi.json and sends them to the live server (bounded examples and
time; a before-call hook keeps generation short)."""

from __future__ import annotations

import time

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402

_BUDGET_S = 90.0  # the whole run
_EXAMPLES = {"POST": 25, "GET": 6}
# Routes that change server state for every other test; fuzzing them proves nothing more.
_SKIP = {("POST", "/flush_cache"), ("GET", "/flush_cache"), ("POST", "/freeze_gc"), ("GET", "/freeze_gc")}


@schemathesis.hook
def before_call(context, case, kwargs):
    """Keep every generation to a few tokens and choices, whatever was drawn."""
    body = case.body
    if isinstance(body, dict):
        _bound(body)
        params = body.get("sampling_params")
        for p in params if isinstance(params, list) else [params]:
            if isinstance(p, dict):
                _bound(p)
    kwargs.setdefault("timeout", 60)


def _bound(body: dict) -> None:
    for key in ("max_tokens", "max_completion_tokens", "max_new_tokens"):
        if isinstance(body.get(key), int) and not isinstance(body.get(key), bool):
            body[key] = min(body[key], 2)
    # a chat request without a limit (absent or null) runs to the context length: thousands of
    # tokens with ignore_eos, past the call's timeout
    if "messages" in body and body.get("max_tokens") is None and not isinstance(body.get("max_completion_tokens"), int):
        body["max_tokens"] = 2
    for key in ("n", "best_of"):
        if isinstance(body.get(key), int) and not isinstance(body.get(key), bool):
            body[key] = min(body[key], 2)


def _fuzz(op, mode, label: str, base_url: str, started: float, counts: dict, failures: list) -> None:
    @settings(max_examples=_EXAMPLES.get(op.method.upper(), 6), deadline=None, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case):
        if time.monotonic() - started > _BUDGET_S:
            return
        response = case.call(base_url=base_url)
        counts[label] = counts.get(label, 0) + 1
        if response.status_code >= 500:
            failures.append(f"{label} {case.body!r:.300} -> {response.status_code} {response.text[:300]}")

    try:
        run()
    except Unsatisfiable:  # nothing to make invalid (an operation without parameters)
        pass


def test_no_input_gives_a_server_error(server, http):
    schema = schemathesis.openapi.from_url(server.base_url + "/openapi.json")
    started = time.monotonic()
    failures: list[str] = []
    counts: dict[str, int] = {}
    for result in schema.get_all_operations():
        op = result.ok()
        if (op.method.upper(), op.path) in _SKIP:
            continue
        label = f"{op.method.upper()} {op.path}"
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzz(op, mode, label, server.base_url, started, counts, failures)
    print(f"schemathesis: {sum(counts.values())} requests in {time.monotonic() - started:.1f} s over "
          f"{len(counts)} operations; {len(failures)} 5xx")
    assert not failures, "\n".join(failures[:20])
    assert http.get("/health").status_code == 200
    assert {"POST /v1/completions", "POST /v1/chat/completions", "POST /generate"} <= set(counts)
