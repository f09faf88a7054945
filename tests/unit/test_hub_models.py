"""``--model org/name`` through huggingface_hub's standard cache. These machines have no hub
access, so the embedded model is laid into a cache directory as the hub lays it out
(``models--org--name/{blobs,snapshots/<rev>,refs/main}``) and resolved offline."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from sglang_lite import Engine
from sglang_lite.model.loader import resolve_model

REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
REVISION = "a" * 40


def _lay_out_hub_cache(hub: Path, repo: str, source: Path, revision: str) -> Path:
    """The hub's cache layout: content-addressed blobs, a snapshot of links, a ref."""
    root = hub / ("models--" + repo.replace("/", "--"))
    snapshot = root / "snapshots" / revision
    (root / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for f in sorted(source.iterdir()):
        digest = hashlib.sha256(f"{f.name}:{f.stat().st_size}".encode()).hexdigest()
        blob = root / "blobs" / digest
        os.symlink(f.resolve(), blob)  # the weights are not copied: the blob points at them
        os.symlink(os.path.relpath(blob, snapshot), snapshot / f.name)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(revision)
    return snapshot


@pytest.fixture
def offline_hub(tmp_path, monkeypatch, model_dir):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return _lay_out_hub_cache(tmp_path / "hf" / "hub", REPO, model_dir, REVISION)


def test_hub_name_resolves_to_the_cached_snapshot(offline_hub):
    src = resolve_model(REPO)
    assert src.name == REPO and src.path == offline_hub
    assert resolve_model(REPO, revision=REVISION).path == offline_hub  # a commit, not only refs/main


def test_engine_serves_a_hub_name_as_the_embedded_model(offline_hub, engine):
    prompt = "The capital of France is"
    params = {"temperature": 0, "max_new_tokens": 8}
    hub_engine = Engine(REPO)
    try:
        assert hub_engine.source.path == offline_hub
        assert hub_engine.generate(prompt, params)["text"] == engine.generate(prompt, params)["text"]
        assert hub_engine.tokenizer.chat_template  # the tokenizer and template came from the snapshot
    finally:
        hub_engine.shutdown()


def test_missing_hub_model_offline_is_a_clear_error(offline_hub):
    with pytest.raises(ValueError, match=r"model: 'nobody/nothing' is offline \(HF_HUB_OFFLINE=1\)"):
        resolve_model("nobody/nothing")
    with pytest.raises(ValueError, match="model"):
        resolve_model(REPO, revision="no-such-branch")


def test_hf_hub_cache_overrides_hf_home(tmp_path, monkeypatch, model_dir):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = _lay_out_hub_cache(tmp_path / "cache", REPO, model_dir, REVISION)
    assert resolve_model(REPO).path == snapshot
