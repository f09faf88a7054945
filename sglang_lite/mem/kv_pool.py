"""Paged KV memory: the per-layer K/V buffers and the page allocator.

Slots are token-granular indices into the buffers; pages are ``page_size`` consecutive
slots. Page 0 is reserved: padded rows of a batch (e.g. CUDA-graph padding) write
their k/v into it, so it is never handed out.
"""

from __future__ import annotations

import torch


class PageAllocator:
    """A free list of KV pages. Mechanism only: callers decide what to free or evict."""

    def __init__(self, num_pages: int, page_size: int):
        if num_pages < 2:
            raise ValueError(f"num_pages: need at least 2 pages (page 0 is reserved), got {num_pages}")
        self.num_pages = num_pages
        self.page_size = page_size
        # Lowest pages first: keeps a small workload in a compact region of the pool.
        self._free: list[int] = list(range(num_pages - 1, 0, -1))

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def num_usable_pages(self) -> int:
        return self.num_pages - 1

    def can_allocate(self, num_pages: int) -> bool:
        return num_pages <= len(self._free)

    def allocate(self, num_pages: int) -> list[int]:
        """Pop ``num_pages`` pages; raises MemoryError if there are not enough."""
        if num_pages > len(self._free):
            raise MemoryError(f"KV pool: asked for {num_pages} pages, {len(self._free)} free")
        if num_pages == 0:
            return []
        pages = self._free[-num_pages:]
        del self._free[-num_pages:]
        pages.reverse()
        return pages

    def free(self, pages: list[int]) -> None:
        self._free.extend(reversed(pages))

    def page_slots(self, page: int) -> range:
        return range(page * self.page_size, (page + 1) * self.page_size)


class KVPool:
    """K and V buffers for every layer: ``k_buffers[layer]`` is [num_slots, num_kv_heads, head_dim]."""

    def __init__(
        self,
        num_pages: int,
        page_size: int,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ):
        self.page_size = page_size
        self.num_slots = num_pages * page_size
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = torch.device(device)
        shape = (self.num_slots, num_kv_heads, head_dim)
        self.k_buffers = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v_buffers = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.allocator = PageAllocator(num_pages, page_size)

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * num_kv_heads * head_dim * torch.tensor([], dtype=dtype).element_size()

    def store(self, layer_id: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write k/v [T, num_kv_heads, head_dim] of new tokens into ``slots`` [T]."""
        self.k_buffers[layer_id].index_copy_(0, slots, k.to(self.dtype))
        self.v_buffers[layer_id].index_copy_(0, slots, v.to(self.dtype))
