"""Servers started as local processes on 127.0.0.1: a free port, and waiting until they answer.

One implementation for the ``--dp`` launcher, the benchmarks that start replicas or peers, and
the tests that start ``sglang-lite serve``.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Sequence

import httpx


class ServerStartError(RuntimeError):
    """A server process exited, or did not answer /health, before its start-up deadline."""

    def __init__(self, url: str, reason: str):
        super().__init__(f"server {url} did not start: {reason}")
        self.url = url
        self.reason = reason


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_healthy(url: str, path: str = "/health") -> bool:
    try:
        return httpx.get(url + path, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until_healthy(servers: Sequence[tuple[subprocess.Popen, str]], timeout_s: float,
                       poll_s: float = 0.25) -> None:
    """Return once every ``(process, base_url)`` answers 200 on /health; raise
    :class:`ServerStartError` for the first that exits, or for those still silent at the deadline."""
    pending = dict(enumerate(servers))
    deadline = time.monotonic() + timeout_s
    while pending:
        for i, (proc, url) in list(pending.items()):
            if proc.poll() is not None:
                raise ServerStartError(url, f"exited with status {proc.returncode} during start-up")
            if is_healthy(url):
                del pending[i]
        if not pending:
            return
        if time.monotonic() > deadline:
            silent = ", ".join(url for _, url in pending.values())
            raise ServerStartError(silent, f"no healthy answer within {timeout_s:.0f} s")
        time.sleep(poll_s)
