"""A Hugging Face ``config.json`` -> the fields of our ``ModelConfig``.

The raw dict first goes through transformers' own config class for its ``model_type``, which
fills the defaults a checkpoint leaves out and standardizes the legacy spellings
(``rope_scaling`` / ``rope_theta`` -> ``rope_parameters``, computed ``layer_types``); what
comes out is read family by family. Anything we cannot run exactly is a ValueError naming the
config field, never a silently different model.
"""

from __future__ import annotations

from typing import Any

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "gemma3", "phi3")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic", "longrope")
_ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_pytorch_tanh", "gelu_tanh": "gelu_pytorch_tanh"}
_REQUIRED_ROPE_KEYS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor",),
    "dynamic": ("factor",),
    "longrope": ("short_factor", "long_factor", "original_max_position_embeddings"),
}


def parse_hf_config(raw: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of ``ModelConfig`` for the checkpoint described by ``raw``."""
    model_type = raw.get("model_type", "llama")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"model_type: unsupported {model_type!r} (supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    if raw.get("quantization_config"):
        method = raw["quantization_config"].get("quant_method", "?")
        raise ValueError(f"quantization_config: pre-quantized checkpoints ({method}) are not supported; "
                         "load the unquantized weights (and use --quantization)")
    hf = _standardized(raw, model_type)
    if model_type == "gemma3":  # multimodal checkpoint: its language model only
        hf = {**hf["text_config"], "model_type": "gemma3_text"}
        for key in ("bos_token_id", "eos_token_id"):
            hf.setdefault(key, raw.get(key))
        model_type = "gemma3_text"
    _refuse_unsupported(hf)
    num_heads = hf["num_attention_heads"]
    num_kv_heads = hf.get("num_key_value_heads") or num_heads
    if num_heads % num_kv_heads:
        raise ValueError(f"num_key_value_heads: {num_kv_heads} does not divide num_attention_heads {num_heads}")
    head_dim = hf.get("head_dim") or hf["hidden_size"] // num_heads
    eos = hf.get("eos_token_id")
    out: dict[str, Any] = dict(
        vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"], intermediate_size=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"], num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
        rms_norm_eps=float(hf.get("rms_norm_eps") or 1e-6),
        max_position_embeddings=hf.get("max_position_embeddings") or 4096,
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_ids=tuple(eos) if isinstance(eos, list) else ((eos,) if eos is not None else ()),
        architecture=model_type,
        hidden_act=_activation(hf),
        layer_windows=_layer_windows(hf),
    )
    out.update(_rope_fields(hf, head_dim, out["max_position_embeddings"]))
    out.update(_family_fields(hf, model_type, head_dim))
    return out


def _standardized(raw: dict[str, Any], model_type: str) -> dict[str, Any]:
    from transformers import AutoConfig

    kwargs = {k: v for k, v in raw.items() if k != "model_type"}
    try:
        return AutoConfig.for_model(model_type, **kwargs).to_dict()
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"config: transformers rejects this {model_type} config: {e}") from e


def _refuse_unsupported(hf: dict[str, Any]) -> None:
    if hf.get("use_bidirectional_attention"):
        raise ValueError("use_bidirectional_attention: bidirectional (encoder) attention is not supported")
    if hf.get("attention_chunk_size"):
        raise ValueError("attention_chunk_size: chunked attention is not supported")


def _activation(hf: dict[str, Any]) -> str:
    field = "hidden_activation" if hf.get("hidden_activation") else "hidden_act"
    act = hf.get(field) or "silu"
    if act not in _ACTIVATIONS:
        raise ValueError(f"{field}: unsupported activation {act!r} (supported: {', '.join(_ACTIVATIONS)})")
    return _ACTIVATIONS[act]


def _layer_windows(hf: dict[str, Any]) -> tuple[int | None, ...]:
    """The sliding window of each layer; () when every layer attends to everything."""
    n, window = hf["num_hidden_layers"], hf.get("sliding_window")
    types = hf.get("layer_types")
    if not window:
        return ()
    if types is None:  # Mistral, Phi-3: one window on every layer
        return (int(window),) * n
    if len(types) != n:
        raise ValueError(f"layer_types: {len(types)} entries for {n} layers")
    for t in types:
        if t not in ("full_attention", "sliding_attention"):
            raise ValueError(f"layer_types: unsupported layer type {t!r} (supported: full_attention, "
                             "sliding_attention)")
    windows = tuple(int(window) if t == "sliding_attention" else None for t in types)
    return windows if any(w is not None for w in windows) else ()


def _rope_fields(hf: dict[str, Any], head_dim: int, max_positions: int) -> dict[str, Any]:
    rope = hf.get("rope_parameters") or {}
    out: dict[str, Any] = {}
    if "full_attention" in rope or "sliding_attention" in rope:  # Gemma 3: one RoPE per layer type
        full = rope.get("full_attention") or {}
        local = rope.get("sliding_attention")
        if local is not None:
            out["local_rope_theta"], out["local_rope_scaling"], _ = _one_rope(local, hf, max_positions)
        rope = full
    theta, scaling, max_positions = _one_rope(rope, hf, max_positions)
    out.update(rope_theta=theta, rope_scaling=scaling, max_position_embeddings=max_positions)
    partial = rope.get("partial_rotary_factor", hf.get("partial_rotary_factor")) or 1.0
    if partial != 1.0:
        rotary_dim = int(head_dim * float(partial))
        if rotary_dim % 2 or not 0 < rotary_dim <= head_dim:
            raise ValueError(f"partial_rotary_factor: {partial} gives an odd or empty rotary dim of {head_dim}")
        out["rotary_dim"] = rotary_dim
    return out


def _one_rope(rope: dict[str, Any], hf: dict[str, Any], max_positions: int
              ) -> tuple[float, dict[str, Any] | None, int]:
    """(theta, scaling parameters or None, positions served) of one RoPE."""
    params = {k: v for k, v in rope.items() if k not in ("rope_theta", "partial_rotary_factor", "type")}
    theta = float(rope.get("rope_theta") or hf.get("rope_theta") or 10000.0)
    kind = params.pop("rope_type", rope.get("type", "default")) or "default"
    if kind not in SUPPORTED_ROPE_TYPES:
        raise ValueError(f"rope_scaling.rope_type: unsupported {kind!r} (supported: {', '.join(SUPPORTED_ROPE_TYPES)})")
    if kind == "default":
        return theta, None, max_positions
    if kind in ("yarn", "longrope", "dynamic"):
        params.setdefault("original_max_position_embeddings",
                          hf.get("original_max_position_embeddings") or max_positions)
    for key in _REQUIRED_ROPE_KEYS[kind]:
        if params.get(key) is None:
            raise ValueError(f"rope_scaling.{key}: required for rope_type {kind!r}")
    if kind == "longrope" and params.get("factor") is None:
        params["factor"] = max_positions / params["original_max_position_embeddings"]
    if kind == "dynamic":  # NTK-aware growth past the trained length: serve factor times as far
        max_positions = int(max_positions * float(params["factor"]))
    return theta, {"rope_type": kind, **params}, max_positions


def _family_fields(hf: dict[str, Any], model_type: str, head_dim: int) -> dict[str, Any]:
    if model_type in ("llama", "mistral"):
        bias = bool(hf.get("attention_bias", False))
        return dict(qkv_bias=bias, o_bias=bias, mlp_bias=bool(hf.get("mlp_bias", False)))
    if model_type == "qwen2":
        return dict(qkv_bias=True)
    if model_type == "qwen3":
        bias = bool(hf.get("attention_bias", False))
        return dict(qk_norm=True, qkv_bias=bias, o_bias=bias)
    if model_type == "phi3":
        return {}
    # Gemma 2 / 3
    scalar = hf.get("query_pre_attn_scalar") or head_dim
    bias = bool(hf.get("attention_bias", False))
    return dict(
        attn_scale=float(scalar) ** -0.5,
        attn_logit_softcap=hf.get("attn_logit_softcapping"),
        final_logit_softcap=hf.get("final_logit_softcapping"),
        embed_scale=float(hf["hidden_size"]) ** 0.5,
        norm_weight_offset=1.0,
        sandwich_norms=True,
        qk_norm=model_type == "gemma3_text",
        qkv_bias=bias,
        o_bias=bias,
    )
