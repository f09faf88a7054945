import dataclasses

from sglang_lite.attention.base import (
    AttentionBackend,
    ForwardBatch,
    ForwardMode,
    UnsupportedAttention,
    model_attention_features,
)

__all__ = ["AttentionBackend", "ForwardBatch", "ForwardMode", "UnsupportedAttention", "create_backend",
           "fit_attention_backend"]

_PLAIN_CAUSAL_ONLY = ("triton",)  # backends whose kernels have no sliding window or soft-cap


def fit_attention_backend(cfg, model_config, requested: str):
    """``cfg`` with a backend that runs ``model_config``: an "auto" choice of triton falls back
    to torch for a model with sliding windows or soft-capped scores; an explicit request for a
    backend that cannot run it is an ``UnsupportedAttention`` naming the config fields."""
    missing = model_attention_features(model_config)
    if not missing or cfg.attention_backend not in _PLAIN_CAUSAL_ONLY:
        return cfg
    if requested == "auto":
        return dataclasses.replace(cfg, attention_backend="torch")
    raise UnsupportedAttention(
        f"attention_backend: {cfg.attention_backend!r} does not implement {', '.join(missing)} "
        f"(this {model_config.architecture} model's config asks for it); use attention_backend='torch'")


def create_backend(name: str, kv_pool) -> AttentionBackend:
    """Build the attention backend called ``name`` over ``kv_pool``."""
    if name == "torch":
        from sglang_lite.attention.torch_backend import TorchAttentionBackend

        return TorchAttentionBackend(kv_pool)
    if name == "triton":
        from sglang_lite.attention.triton_backend import TritonAttentionBackend

        return TritonAttentionBackend(kv_pool)
    if name == "invariant":
        from sglang_lite.attention.invariant_backend import BatchInvariantAttentionBackend

        return BatchInvariantAttentionBackend(kv_pool)
    raise ValueError(f"attention_backend: unknown backend {name!r} (expected 'torch', 'triton' or 'invariant')")
