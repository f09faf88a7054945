"""Each supported family against transformers, on a small random-weight model saved with
``save_pretrained`` and loaded by our loader: the prompt's logprobs (prefilled in chunks) and
a few decode steps through the engine, against transformers' prefill plus token-by-token
decode with its KV cache. Prompts are longer than the sliding windows and, for dynamic NTK and
longrope, decoding crosses the trained length, so every switch is on the path compared."""

from __future__ import annotations

import json

import pytest
import torch

from sglang_lite import Engine
from sglang_lite.model.config import ModelConfig

PROMPT_LEN, DECODE_STEPS, WINDOW = 60, 10, 16
COMMON = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=512)


def _llama(**rope):
    import transformers

    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**COMMON, rope_parameters=rope))


def _family(kind: str):
    import transformers as t

    c = dict(COMMON)
    if kind == "llama3-rope":
        return _llama(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                      high_freq_factor=4.0, original_max_position_embeddings=32)
    if kind == "llama-linear":
        return _llama(rope_type="linear", rope_theta=10000.0, factor=4.0)
    if kind == "llama-yarn":
        return _llama(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=32)
    if kind == "llama-dynamic":  # trained length 64: decoding runs past it
        c["max_position_embeddings"] = 64
        return t.LlamaForCausalLM(t.LlamaConfig(**c, rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0,
                                                                      "factor": 8.0}))
    if kind == "llama-bias":
        return t.LlamaForCausalLM(t.LlamaConfig(**c, attention_bias=True, mlp_bias=True))
    if kind == "mistral-sliding":
        return t.MistralForCausalLM(t.MistralConfig(**c, sliding_window=WINDOW))
    if kind == "qwen2.5":
        return t.Qwen2ForCausalLM(t.Qwen2Config(**c, tie_word_embeddings=True))
    if kind == "qwen3-untied":
        return t.Qwen3ForCausalLM(t.Qwen3Config(**c, head_dim=16, tie_word_embeddings=False))
    if kind == "qwen3-tied-yarn":
        return t.Qwen3ForCausalLM(t.Qwen3Config(**c, head_dim=16, tie_word_embeddings=True, rope_parameters={
            "rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "original_max_position_embeddings": 128}))
    if kind == "gemma2":
        return t.Gemma2ForCausalLM(t.Gemma2Config(**c, head_dim=16, sliding_window=WINDOW, query_pre_attn_scalar=24,
                                                  attn_logit_softcapping=0.5, final_logit_softcapping=0.3))
    if kind == "gemma3":
        c["num_hidden_layers"] = 3
        return t.Gemma3ForCausalLM(t.Gemma3TextConfig(
            **c, head_dim=16, sliding_window=WINDOW, query_pre_attn_scalar=16,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"], rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}}))
    if kind == "gemma3-multimodal":  # Gemma 3 4B and up: the language model inside an image-text model
        text = dict(c, head_dim=16, sliding_window=WINDOW, query_pre_attn_scalar=16,
                    layer_types=["sliding_attention", "full_attention"])
        vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                      image_size=28, patch_size=14)
        return t.Gemma3ForConditionalGeneration(t.Gemma3Config(text_config=text, vision_config=vision,
                                                               mm_tokens_per_image=4))
    if kind == "phi3":
        return t.Phi3ForCausalLM(t.Phi3Config(**c, sliding_window=WINDOW, pad_token_id=0))
    if kind == "phi4-mini":  # partial rotary, longrope crossing its trained length, tied head
        c["max_position_embeddings"] = 256
        rot = int(16 * 0.75) // 2
        return t.Phi3ForCausalLM(t.Phi3Config(**c, tie_word_embeddings=True, pad_token_id=0,
                                              original_max_position_embeddings=64, rope_parameters={
            "rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
            "short_factor": [1.0 + 0.1 * i for i in range(rot)], "long_factor": [2.0 + 0.5 * i for i in range(rot)],
            "original_max_position_embeddings": 64}))
    raise AssertionError(kind)


FAMILIES = ["llama3-rope", "llama-linear", "llama-yarn", "llama-dynamic", "llama-bias", "mistral-sliding",
            "qwen2.5", "qwen3-untied", "qwen3-tied-yarn", "gemma2", "gemma3", "gemma3-multimodal", "phi3",
            "phi4-mini"]


def _perturbed(model):
    """Non-trivial norms and biases, so a missed weight or a wrong (1 + w) shows; larger q and
    k, so attention is far from uniform and positions (RoPE, windows, soft-caps) matter."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
            if any(f"{proj}.weight" in name for proj in ("q_proj", "k_proj", "qkv_proj")):
                p.mul_(8.0)
    return model


def _hf_logprobs(hf, prompt: list[int], decoded: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers: log-softmax over the prompt in one forward, then one cached step per
    decoded token. -> (prompt rows [P, V], the decode steps' rows [len(decoded), V])."""
    with torch.no_grad():
        out = hf(torch.tensor([prompt]), use_cache=True)
        rows, past = [out.logits[0, -1]], out.past_key_values
        prompt_rows = out.logits[0]
        for i, tok in enumerate(decoded[:-1]):
            pos = torch.tensor([[len(prompt) + i]])
            out = hf(torch.tensor([[tok]]), cache=past, position_ids=pos, use_cache=True)
            rows.append(out.logits[0, -1])
            past = out.past_key_values
    return torch.log_softmax(prompt_rows.float(), -1), torch.log_softmax(torch.stack(rows).float(), -1)


@pytest.mark.parametrize("kind", FAMILIES)
def test_family_matches_transformers(tmp_path, kind):
    torch.manual_seed(0)
    hf = _perturbed(_family(kind).float().eval())
    hf.config._attn_implementation = "eager"
    hf.save_pretrained(tmp_path)
    prompt = torch.randint(3, 500, (PROMPT_LEN,), generator=torch.Generator().manual_seed(1)).tolist()
    eng = Engine(str(tmp_path), max_prefill_tokens=64, chunked_prefill_size=24, kv_cache_memory="8MiB",
                 disable_radix_cache=True)
    try:
        saved_type = json.loads((tmp_path / "config.json").read_text())["model_type"]
        assert eng.model_config.architecture == {"gemma3": "gemma3_text"}.get(saved_type, saved_type)
        out = eng.generate(input_ids=prompt, return_logprob=True, logprob_start_len=0, sampling_params={
            "max_new_tokens": DECODE_STEPS, "temperature": 0, "ignore_eos": True})
    finally:
        eng.shutdown()
    meta = out["meta_info"]
    decoded = out["output_ids"]
    assert len(decoded) == DECODE_STEPS
    ref_prompt, ref_decode = _hf_logprobs(hf, prompt, decoded)
    ours = torch.tensor([lp for lp, _, _ in meta["input_token_logprobs"][1:]])
    expected = ref_prompt[torch.arange(PROMPT_LEN - 1), torch.tensor(prompt[1:])]
    assert torch.allclose(ours, expected, atol=2e-4), f"prefill: max diff {(ours - expected).abs().max():.2e}"
    ours_dec = torch.tensor([lp for lp, _, _ in meta["output_token_logprobs"]])
    expected_dec = ref_decode[torch.arange(DECODE_STEPS), torch.tensor(decoded)]
    assert torch.allclose(ours_dec, expected_dec, atol=2e-4), f"decode: max diff {(ours_dec - expected_dec).abs().max():.2e}"
    # Greedy: each decoded token is transformers' argmax too, up to genuine near-ties.
    best = ref_decode.max(-1).values
    assert torch.all(best - expected_dec < 1e-3), "decoded a token transformers ranks clearly lower"


def test_sliding_window_really_narrows_attention(tmp_path):
    """The window is not a no-op: the same weights without it give other logprobs."""
    torch.manual_seed(0)
    hf = _perturbed(_family("mistral-sliding").float().eval())
    hf.save_pretrained(tmp_path / "sliding")
    hf.config.sliding_window = None
    hf.save_pretrained(tmp_path / "full")
    prompt = torch.randint(3, 500, (PROMPT_LEN,), generator=torch.Generator().manual_seed(1)).tolist()
    lps = []
    for name in ("sliding", "full"):
        eng = Engine(str(tmp_path / name), kv_cache_memory="8MiB")
        try:
            out = eng.generate(input_ids=prompt, return_logprob=True, logprob_start_len=0,
                               sampling_params={"max_new_tokens": 0})
            lps.append(torch.tensor([lp for lp, _, _ in out["meta_info"]["input_token_logprobs"][1:]]))
        finally:
            eng.shutdown()
    assert torch.allclose(lps[0][:WINDOW - 1], lps[1][:WINDOW - 1], atol=1e-5)  # within the window: same
    assert (lps[0][WINDOW:] - lps[1][WINDOW:]).abs().max() > 1e-3


BASE = {"vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 2}


@pytest.mark.parametrize("patch, field", [
    ({"model_type": "gpt2"}, "model_type"),
    ({"rope_scaling": {"rope_type": "mrope", "factor": 2.0}}, "rope_scaling.rope_type"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "low_freq_factor"),
    ({"hidden_act": "relu"}, "hidden_act"),
    ({"quantization_config": {"quant_method": "awq"}}, "quantization_config"),
    ({"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4, "max_window_layers": 0,
      "layer_types": ["chunked_attention", "full_attention"]}, "layer_types"),
    ({"model_type": "gemma3_text", "use_bidirectional_attention": True}, "use_bidirectional_attention"),
])
def test_config_we_cannot_run_names_the_field(patch, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        ModelConfig.from_hf({**BASE, **patch})


def test_config_windows_per_family():
    qwen = ModelConfig.from_hf({**BASE, "model_type": "qwen2", "use_sliding_window": False, "sliding_window": 4})
    assert qwen.layer_windows == ()  # Qwen2.5 ships sliding_window with use_sliding_window false
    gemma2 = ModelConfig.from_hf({**BASE, "model_type": "gemma2", "sliding_window": 4})
    assert gemma2.layer_windows == (4, None) and gemma2.norm_weight_offset == 1.0
    mistral = ModelConfig.from_hf({**BASE, "model_type": "mistral", "sliding_window": 4})
    assert mistral.layer_windows == (4, 4)
    gemma3 = ModelConfig.from_hf({**BASE, "model_type": "gemma3_text", "num_hidden_layers": 6, "sliding_window": 4,
                                  "rope_theta": 1e6, "rope_local_base_freq": 1e4})  # a pre-v5 config.json
    assert gemma3.layer_windows == (4,) * 5 + (None,)
    assert (gemma3.rope_theta, gemma3.local_rope_theta) == (1e6, 1e4)


def test_triton_backend_refuses_what_it_cannot_do(tmp_path):
    from sglang_lite.attention import UnsupportedAttention, fit_attention_backend
    from sglang_lite.config import EngineConfig

    gemma2 = ModelConfig.from_hf({**BASE, "model_type": "gemma2", "sliding_window": 4})
    plain = ModelConfig.from_hf(BASE)
    cfg = EngineConfig(attention_backend="triton", device="cuda", num_continuous_decode_steps=1)
    with pytest.raises(UnsupportedAttention, match="sliding_window.*attn_logit_softcapping"):
        fit_attention_backend(cfg, gemma2, requested="triton")
    assert fit_attention_backend(cfg, gemma2, requested="auto").attention_backend == "torch"
    assert fit_attention_backend(cfg, plain, requested="auto").attention_backend == "triton"
