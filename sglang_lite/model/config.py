"""The model's architecture, read from a Hugging Face config or a named preset."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Architecture of a decoder of the Llama family: Llama 2/3, SmolLM2, Mistral, Qwen2/2.5,
    Qwen3, Gemma 2/3 (text), Phi-3 / Phi-4-mini. Each family is a set of switches below."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2, Llama with attention_bias
    o_bias: bool = False  # Llama with attention_bias
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3, Gemma 3
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = field(default_factory=tuple)
    architecture: str = "llama"
    # Per layer: the sliding window (tokens a query sees, itself included), None = full
    # attention. Empty: every layer full.
    layer_windows: tuple[int | None, ...] = ()
    rotary_dim: int | None = None  # partial rotary (Phi-4-mini): the first rotary_dim dims of a head
    # Sliding layers with their own RoPE (Gemma 3's local base frequency); None: the global one.
    local_rope_theta: float | None = None
    local_rope_scaling: dict[str, Any] | None = None
    hidden_act: str = "silu"  # or gelu_pytorch_tanh (Gemma)
    attn_scale: float | None = None  # None: head_dim ** -0.5 (Gemma: query_pre_attn_scalar ** -0.5)
    attn_logit_softcap: float | None = None  # Gemma 2: scores = cap * tanh(scores / cap)
    final_logit_softcap: float | None = None  # Gemma 2
    embed_scale: float | None = None  # Gemma: embeddings times sqrt(hidden_size)
    norm_weight_offset: float = 0.0  # Gemma's norms scale by (1 + w): added to w at load
    sandwich_norms: bool = False  # Gemma 2/3: norms after attention and MLP as well as before

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> ModelConfig:
        """Read a Hugging Face ``config.json``; a field we cannot run is a ValueError naming it."""
        from sglang_lite.model.hf_config import parse_hf_config

        return cls(**parse_hf_config(hf))

    @property
    def sm_scale(self) -> float:
        return self.attn_scale if self.attn_scale is not None else self.head_dim**-0.5

    def window(self, layer_id: int) -> int | None:
        return self.layer_windows[layer_id] if self.layer_windows else None

    @property
    def has_sliding_window(self) -> bool:
        return any(w is not None for w in self.layer_windows)

    def num_params(self) -> int:
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        q = self.num_heads * self.head_dim
        kv = self.num_kv_heads * self.head_dim
        per_layer = h * (q + 2 * kv) + q * h + 3 * h * i + 2 * h
        head = 0 if self.tie_word_embeddings else v * h
        return v * h + self.num_layers * per_layer + h + head


# Shapes of public checkpoints, for `dummy` random-weight models (benchmarks: weights do
# not change the work).
PRESETS: dict[str, ModelConfig] = {
    # A few-layer model with SmolLM2's vocabulary: the real code paths in milliseconds (tests).
    "tiny": ModelConfig(
        vocab_size=49152, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
        num_kv_heads=2, head_dim=16, rope_theta=10000.0, max_position_embeddings=2048,
        tie_word_embeddings=True, bos_token_id=1, eos_token_ids=(2,),
    ),
    "smollm2-135m": ModelConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
        num_kv_heads=3, head_dim=64, rms_norm_eps=1e-5, rope_theta=100000.0,
        max_position_embeddings=8192, tie_word_embeddings=True, bos_token_id=1, eos_token_ids=(2,),
    ),
    "llama-3.2-1b": ModelConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_layers=16, num_heads=32,
        num_kv_heads=8, head_dim=64, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        max_position_embeddings=131072, tie_word_embeddings=True, bos_token_id=128000,
        eos_token_ids=(128001, 128008, 128009),
    ),
    "llama-3.1-8b": ModelConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=32, num_heads=32,
        num_kv_heads=8, head_dim=128, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        max_position_embeddings=131072, tie_word_embeddings=False, bos_token_id=128000,
        eos_token_ids=(128001, 128008, 128009),
    ),
}
