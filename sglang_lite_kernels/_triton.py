"""Import triton when it is installed; otherwise stand-ins so kernel modules still import.

CPU-only installs have no triton. The ``*_ref`` functions beside each kernel are plain torch,
so the engine's CPU path keeps working; calling a Triton launcher there raises RuntimeError.

On a machine without CUDA, Triton kernels can only run in Triton's interpreter, and triton
decides that once, when ``triton.language`` is first imported: call
``sglang_lite_kernels.select_interpreter()`` before the first kernel import to get it (tests do); importing
this module never changes the environment.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

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


def runs_fused(flag: bool | None, x: torch.Tensor) -> bool:
    """Whether a module with a Triton kernel uses it on ``x``: ``flag`` when set (tests run the
    kernels on CPU through the interpreter), else exactly when x is on CUDA and triton exists."""
    return flag if flag is not None else x.is_cuda and HAS_TRITON
