"""A bounded load test from a second process: a few hundred concurrent mixed requests against
the live server (queueing: max_running_requests is small), then the books must balance."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.server.conftest import assert_no_leaked_pages, scrape, wait_idle

NUM_REQUESTS = 200


def _prompt_tokens(engine, rec: dict) -> int:
    body = rec["body"]
    if "messages" in body:
        return len(engine.tokenize(engine.apply_chat_template(body["messages"])))
    return len(engine.tokenize(body["prompt"]))


def test_load_from_second_process(server, http, engine, tmp_path: Path):
    wait_idle(http)
    before = scrape(http)
    out = tmp_path / "load.json"
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("load_client.py")),
                           server.base_url, str(NUM_REQUESTS), str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = json.loads(out.read_text())
    assert len(records) == NUM_REQUESTS
    bad = [r for r in records if not r["ok"]]
    assert not bad, bad[:3]

    wait_idle(http)
    after = scrape(http)

    def delta(name: str) -> float:
        return after[f"sglang_lite:{name}"] - before.get(f"sglang_lite:{name}", 0.0)

    cancelled = [r for r in records if r["kind"] == "cancelled"]
    completed = [r for r in records if r["kind"] != "cancelled"]
    assert delta("num_requests_total") == NUM_REQUESTS
    aborted = delta("num_aborted_requests_total")
    assert 0 < aborted <= len(cancelled)
    assert delta("e2e_request_latency_seconds_count") == NUM_REQUESTS - aborted
    assert delta("time_to_first_token_seconds_count") == NUM_REQUESTS
    assert delta("prompt_tokens_total") == sum(_prompt_tokens(engine, r) for r in records)
    done_tokens = sum(r["usage"]["completion_tokens"] for r in completed if r.get("usage"))
    streamed_no_usage = [r for r in completed if not r.get("usage")]
    assert delta("generation_tokens_total") >= done_tokens
    assert delta("generation_tokens_total") <= done_tokens + 8 * len(streamed_no_usage) + 64 * len(cancelled)
    assert 0 <= delta("cached_tokens_total") <= delta("prompt_tokens_total")
    assert_no_leaked_pages(http)
