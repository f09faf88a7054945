"""`python -m sglang_lite serve` in a subprocess: flags reach the engine and the app, a full
queue answers 429, and SIGTERM drains (running requests finish) and exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from sglang_lite.loopback import free_port
from tests.server.conftest import wait_until_healthy

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def serve_proc():
    port = free_port()
    cmd = [sys.executable, "-m", "sglang_lite.server", "--port", str(port), "--api-key", KEY,
           "--served-model-name", "tiny", "--max-running-requests", "1", "--max-queue-size", "1",
           "--kv-cache-memory", "32MiB", "--shutdown-timeout", "60", "--log-level", "warning",
           "--dtype", "float32"]  # as every test: results must not depend on this CPU's bf16
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    base = f"http://127.0.0.1:{port}"
    wait_until_healthy(proc, base)
    yield proc, base
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _stream(base: str, out: dict, started: threading.Event) -> None:
    body = {"model": "tiny", "prompt": "Count to ten:", "max_tokens": 24, "ignore_eos": True,
            "temperature": 0, "stream": True}
    events = []
    with httpx.stream("POST", base + "/v1/completions", json=body, headers=AUTH, timeout=120) as r:
        out["status"] = r.status_code
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                started.set()
    out["events"] = events


def _queue_len(base: str) -> int:
    return httpx.get(base + "/get_server_info", headers=AUTH, timeout=10).json()["num_queue_reqs"]


def test_flags_queue_full_and_sigterm(serve_proc):
    proc, base = serve_proc
    models = httpx.get(base + "/v1/models", headers=AUTH).json()
    assert [m["id"] for m in models["data"]] == ["tiny"]
    assert httpx.get(base + "/v1/models").status_code == 401
    info = httpx.get(base + "/get_server_info", headers=AUTH).json()
    assert info["max_running_requests"] == 1 and info["max_queue_size"] == 1
    # The startup heap (model, tokenizer, imports: hundreds of thousands of objects) is out of
    # the garbage collector's reach, so a full collection cannot stall requests for ~100 ms.
    assert info["gc_frozen_objects"] > 100_000, info["gc_frozen_objects"]

    # One running, one waiting: the engine's bound (running + queue) is reached.
    results = [{}, {}]
    started = [threading.Event(), threading.Event()]
    threads = [threading.Thread(target=_stream, args=(base, results[i], started[i])) for i in range(2)]
    threads[0].start()
    assert started[0].wait(60)
    threads[1].start()
    deadline = time.monotonic() + 30
    while _queue_len(base) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    r = httpx.post(base + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, headers=AUTH)
    assert r.status_code == 429, r.text
    assert r.headers["retry-after"] and r.json()["error"]["code"] == "rate_limit_exceeded"

    # SIGTERM mid-generation: no new work, running requests finish, exit status 0.
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    try:
        late = httpx.post(base + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, headers=AUTH,
                          timeout=5)
        assert late.status_code == 503
    except httpx.TransportError:
        pass  # the listening socket is already closed: also a refusal
    for t in threads:
        t.join(120)
    assert proc.wait(timeout=120) == 0, proc.stdout.read()[-3000:]
    for res in results:
        assert res["status"] == 200 and res["events"][-1] == "[DONE]"
        finishes = [c["finish_reason"] for e in res["events"][:-1] for c in json.loads(e)["choices"]
                    if c.get("finish_reason")]
        assert finishes == ["length"]
