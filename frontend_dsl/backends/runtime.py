"""SGLang's ``sgl.Runtime(...)``: start a ``sglang-lite serve`` subprocess on a free loopback
port and talk to it through a ``RuntimeEndpoint`` (``runtime.endpoint``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import httpx

from frontend_dsl.backends.runtime_endpoint import RuntimeEndpoint


class Runtime:
    """``Runtime(model_path=None, **server_args)``; keyword options become the server's flags
    (``kv_cache_memory="256MiB"`` is ``--kv-cache-memory 256MiB``; ``True`` is a bare flag).
    ``set_default_backend(runtime)`` uses its endpoint. Call ``shutdown()`` (or use ``with``)."""

    def __init__(self, model_path: str | None = None, *, host: str = "127.0.0.1", port: int | None = None,
                 api_key: str | None = None, log_level: str = "warning", timeout: float = 300.0,
                 **server_args: Any):
        self.port = port or _free_port()
        self.url = f"http://{host}:{self.port}"
        args = ["--host", host, "--port", str(self.port), "--log-level", log_level]
        if model_path is not None:
            args += ["--model", str(model_path)]
        if api_key is not None:
            args += ["--api-key", api_key]
        for key, value in server_args.items():
            flag = "--" + key.replace("_", "-")
            args += [flag] if value is True else [f"--no-{flag[2:]}"] if value is False else [flag, str(value)]
        self._log = tempfile.TemporaryFile(mode="w+")
        self._proc = subprocess.Popen([sys.executable, "-m", "sglang_lite", "serve", *args],
                                      stdout=subprocess.DEVNULL, stderr=self._log, env=dict(os.environ))
        try:
            self._wait_healthy(timeout)
        except BaseException:
            self.shutdown()
            raise
        self.endpoint = RuntimeEndpoint(self.url, api_key=api_key)

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                self._log.seek(0)
                raise RuntimeError(f"Runtime: the server exited ({self._proc.returncode}): "
                                   f"{self._log.read()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"Runtime: the server was not healthy within {timeout:.0f} s")
            time.sleep(0.5)

    def generate(self, prompt: str | list[str], sampling_params: dict[str, Any] | None = None,
                 **request: Any) -> Any:
        """SGLang's ``runtime.generate``: one ``/generate`` call, its JSON back."""
        return self.endpoint._post({"text": prompt, "sampling_params": sampling_params or {}, **request})

    def shutdown(self) -> None:
        if getattr(self, "endpoint", None) is not None:
            self.endpoint.shutdown()
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._log.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
