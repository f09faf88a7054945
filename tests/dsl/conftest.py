"""One embedded engine for every DSL test (loading it is the slow part), and a live server on
127.0.0.1 over that same engine for the OpenAI-compatible backend."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from frontend_dsl import EngineBackend


@pytest.fixture(scope="session")
def engine_backend():
    backend = EngineBackend()
    yield backend
    backend.shutdown()


@pytest.fixture()
def engine(engine_backend):
    return engine_backend.engine


@pytest.fixture(scope="session")
def live_url(engine_backend):
    """``sglang-lite``'s app (OpenAI routes, /generate, /tokenize) on a free loopback port."""
    import uvicorn

    from sglang_lite.server import create_app

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(engine_backend.engine), host="127.0.0.1",
                                           port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="dsl-test-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)
