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
        self.k_scales: list[torch.Tensor] | None = None
        self.v_scales: list[torch.Tensor] | None = None
        if self.format.scaled:
            # k and v of a slot side by side ([num_slots, 2, H, D] codes, [num_slots, 2, H]
            # scales): one write and one gather (convert, scale) per layer serve both, half
            # the small ops of a decode step. Zero scales: slots never written read back as 0.
            self._codes = [torch.zeros((self.num_slots, 2, num_kv_heads, head_dim), dtype=storage, device=device)
                           for _ in range(num_layers)]
            self._scales = [torch.zeros((self.num_slots, 2, num_kv_heads), dtype=SCALE_DTYPE, device=device)
                            for _ in range(num_layers)]
            self.k_buffers = [c[:, 0] for c in self._codes]
            self.v_buffers = [c[:, 1] for c in self._codes]
            self.k_scales = [c[:, 0] for c in self._scales]
            self.v_scales = [c[:, 1] for c in self._scales]
        else:
            self.k_buffers = [torch.zeros(shape, dtype=storage, device=device) for _ in range(num_layers)]
            self.v_buffers = [torch.zeros(shape, dtype=storage, device=device) for _ in range(num_layers)]
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

    def store(self, layer_id: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write k/v [T, num_kv_heads, head_dim] of new tokens into ``slots`` [T]."""
        if not self.format.scaled:
            self.k_buffers[layer_id].index_copy_(0, slots, k.to(self.format.storage))
            self.v_buffers[layer_id].index_copy_(0, slots, v.to(self.format.storage))
            return
        codes, scale = self.format.quantize(torch.stack((k, v), 1))  # [T, 2, H, D], [T, 2, H]
        # index_copy_ has no float8 kernel on CPU: copy the bytes.
        self._codes[layer_id].view(torch.uint8).index_copy_(0, slots, codes.view(torch.uint8))
        self._scales[layer_id].index_copy_(0, slots, scale)

    def gather_pages(self, layer_id: int, pages: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v of whole ``pages`` [N], in the model's dtype: [N, page_size, num_kv_heads, head_dim]."""
        if not self.format.scaled:
            return (self._gather_pages(self.k_buffers, layer_id, pages),
                    self._gather_pages(self.v_buffers, layer_id, pages))
        ps, h, d = self.page_size, self.num_kv_heads, self.head_dim
        codes = self._codes[layer_id].view(-1, ps, 2, h, d).index_select(0, pages)
        scale = self._scales[layer_id].view(-1, ps, 2, h).index_select(0, pages)
        kv = self.format.dequantize(codes, scale, self.dtype)  # [N, page_size, 2, H, D]
        return kv[:, :, 0], kv[:, :, 1]

    def gather_slots(self, layer_id: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v at ``slots`` [L], in the model's dtype: [L, num_kv_heads, head_dim]."""
        if not self.format.scaled:
            return self.k_buffers[layer_id][slots].to(self.dtype), self.v_buffers[layer_id][slots].to(self.dtype)
        kv = self.format.dequantize(self._codes[layer_id][slots], self._scales[layer_id][slots], self.dtype)
        return kv[:, 0], kv[:, 1]

    def _gather_pages(self, buffers, layer_id: int, pages: torch.Tensor) -> torch.Tensor:
        ps, h, d = self.page_size, self.num_kv_heads, self.head_dim
        return buffers[layer_id].view(-1, ps, h, d).index_select(0, pages).to(self.dtype)
