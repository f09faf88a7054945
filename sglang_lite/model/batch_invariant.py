"""Batch-invariant matmuls: a token's result does not depend on the rows beside it.

A GEMM kernel picks its blocking, and sometimes its whole algorithm, from the shape: a
row of ``x @ W.T`` computed among 1 row, 7 rows or 300 rows is summed in different orders
and differs in its last bits (on this project's CPUs fp32 linears differ from M=2 on).
Greedy decoding turns such a bit into a different token a few hundred steps later, so
the same request gives different text alone and under load.

``--deterministic`` removes the dependence where it comes from: every linear runs as a
loop of GEMMs of one fixed shape (``TILE_ROWS`` rows, the last tile zero-padded), so each
row goes through the same kernel whatever the batch; the attention backend of that mode
(``attention/invariant_backend.py``) does the same with fixed key blocks. Row-wise
reductions of a fixed length (RMSNorm) are already invariant; transcendental elementwise
ops are not quite: CPU kernels compute a tensor's tail (and each thread's chunk's tail)
with the scalar function and the rest with a vectorized one, which differ in the last
ULP, so where an element falls depends on the tensor's size. In this mode they run in
float64 and round back: the two paths then agree except on a double-rounding tie
(about one value in 10^8). ``check_batch_invariance`` verifies the primitives on the running
device at start, so a kernel library that breaks the assumption is an error, not a
silently different output.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

TILE_ROWS = 8  # rows of every GEMM in deterministic mode: a decode batch of one pays 8 rows


def tiled_rows(fn, x: torch.Tensor, tile: int = TILE_ROWS) -> torch.Tensor:
    """``fn`` (a row-wise map of a [M, K] tensor) applied in tiles of exactly ``tile`` rows."""
    flat = x.reshape(-1, x.shape[-1])
    m = flat.shape[0]
    pad = -m % tile
    if pad:
        flat = F.pad(flat, (0, 0, 0, pad))
    out = torch.cat([fn(flat[i : i + tile]) for i in range(0, flat.shape[0], tile)])
    return out[:m].reshape(*x.shape[:-1], out.shape[-1])


def invariant_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return tiled_rows(lambda t: F.linear(t, weight, bias), x)


_LINEAR = frozenset({F.linear, torch._C._nn.linear})
_TRANSCENDENTAL = frozenset({F.silu, F.gelu, torch.sigmoid, torch.Tensor.sigmoid, torch.exp, torch.Tensor.exp,
                             torch.tanh, torch.Tensor.tanh})


class BatchInvariantMode(TorchFunctionMode):
    """While active, every ``F.linear`` (so every ``nn.Linear``) runs as ``invariant_linear``
    and the transcendental elementwise ops run in float64."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _LINEAR:
            return invariant_linear(*args, **kwargs)
        if func in _TRANSCENDENTAL:
            return in_float64(func, *args, **kwargs)
        return func(*args, **kwargs)


def in_float64(func, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """``func(x)`` computed in float64 and rounded to ``x``'s dtype (see the module note)."""
    if not x.is_floating_point() or x.dtype == torch.float64:
        return func(x, *args, **kwargs)
    return func(x.double(), *args, **kwargs).to(x.dtype)


class BatchInvarianceError(RuntimeError):
    """The device's kernels give a row a different result in a different batch."""


def check_batch_invariance(device: torch.device, dtype: torch.dtype, hidden: int, head_dim: int,
                           group: int, block: int) -> None:
    """Raise ``BatchInvarianceError`` unless, on ``device`` in ``dtype``, a row's result is
    bit-identical alone and among others, at any position: the tiled linear and the two
    batched matmuls (scores, weighted values) of the invariant attention backend."""
    gen = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    w, x = rand(3 * hidden + 5, hidden), rand(3 * TILE_ROWS + 3, hidden)
    full = invariant_linear(x, w)
    for start, n in ((0, 1), (5, 1), (7, TILE_ROWS + 1), (1, 3 * TILE_ROWS)):
        if not torch.equal(invariant_linear(x[start : start + n], w), full[start : start + n]):
            raise BatchInvarianceError(f"deterministic: linear rows {start}..{start + n} differ from the "
                                       f"same rows in a larger batch on {device} ({dtype})")
    for a_shape, b_shape in (((group, head_dim), (head_dim, block)), ((group, block), (block, head_dim))):
        a, b = rand(40, *a_shape).float(), rand(40, *b_shape).float()
        full = torch.bmm(a, b)
        for start, n in ((0, 1), (3, 2), (9, 31)):
            if not torch.equal(torch.bmm(a[start : start + n], b[start : start + n]), full[start : start + n]):
                raise BatchInvarianceError(f"deterministic: batched matmul {tuple(a_shape)} x {tuple(b_shape)} "
                                           f"differs with the batch size on {device}")
