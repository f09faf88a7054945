"""The same programs over HTTP: RuntimeEndpoint against a live ``sglang-lite serve``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from frontend_dsl import (
    ProgramError,
    RuntimeEndpoint,
    assistant,
    function,
    gen,
    select,
    system,
    user,
)

ROOT = Path(__file__).resolve().parents[2]
PREFIX = ("You are a sentiment classifier. Read the review and answer with one word: positive "
          "or negative. Reviews that praise the product are positive; complaints are negative.\n")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    log = tmp_path_factory.mktemp("server") / "server.log"
    # `python -m sglang_lite serve --port P`, through the server's entry point directly.
    cmd = [sys.executable, "-c", "import sys; from sglang_lite.server import main; sys.exit(main(sys.argv[1:]))",
           "--port", str(port), "--log-level", "warning", "--dtype", "float32"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=log.open("w"), text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited ({proc.returncode}): {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("server did not become healthy in 180 s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def backend(server_url):
    b = RuntimeEndpoint(server_url)
    yield b
    b.shutdown()


def test_uses_the_servers_chat_template(backend):
    assert backend.chat_template.begin("user") == "<|im_start|>user\n"


def test_greedy_gen_equals_server_greedy(backend, server_url):
    @function
    def prog(s):
        s += "The three primary colors are"
        s += gen("out", max_tokens=10, temperature=0)

    state = prog.run(backend=backend)
    direct = httpx.post(f"{server_url}/generate", timeout=120, json={
        "text": "The three primary colors are",
        "sampling_params": {"max_new_tokens": 10, "temperature": 0}}).json()
    assert state["out"] == direct["text"]


def test_multi_turn_roles_and_cache(backend):
    @function
    def chat(s, q):
        s += system(PREFIX)
        s += user(q)
        s += assistant(gen("a", max_tokens=6, temperature=0, stop="\n"))
        s += user("Thanks. One more word?")
        s += assistant(gen("b", max_tokens=4, temperature=0))

    first = chat.run(q="Review: great phone.", backend=backend)
    second = chat.run(q="Review: great phone.", backend=backend)
    assert [m["role"] for m in first.messages()] == ["system", "user", "assistant", "user", "assistant"]
    assert first["a"] == second["a"]
    assert second.meta["cached_tokens"] > first.meta["cached_tokens"]


def test_select(backend):
    @function
    def classify(s, review):
        s += PREFIX + f"Review: {review}\nSentiment:"
        s += select("label", choices=[" positive", " negative"])

    state = classify.run(review="I love it, works perfectly.", backend=backend)
    assert state["label"] in (" positive", " negative")
    assert len(state.get_meta_info("label")["normalized_prompt_logprobs"]) == 2


def test_fork_branches_hit_the_shared_prefix(backend):
    @function
    def tree(s):
        s += PREFIX * 2 + "Four one-word fruit names:\n"
        forks = s.fork(4)
        for i, f in enumerate(forks):
            f += f"{i + 1}."
            f += gen("fruit", max_tokens=3, temperature=0.7, seed=i)
        forks.join()

    state = tree.run(backend=backend)
    assert len(state["fruit"]) == 4
    assert all(m["cached_tokens"] >= 48 for m in state._metas[1:])


def test_run_batch_and_stream(backend):
    @function
    def prog(s, review, pattern):
        s += PREFIX * 2 + f"Review: {review}\nSentiment:"
        s += gen("label", max_tokens=3, temperature=0, regex=pattern)

    states = prog.run_batch([{"review": "Great!", "pattern": " (positive|negative)"},
                             {"review": "Bad.", "pattern": "(unclosed"}], backend=backend)
    assert states[0]["label"] in (" positive", " negative")
    assert isinstance(states[1].error, ProgramError) and states[1].error.variable == "label"
    assert "HTTP 400" in str(states[1].error)

    @function
    def hello(s):
        s += user("Say hello.")
        s += assistant(gen("x", max_tokens=8, temperature=0))

    run = hello.run(stream=True, backend=backend)
    deltas = list(run.text_iter())
    assert "".join(deltas) == run.text() and run["x"]
