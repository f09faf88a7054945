"""RoPE tables, config reading and the loaders (each family against transformers:
test_model_families.py)."""

from __future__ import annotations

import pytest
import torch

from sglang_lite.model.config import ModelConfig
from sglang_lite.model.loader import resolve_model
from sglang_lite.model.rope import rope_inv_freq


def test_llama3_rope_scaling_matches_transformers():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    cfg = LlamaConfig(hidden_size=2048, num_attention_heads=32, rope_parameters=params)
    ref, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    ours = rope_inv_freq(64, 500000.0, params)
    assert torch.allclose(ours, ref.float(), rtol=1e-6)
    plain = rope_inv_freq(64, 500000.0, None)
    assert not torch.allclose(ours, plain)  # scaling really changes the low frequencies


def test_config_from_hf_reads_every_family_switch():
    cfg = ModelConfig.from_hf({"model_type": "qwen2", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
                               "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
                               "eos_token_id": [3, 4]})
    assert cfg.qkv_bias and not cfg.qk_norm and cfg.num_kv_heads == 2 and cfg.head_dim == 4
    assert cfg.eos_token_ids == (3, 4)
    with pytest.raises(ValueError, match="model_type"):
        ModelConfig.from_hf({"model_type": "gpt2"})


def test_resolve_model_errors_name_the_option():
    with pytest.raises(ValueError, match="model"):
        resolve_model("no/such/dir")
    with pytest.raises(ValueError, match="dummy preset"):
        resolve_model("dummy:nope")


def test_gguf_file_converts_once_into_xdg_cache(tmp_path, monkeypatch):
    """A .gguf path converts (dequantized, with its tokenizer) into the XDG cache once. On a tiny
    GGUF file: the embedded model's own conversion runs in the session's ``model_dir``."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from sglang_lite.model.loader import convert_gguf
    from tests.tiny_gguf import tiny_vocab, write_tiny_gguf

    gguf_path = tmp_path / "tiny.gguf"
    values = write_tiny_gguf(gguf_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    src = resolve_model(str(gguf_path))
    assert src.path.is_relative_to(tmp_path / "xdg" / "sglang-lite" / "models") and src.gguf_path == gguf_path
    assert (src.path / "model.safetensors").exists() and (src.path / "tokenizer.json").exists()
    state = load_file(str(src.path / "model.safetensors"))
    assert torch.equal(state["model.embed_tokens.weight"], torch.from_numpy(values["token_embd.weight"]))
    assert torch.equal(state["model.layers.1.mlp.down_proj.weight"], torch.from_numpy(values["blk.1.ffn_down.weight"]))
    tok = AutoTokenizer.from_pretrained(src.path)
    assert len(tok) == len(tiny_vocab()) and tok.convert_ids_to_tokens(tok.encode(" the", add_special_tokens=False)) == ["Ġt", "he"]
    mtime = (src.path / "model.safetensors").stat().st_mtime_ns
    assert convert_gguf(gguf_path) == src.path  # cached: not converted again
    assert (src.path / "model.safetensors").stat().st_mtime_ns == mtime


def test_loaded_model_ties_embeddings_and_keeps_fp32_rope(model_dir):
    from sglang_lite.model.loader import ModelSource, load_model

    model = load_model(ModelSource("tiny", None, dummy_preset="tiny"), torch.bfloat16, torch.device("cpu"))
    assert model.lm_head.weight is model.embed_tokens.weight
    assert model.embed_tokens.weight.dtype == torch.bfloat16
    assert model.rope.cos_cache.dtype == torch.float32  # never rounded through bf16
    expected = torch.cos(torch.tensor(100.0) * rope_inv_freq(16, 10000.0, None)[1])
    assert torch.isclose(model.rope.cos_cache[100, 1], expected, atol=1e-6)


def test_loading_runs_on_one_torch_thread_and_gives_the_callers_back():
    from sglang_lite.model import loader

    seen = []
    real = loader._load_weights

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(loader, "_load_weights", spy)
            model = loader.load_model(loader.ModelSource("tiny", None, dummy_preset="tiny"), torch.float32,
                                      torch.device("cpu"))
        assert seen == [1] and torch.get_num_threads() == 2
        assert model.rope.cos_cache.numel() > 0  # built on the real device, after the meta build
    finally:
        torch.set_num_threads(before)
