"""Servers started as local processes on 127.0.0.1: a free port, and waiting until they answer.

One implementation for the ``--dp`` launcher, the benchmarks that start replicas or peers, and
the tests that start ``sglang-lite serve``.
"""

from __future__ import annotations

import socket
import subprocess
import threading
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


class AppThread:
    """An ASGI app served by uvicorn on 127.0.0.1 in a daemon thread of this process; a context
    manager, or ``start()`` / ``stop()``."""

    def __init__(self, app, port: int | None = None, *, lifespan: str = "on", name: str = "uvicorn"):
        import uvicorn

        self.app = app
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning", lifespan=lifespan))
        self.thread = threading.Thread(target=self.server.run, name=name, daemon=True)

    def start(self, timeout_s: float = 30) -> AppThread:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise ServerStartError(self.base_url, "the in-process server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def __enter__(self) -> AppThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
