"""/ui in a real headless browser (Debian's chromium driven by Playwright): the page loads from
the server alone (no other origin is contacted), a playground request streams JSON that
validates against its schema into the page, and the live charts update from /ui/stats. A
screenshot is saved under the test's tmp dir. Skipped when chromium or Playwright is absent."""

from __future__ import annotations

import json
import shutil

import jsonschema
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# test_openai's schema: in a full run its compile is cached already (a cold compile worker on a
# busy 2-core machine can pass the 10 s compile deadline)
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def test_ui_stats_endpoint(http):
    stats = http.get("/ui/stats").json()
    for key in ("num_running_reqs", "num_queue_reqs", "token_usage", "num_generated_tokens",
                "ttft_sum", "ttft_count", "itl_sum", "itl_count"):
        assert isinstance(stats[key], (int, float)), key
    page = http.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<script src" not in page.text and "https://" not in page.text  # nothing fetched elsewhere


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("chromium not installed (apt-get install chromium): /ui browser test skipped")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        yield b
        b.close()


def _warm_compile(http) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1,
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}}
    for _ in range(3):  # a compile past the deadline restarts its worker; the next try is warm
        if http.post("/v1/chat/completions", json=body).status_code == 200:
            return


def test_ui_playground_streams_valid_json_and_charts_update(browser, server, http, tmp_path):
    _warm_compile(http)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    requested: list[str] = []
    page.on("request", lambda req: requested.append(req.url))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server.base_url + "/ui")
    page.wait_for_function("window.uiState && window.uiState.samples >= 2", timeout=30_000)
    before = page.evaluate("window.uiState.last.num_generated_tokens")

    page.fill("#prompt", "Describe a person as JSON.")
    page.select_option("#mode", "json_schema")
    page.fill("#constraint", json.dumps(SCHEMA, indent=2))
    page.fill("#max_tokens", "60")
    page.click("#run")
    page.wait_for_function("document.getElementById('status').textContent !== 'streaming'",
                           timeout=120_000)
    status = page.text_content("#status")
    assert status == "done", status
    output = page.text_content("#output")
    jsonschema.validate(json.loads(output), SCHEMA)
    assert page.text_content("#valid") == "parses"
    tokens = int(page.text_content("#tokens"))
    assert tokens > 3
    assert page.text_content("#tpot").endswith(" ms") and page.text_content("#ttft").endswith(" ms")

    # the charts take the generation in (jump-forward tokens are not counted as generated):
    # throughput above 0 at some point, a TTFT sample
    page.wait_for_function(f"window.uiState.last.num_generated_tokens > {before}", timeout=30_000)
    page.wait_for_timeout(1500)  # one more poll after the counters moved
    series = page.evaluate("window.uiState.series")
    assert max(v for v in series["throughput"][0] if v is not None) > 0
    assert any(v is not None and v > 0 for v in series["latency"][0])  # TTFT (ms)
    assert all(0 <= v <= 100 for v in series["kv"][0])
    assert page.evaluate("window.uiState.errors") == 0 and not errors, errors

    shot = tmp_path / "ui.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    assert all(url.startswith(server.base_url) for url in requested), requested
    page.close()
