"""Forced shutdown: past --shutdown-timeout every open stream ends with an error event and
[DONE]; while draining, new requests get 503 with Retry-After; the process exits 0 cleanly.
The server takes its API keys from a file and the environment (never argv)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx

from sglang_lite.loopback import free_port
from tests.server.conftest import wait_until_healthy

KEYS = {"file": "key-from-file", "env": "key-from-env"}


def _start(port: int, *flags: str, env: dict | None = None) -> subprocess.Popen:
    # --grammar-compile-workers 0: this test needs no compile workers (start-up time)
    cmd = [sys.executable, "-m", "sglang_lite.server", "--port", str(port), "--kv-cache-memory", "128MiB",
           "--log-level", "warning", "--dtype", "float32", "--grammar-compile-workers", "0", *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false", **(env or {})})
    wait_until_healthy(proc, f"http://127.0.0.1:{port}")
    return proc


def _long_stream(base: str, out: dict, started: threading.Event, i: int) -> None:
    body = {"prompt": f"Story {i}:", "max_tokens": 1000, "ignore_eos": True, "stream": True}
    events = []
    key = KEYS["file"] if i % 2 else KEYS["env"]  # either key works
    try:
        with httpx.stream("POST", base + "/v1/completions", json=body, timeout=120,
                          headers={"Authorization": f"Bearer {key}"}) as r:
            out["status"] = r.status_code
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    started.set()
    except httpx.HTTPError as e:
        out["transport_error"] = repr(e)
    out["events"] = events


def test_forced_shutdown_ends_every_stream_with_an_error_event(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    keys = tmp_path / "keys"
    keys.write_text(KEYS["file"] + "\n")
    proc = _start(port, "--shutdown-timeout", "3", "--api-key-file", str(keys),
                  env={"SGLANG_LITE_API_KEYS": KEYS["env"]})
    try:
        cmdline = open(f"/proc/{proc.pid}/cmdline", "rb").read()
        assert all(k.encode() not in cmdline for k in KEYS.values())  # not in `ps`
        assert httpx.get(base + "/v1/models", timeout=10).status_code == 401
        assert httpx.get(base + "/metrics", timeout=10).status_code == 401
        n = 6
        results = [{} for _ in range(n)]
        started = [threading.Event() for _ in range(n)]
        threads = [threading.Thread(target=_long_stream, args=(base, results[i], started[i], i))
                   for i in range(n)]
        for t in threads:
            t.start()
        for e in started:
            assert e.wait(60)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        late = httpx.post(base + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=10,
                          headers={"Authorization": f"Bearer {KEYS['env']}"})
        assert late.status_code == 503, late.text
        assert late.headers["retry-after"] and late.json()["error"]["type"] == "service_unavailable"
        assert httpx.get(base + "/health", timeout=10).status_code == 503
        for t in threads:
            t.join(60)
        ended = time.monotonic() - t0
        status = proc.wait(timeout=60)
        output = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert status == 0, output[-3000:]
    assert "Traceback" not in output and "Event loop is closed" not in output, output[-3000:]
    assert 2.5 < ended < 20, ended
    for res in results:
        assert res.get("status") == 200 and "transport_error" not in res, res
        events = res["events"]
        assert events[-1] == "[DONE]", events[-3:]
        err = json.loads(events[-2])["error"]
        assert err["code"] == "server_shutdown" and err["type"] == "service_unavailable", err
        finishes = [c["finish_reason"] for e in events[:-2] for c in json.loads(e).get("choices", [])
                    if c.get("finish_reason")]
        assert finishes in ([], ["abort"]), finishes
