"""`sglang-lite serve --tp 2` in a subprocess: it starts its worker rank itself, answers like
a tp=1 engine (greedy), and a worker rank killed mid-stream takes the server down: the client
gets an answer (no hang), the process exits non-zero saying which rank died."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from sglang_lite.loopback import free_port
from tests.server.conftest import wait_until_healthy

WORKER_MODULE = "sglang_lite.parallel.worker"


def _serve(*flags: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "sglang_lite", "serve", "--port", str(port), "--dtype", "float32",
           "--num-threads", "1", "--kv-cache-memory", "48MiB", "--log-level", "warning", *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    return proc, f"http://127.0.0.1:{port}"


def _tp_workers(pid: int) -> list[int]:
    """Child processes of ``pid`` that are tensor-parallel worker ranks (started by whichever of
    its threads: the engine launches them from its scheduler thread)."""
    children = [c for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]
    return [int(c) for c in children
            if WORKER_MODULE in Path(f"/proc/{c}/cmdline").read_bytes().replace(b"\0", b" ").decode()]


@pytest.fixture(scope="module")
def tp_server():
    proc, base = _serve("--tp", "2")
    try:
        wait_until_healthy(proc, base, timeout_s=240)
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_serve_tp2_answers_like_tp1(tp_server, engine, model_name):
    _, base = tp_server
    prompts = ["The capital of France is", "List three colors:"]
    for prompt in prompts:
        body = {"model": model_name, "prompt": prompt, "max_tokens": 10, "temperature": 0}
        got = httpx.post(base + "/v1/completions", json=body, timeout=120).json()["choices"][0]["text"]
        assert got == engine.generate(prompt, {"max_new_tokens": 10, "temperature": 0})["text"]
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}, "required": ["name"]}
    body = {"model": model_name, "messages": [{"role": "user", "content": "Give a name as JSON."}], "max_tokens": 40,
            "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}}
    r = httpx.post(base + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    assert set(json.loads(r.json()["choices"][0]["message"]["content"])) == {"name"}


def test_killed_worker_rank_takes_the_server_down(tp_server, model_name):
    proc, base = tp_server
    workers = _tp_workers(proc.pid)
    assert len(workers) == 1
    events, started = [], threading.Event()

    def stream():
        body = {"model": model_name, "prompt": "Tell a long story:", "max_tokens": 400, "ignore_eos": True, "stream": True}
        try:
            with httpx.stream("POST", base + "/v1/completions", json=body, timeout=60) as r:
                for line in r.iter_lines():
                    events.append(line)
                    started.set()
        except httpx.HTTPError as e:  # the server may close the connection as it exits
            events.append(f"closed: {type(e).__name__}")

    reader = threading.Thread(target=stream, daemon=True)
    reader.start()
    assert started.wait(60)
    killed = time.monotonic()
    os.kill(workers[0], 9)
    code = proc.wait(timeout=30)
    elapsed = time.monotonic() - killed
    reader.join(timeout=10)
    assert not reader.is_alive(), "the client's stream hangs after the server went down"
    out = proc.stdout.read()
    assert code == 1, out[-2000:]
    assert f"rank 1 (pid {workers[0]}) died (killed by signal 9)" in out
    assert elapsed < 20, elapsed
    assert len([e for e in events if e.startswith("data: {")]) < 400


def test_serve_refuses_a_tp_that_does_not_split_the_model():
    proc, _ = _serve("--tp", "4")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert "sglang-lite serve: tp: 4 ranks cannot share 3 KV heads" in out
