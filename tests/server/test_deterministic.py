"""`serve --deterministic`: a greedy request gives the same tokens, with bit-identical
logprobs, alone on an idle server and among concurrent streams (other prompts, a shared
prefix in the radix cache, prompts cut into small prefill chunks). Without the option the
same load changes the logprobs' last bits (fp32 GEMMs sum a row differently in a batch of
another size), and a near-tie becomes a different token."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from sglang_lite.loopback import free_port
from sglang_lite.server.args import parse_args
from tests.server.conftest import wait_until_healthy

PREFIX = "The history of the city is long and complicated. " * 3
PROMPTS = [PREFIX + f"Question {i}: tell me about number {i * 7}." for i in range(3)] + ["List three colors:"]
NOISE = ["Explain gravity in detail. " * (i + 1) for i in range(4)]


@pytest.fixture(scope="module")
def base_url():
    port = free_port()
    cmd = [sys.executable, "-m", "sglang_lite.server", "--port", str(port), "--kv-cache-memory", "128MiB",
           "--log-level", "warning", "--dtype", "float32", "--grammar-compile-workers", "0",
           "--deterministic", "--chunked-prefill-size", "48", "--max-prefill-tokens", "96"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    url = f"http://127.0.0.1:{port}"
    wait_until_healthy(proc, url)
    yield url
    proc.terminate()
    proc.wait(timeout=60)


def _greedy(url: str, prompt: str, max_tokens: int = 12) -> tuple[str, list[float]]:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 1}
    r = httpx.post(url + "/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    return choice["text"], choice["logprobs"]["token_logprobs"]


def test_greedy_is_equal_alone_and_under_load(base_url):
    alone = []
    for prompt in PROMPTS:
        assert httpx.post(base_url + "/flush_cache", timeout=60).status_code == 200
        alone.append(_greedy(base_url, prompt))
    with ThreadPoolExecutor(len(NOISE) + len(PROMPTS)) as pool:
        noise = [pool.submit(_greedy, base_url, p, 20) for p in NOISE]
        loaded = list(pool.map(lambda p: _greedy(base_url, p), PROMPTS))
        for f in noise:
            f.result()
    for prompt, (text, lps), (text_l, lps_l) in zip(PROMPTS, alone, loaded):
        assert text_l == text, prompt
        assert lps_l == lps, prompt  # bit-identical, not merely close


def test_sglang_flag_name_is_accepted():
    assert parse_args(["--enable-deterministic-inference"]).engine_options == {"deterministic": True}
    assert parse_args(["--deterministic"]).engine_options == {"deterministic": True}
