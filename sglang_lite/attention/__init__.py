from sglang_lite.attention.base import AttentionBackend, ForwardBatch, ForwardMode

__all__ = ["AttentionBackend", "ForwardBatch", "ForwardMode", "create_backend"]


def create_backend(name: str, kv_pool) -> AttentionBackend:
    """Build the attention backend called ``name`` over ``kv_pool``."""
    if name == "torch":
        from sglang_lite.attention.torch_backend import TorchAttentionBackend

        return TorchAttentionBackend(kv_pool)
    if name == "triton":
        from sglang_lite.attention.triton_backend import TritonAttentionBackend

        return TritonAttentionBackend(kv_pool)
    raise ValueError(f"attention_backend: unknown backend {name!r} (expected 'torch' or 'triton')")
