"""Paged KV memory: the per-layer K/V buffers and the page allocator.

Slots are token-granular indices into the buffers; pages are ``page_size`` consecutive
slots. Page 0 is reserved: padded rows of a batch (e.g. CUDA-graph padding) write
their k/v into it, so it is never handed out.
"""

from __future__ import annotations

import torch

from sglang_lite.mem.kv_format import SCALE_DTYPE, KVFormat


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
    """K and V buffers for every layer: ``k_buffers[layer]`` is [num_slots, num_kv_heads, head_dim]
    in the storage dtype of ``kv_format`` (default: plain ``dtype``). An 8-bit format adds
    ``k_scales[layer]`` / ``v_scales[layer]`` [num_slots, num_kv_heads]. Values are coded on
    ``store`` and read back in ``dtype`` (the model's) by ``gather_pages`` / ``gather_slots``.
    """

    def __init__(
        self,
        num_pages: int,
        page_size: int,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
        kv_format: KVFormat | None = None,
    ):
        self.page_size = page_size
        self.num_slots = num_pages * page_size
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.format = kv_format or KVFormat(str(dtype).removeprefix("torch."), dtype)
        self.device = torch.device(device)
        shape = (self.num_slots, num_kv_heads, head_dim)
        storage = self.format.storage
        self.k_buffers = [torch.zeros(shape, dtype=storage, device=device) for _ in range(num_layers)]
        self.v_buffers = [torch.zeros(shape, dtype=storage, device=device) for _ in range(num_layers)]
        self.k_scales: list[torch.Tensor] | None = None
        self.v_scales: list[torch.Tensor] | None = None
        if self.format.scaled:
            # Zero scales: slots never written (page 0's padding) read back as zeros.
            self.k_scales = [torch.zeros(shape[:2], dtype=SCALE_DTYPE, device=device) for _ in range(num_layers)]
            self.v_scales = [torch.zeros(shape[:2], dtype=SCALE_DTYPE, device=device) for _ in range(num_layers)]
        self.allocator = PageAllocator(num_pages, page_size)

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                        kv_format: KVFormat | None = None) -> int:
        """Bytes one token's k and v take over all layers (scales included)."""
        fmt = kv_format or KVFormat(str(dtype), dtype)
        return 2 * num_layers * num_kv_heads * fmt.bytes_per_head(head_dim)

    @property
    def num_bytes(self) -> int:
        return self.num_slots * self.bytes_per_token(self.num_layers, self.num_kv_heads, self.head_dim,
                                                     self.dtype, self.format)

    @property
    def plain(self) -> bool:
        """Stored in the model's own dtype: the buffers can be read as they are."""
        return self.format.storage == self.dtype

    def store(self, layer_id: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write k/v [T, num_kv_heads, head_dim] of new tokens into ``slots`` [T]."""
        if not self.format.scaled:
            self.k_buffers[layer_id].index_copy_(0, slots, k.to(self.format.storage))
            self.v_buffers[layer_id].index_copy_(0, slots, v.to(self.format.storage))
            return
        for x, buffers, scales in ((k, self.k_buffers, self.k_scales), (v, self.v_buffers, self.v_scales)):
            codes, scale = self.format.quantize(x)
            # index_copy_ has no float8 kernel on CPU: copy the bytes.
            buffers[layer_id].view(torch.uint8).index_copy_(0, slots, codes.view(torch.uint8))
            scales[layer_id].index_copy_(0, slots, scale)

    def gather_pages(self, layer_id: int, pages: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v of whole ``pages`` [N], in the model's dtype: [N, page_size, num_kv_heads, head_dim]."""
        return (self._gather_pages(self.k_buffers, self.k_scales, layer_id, pages),
                self._gather_pages(self.v_buffers, self.v_scales, layer_id, pages))

    def gather_slots(self, layer_id: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v at ``slots`` [L], in the model's dtype: [L, num_kv_heads, head_dim]."""
        return (self._gather_slots(self.k_buffers, self.k_scales, layer_id, slots),
                self._gather_slots(self.v_buffers, self.v_scales, layer_id, slots))

    def _gather_pages(self, buffers, scales, layer_id: int, pages: torch.Tensor) -> torch.Tensor:
        ps, h, d = self.page_size, self.num_kv_heads, self.head_dim
        codes = buffers[layer_id].view(-1, ps, h, d).index_select(0, pages)
        if scales is None:
            return codes.to(self.dtype)
        scale = scales[layer_id].view(-1, ps, h).index_select(0, pages)
        return self.format.dequantize(codes, scale, self.dtype)

    def _gather_slots(self, buffers, scales, layer_id: int, slots: torch.Tensor) -> torch.Tensor:
        codes = buffers[layer_id][slots]
        if scales is None:
            return codes.to(self.dtype)
        return self.format.dequantize(codes, scales[layer_id][slots], self.dtype)
