"""Waiting for local server processes: healthy, exited, and silent past the deadline."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sglang_lite.loopback import ServerStartError, free_port, wait_until_healthy


def _http_server(directory, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                             "--directory", str(directory)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_returns_once_every_server_answers_200(tmp_path):
    (tmp_path / "health").write_text("ok")  # http.server answers GET /health with 200
    ports = [free_port(), free_port()]
    procs = [_http_server(tmp_path, p) for p in ports]
    try:
        wait_until_healthy([(p, f"http://127.0.0.1:{port}") for p, port in zip(procs, ports)], 30)
        assert all(p.poll() is None for p in procs)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_exited_process_is_named_with_its_status():
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerStartError, match="status 3") as err:
        wait_until_healthy([(proc, url)], 30)
    assert err.value.url == url


def test_silent_server_fails_at_the_deadline(tmp_path):
    port = free_port()
    proc = _http_server(tmp_path, port)  # no /health file: 404 until the deadline
    try:
        with pytest.raises(ServerStartError, match="within 1 s"):
            wait_until_healthy([(proc, f"http://127.0.0.1:{port}")], 1.0)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
