"""Several API keys (argv, file, environment), /metrics behind them unless opened."""

from __future__ import annotations

import httpx
import pytest

from sglang_lite.server import create_app
from sglang_lite.server.auth import ENV_VAR, load_api_keys
from tests.server.conftest import LiveServer


def test_keys_from_argv_file_and_environment(tmp_path):
    f = tmp_path / "keys"
    f.write_text("# team a\nfile-1\n\n  file-2  \n")
    keys = load_api_keys(["cli-1"], str(f), env={ENV_VAR: "env-1, env-2\nfile-1"})
    assert keys == ("cli-1", "file-1", "file-2", "env-1", "env-2")
    with pytest.raises(ValueError, match="api-key-file"):
        load_api_keys(None, str(tmp_path / "missing"), env={})
    with pytest.raises(ValueError, match="whitespace"):
        load_api_keys(["a b"], None, env={})


@pytest.mark.parametrize("open_metrics", [False, True])
def test_any_key_is_accepted_and_metrics_need_one(engine, open_metrics):
    live = LiveServer(create_app(engine, api_key=["k1", "k2"], open_metrics=open_metrics)).start()
    try:
        with httpx.Client(base_url=live.base_url, timeout=60) as c:
            for key in ("k1", "k2"):
                assert c.get("/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 200
            for bad in ({}, {"Authorization": "Bearer k3"}, {"Authorization": "Bearer k1k2"}):
                r = c.get("/v1/models", headers=bad)
                assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
            metrics = c.get("/metrics")
            assert metrics.status_code == (200 if open_metrics else 401)
            assert c.get("/metrics", headers={"Authorization": "Bearer k2"}).status_code == 200
            assert c.get("/health").status_code == 200
            assert c.get("/openapi.json").status_code == 200
    finally:
        live.stop()
