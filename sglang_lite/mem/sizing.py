"""How many KV pages an engine's pool gets: from the configuration, the model's shape and
the device (shared by the engine and each tensor-parallel rank)."""

from __future__ import annotations

import torch

from sglang_lite.config import EngineConfig, parse_size
from sglang_lite.mem.kv_pool import KVPool


def kv_pool_pages(cfg: EngineConfig, mc, num_kv_heads: int, device: torch.device) -> int:
    """Pages (the reserved one included) of a KV pool holding ``num_kv_heads`` heads a layer:
    ``max_total_tokens``, else the GPU's free memory share, else ``kv_cache_memory`` (per rank
    under tensor parallelism)."""
    per_token = KVPool.bytes_per_token(mc.num_layers, num_kv_heads, mc.head_dim, cfg.torch_dtype, cfg.kv_format)
    if cfg.max_total_tokens is not None:
        tokens = cfg.max_total_tokens
    elif device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        tokens = int(free - total * (1 - cfg.mem_fraction_static)) // per_token
    else:
        tokens = parse_size(cfg.kv_cache_memory) // per_token
    num_pages = tokens // cfg.page_size + 1  # + the reserved padding page
    if num_pages < 2:
        raise ValueError(f"kv_cache_memory: too small for one page of {cfg.page_size} tokens")
    return num_pages
