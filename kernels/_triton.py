"""Import triton when it is installed; otherwise stand-ins so kernel modules still import.

CPU-only installs have no triton. The ``*_ref`` functions beside each kernel are plain torch,
so the engine's CPU path keeps working; calling a Triton launcher there raises RuntimeError.
"""

from __future__ import annotations

from types import SimpleNamespace

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - exercised only on installs without triton
    HAS_TRITON = False

    class _Unavailable:
        def __init__(self, fn):
            self.fn = fn

        def __getitem__(self, grid):
            raise RuntimeError(f"{self.fn.__name__}: triton is not installed")

    def _cdiv(a: int, b: int) -> int:
        return -(-a // b)

    def _next_power_of_2(n: int) -> int:
        return 1 << max(0, n - 1).bit_length()

    triton = SimpleNamespace(jit=_Unavailable, cdiv=_cdiv, next_power_of_2=_next_power_of_2)
    tl = SimpleNamespace(constexpr=object)

__all__ = ["HAS_TRITON", "triton", "tl"]
