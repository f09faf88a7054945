"""Weight-only quantized matmuls for CUDA: ``x @ w.T`` with the packed weight read tile by tile
and scaled in registers, so a decode step reads the packed bytes (0.5 byte a weight for int4,
1 for int8 and fp8) instead of a bf16 copy (2 bytes), and no dense weight is ever written.

Formats (the packed tensors of ``sglang_lite.quant``):

- ``int4_rows_mm``: int4 by rows (``q`` uint8 [N, K / 2], k = 2i in byte i's low nibble;
  ``scale`` and ``zero`` [N, K / group]: ``w = q scale + zero``), the layout an int4 weight
  takes on CUDA (``int4_rows_layout`` converts torch's CPU layout to it).
- ``int4_mm``: torch's CPU int4 layout read as it is (``packed`` uint8 [N_pad, K / 2]; rows in
  blocks of 64, byte ``(b, k, j)`` of ``packed.view(N_pad / 64, K, 32)`` holds row ``64 b + j``
  in its low nibble and row ``64 b + 32 + j`` in its high one; ``scale_zero``
  [K / group, N_pad, 2]: ``w = (q - 8) s + z``). Slower on an H200 than bf16 (a tile has only
  32 output columns): kept as bench.quant_gpu's baseline for the layout by rows.
- ``int8_mm``: ``q`` int8 [N, K], ``scale`` [N]: ``w = q scale`` (the scale applies to the sum).
- ``fp8_mm``: ``q`` float8 e4m3 [N, K], ``scale`` fp32 [N, K / group]: ``w = q scale``.

Each program computes a [BLOCK_M, block of N] tile of the output over one slice of K. At decode
sizes (a few rows) the output has too few tiles to keep every multiprocessor reading, so K is
split: each split writes fp32 partial sums that one ``sum`` adds (deterministic, unlike atomics).
The ``*_dequantize_ref`` functions give the weights the kernels are tested against.
"""

from __future__ import annotations

import torch

from sglang_lite_kernels._triton import HAS_TRITON, tl, triton

CPU_BLOCK = 64  # rows per block of torch's CPU int4 layout
_const = tl.constexpr if HAS_TRITON else int
INT8, FP8, INT4 = _const(0), _const(1), _const(2)  # the formats of the kernels by rows
_TARGET_PROGRAMS = 264  # about two programs per multiprocessor of an H100 / H200 (132)


# ---- references -----------------------------------------------------------------------------
def cpu_layout_codes(packed: torch.Tensor) -> torch.Tensor:
    """The codes [N_pad, K] (uint8, 0..15) of an int4 weight in torch's CPU layout."""
    n, k = packed.shape[0], packed.shape[1] * 2
    blocks = packed.view(n // CPU_BLOCK, k, CPU_BLOCK // 2)
    return torch.cat([blocks & 15, blocks >> 4], dim=-1).permute(0, 2, 1).reshape(n, k)


def int4_dequantize_ref(packed: torch.Tensor, scale_zero: torch.Tensor, group: int) -> torch.Tensor:
    """The int4 weight in torch's CPU layout [N_pad, K] in fp32."""
    q = cpu_layout_codes(packed).float()
    s, z = scale_zero.float().unbind(-1)  # [K / group, N_pad] each
    s, z = (t.t().repeat_interleave(group, dim=1) for t in (s, z))
    return (q - 8) * s + z


def int4_rows_dequantize_ref(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    """The int4 weight by rows (``int4_rows_layout``) [N, K] in fp32."""
    codes = torch.stack([q & 15, q >> 4], dim=-1).view(q.shape[0], -1).float()
    group = codes.shape[1] // scale.shape[1]
    return codes * scale.float().repeat_interleave(group, 1) + zero.float().repeat_interleave(group, 1)


# ---- kernels --------------------------------------------------------------------------------
@triton.jit
def _dot(acc, a, b, IEEE: tl.constexpr):
    if IEEE:  # fp32 activations: exact products, not tf32
        return tl.dot(a, b, acc, input_precision="ieee")
    return tl.dot(a, b, acc)


@triton.jit
def _store(out_ptr, acc, rows, cols, split, M, N, stride_om):
    """The tile, rounded to the output's dtype, or one split's fp32 partial sums."""
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    ptrs = out_ptr + split * M * N + rows[:, None] * stride_om + cols[None, :]
    tl.store(ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _int4_kernel(x_ptr, w_ptr, sz_ptr, out_ptr, M, N, K, k_per_split, stride_xm, stride_om,
                 GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
                 IEEE: tl.constexpr):
    """One group at a time: ``x . ((q - 8) s + z) = (x . q) s + (sum x) (z - 8 s)`` over a
    group, so the codes go to the dot as they are (exact in any float type) and the group's
    scale and zero point are two vectors, not a weight-sized tensor."""
    pid_m, block, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    j = tl.arange(0, 32)
    g = tl.arange(0, GROUP)
    col_lo = block * 64 + j  # the low nibbles' rows of w; the high nibbles' are 32 further
    w_block = w_ptr + block.to(tl.int64) * K * 32
    acc_lo = tl.zeros((BLOCK_M, 32), dtype=tl.float32)
    acc_hi = tl.zeros((BLOCK_M, 32), dtype=tl.float32)
    k_start = split * k_per_split
    for k0 in range(k_start, k_start + k_per_split, BLOCK_K):
        for sub in tl.static_range(BLOCK_K // GROUP):
            ks = k0 + sub * GROUP + g
            k_ok = ks < K  # K is whole groups: a group is in or out as a whole
            x = tl.load(x_ptr + rows[:, None] * stride_xm + ks[None, :],
                        mask=(rows[:, None] < M) & k_ok[None, :], other=0.0)
            byte = tl.load(w_block + ks[:, None] * 32 + j[None, :], mask=k_ok[:, None], other=0)
            x_sum = tl.sum(x.to(tl.float32), axis=1)[:, None]
            grp_ok = (k0 + sub * GROUP + 0 * j) < K  # the group's scales: a vector mask
            sz = sz_ptr + ((k0 + sub * GROUP) // GROUP * N + col_lo) * 2
            s_lo = tl.load(sz, mask=grp_ok, other=0.0).to(tl.float32)[None, :]
            z_lo = tl.load(sz + 1, mask=grp_ok, other=0.0).to(tl.float32)[None, :]
            s_hi = tl.load(sz + 64, mask=grp_ok, other=0.0).to(tl.float32)[None, :]
            z_hi = tl.load(sz + 65, mask=grp_ok, other=0.0).to(tl.float32)[None, :]
            zero = tl.zeros((BLOCK_M, 32), dtype=tl.float32)
            acc_lo += _dot(zero, x, (byte & 15).to(x.dtype), IEEE) * s_lo + x_sum * (z_lo - 8.0 * s_lo)
            acc_hi += _dot(zero, x, (byte >> 4).to(x.dtype), IEEE) * s_hi + x_sum * (z_hi - 8.0 * s_hi)
    _store(out_ptr, acc_lo, rows, col_lo, split, M, N, stride_om)
    _store(out_ptr, acc_hi, rows, col_lo + 32, split, M, N, stride_om)


@triton.jit
def _rowwise_kernel(x_ptr, q_ptr, s_ptr, z_ptr, out_ptr, M, N, K, k_per_split, stride_xm, stride_qn,
                    stride_sn, stride_om, GROUP: tl.constexpr, FMT: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    IEEE: tl.constexpr):
    """Weights stored by rows ([N, K], K contiguous) in one of three formats (FMT):
    INT8 one scale a row of w, applied to the finished sums; FP8 a scale per ``GROUP`` weights
    of a row, applied to each group's dot (``x . (q s) = (x . q) s``; e4m3 values are exact in
    bf16 and fp16, so the codes go to the dot as they are); INT4 two codes a byte (k even
    in the low nibble) with a scale and a zero point per group, ``w = q s + z``, so
    ``x . w = (x_even . q_lo + x_odd . q_hi) s + (sum x) z`` over a group."""
    pid_m, pid_n, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = cols < N
    STEP: tl.constexpr = BLOCK_K if FMT == INT8 else GROUP
    kk = tl.arange(0, STEP)
    half = tl.arange(0, STEP // 2)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    zero = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_rows = x_ptr + rows[:, None] * stride_xm
    q_cols = q_ptr + cols[None, :].to(tl.int64) * stride_qn
    k_start = split * k_per_split
    for k0 in range(k_start, k_start + k_per_split, BLOCK_K):
        for sub in tl.static_range(BLOCK_K // STEP):
            kg = k0 + sub * STEP  # the step's first k
            if FMT == INT4:
                ke = kg + 2 * half
                k_ok = ke < K
                xmask = (rows[:, None] < M) & k_ok[None, :]
                x_even = tl.load(x_rows + ke[None, :], mask=xmask, other=0.0)
                x_odd = tl.load(x_rows + ke[None, :] + 1, mask=xmask, other=0.0)
                byte = tl.load(q_cols + (kg // 2 + half)[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0)
                part = _dot(zero, x_even, (byte & 15).to(x_even.dtype), IEEE)
                part = _dot(part, x_odd, (byte >> 4).to(x_even.dtype), IEEE)
                x_sum = tl.sum(x_even.to(tl.float32) + x_odd.to(tl.float32), axis=1)[:, None]
                gmask = n_ok & ((kg + 0 * cols) < K)
                sc = tl.load(s_ptr + cols * stride_sn + kg // GROUP, mask=gmask, other=0.0).to(tl.float32)
                zp = tl.load(z_ptr + cols * stride_sn + kg // GROUP, mask=gmask, other=0.0).to(tl.float32)
                acc += part * sc[None, :] + x_sum * zp[None, :]
            else:
                ks = kg + kk
                k_ok = ks < K
                x = tl.load(x_rows + ks[None, :], mask=(rows[:, None] < M) & k_ok[None, :], other=0.0)
                w = tl.load(q_cols + ks[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
                if FMT == INT8:
                    acc = _dot(acc, x, w.to(x.dtype), IEEE)
                else:
                    gmask = n_ok & ((kg + 0 * cols) < K)
                    sc = tl.load(s_ptr + cols * stride_sn + kg // GROUP, mask=gmask, other=0.0)
                    acc += _dot(zero, x, w.to(x.dtype), IEEE) * sc.to(tl.float32)[None, :]
    if FMT == INT8:
        acc *= tl.load(s_ptr + cols, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    _store(out_ptr, acc, rows, cols, split, M, N, stride_om)


@triton.jit
def _rowwise_gemv_kernel(x_ptr, q_ptr, s_ptr, z_ptr, out_ptr, M, N, K, k_per_split, stride_xm,
                         stride_qn, stride_sn, stride_om, GROUP: tl.constexpr, FMT: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """``_rowwise_kernel`` for one row of x a program, without a dot: products summed per
    group in registers."""
    row, pid_n, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = cols < N
    G: tl.constexpr = 1 if FMT == INT8 else BLOCK_K // GROUP
    W: tl.constexpr = BLOCK_K // 2 if FMT == INT4 else BLOCK_K  # weight bytes a step
    kw = tl.arange(0, W)
    gi = tl.arange(0, G)
    acc = tl.zeros((BLOCK_N, G), dtype=tl.float32)
    x_row = x_ptr + row * stride_xm
    q_cols = q_ptr + cols[:, None].to(tl.int64) * stride_qn
    k_start = split * k_per_split
    for k0 in range(k_start, k_start + k_per_split, BLOCK_K):
        gs = k0 // GROUP + gi
        smask = n_ok[:, None] & (gs[None, :] * GROUP < K)
        if FMT == INT4:
            ke = k0 + 2 * kw
            k_ok = ke < K
            x_even = tl.load(x_row + ke, mask=k_ok, other=0.0).to(tl.float32)
            x_odd = tl.load(x_row + ke + 1, mask=k_ok, other=0.0).to(tl.float32)
            byte = tl.load(q_cols + (k0 // 2 + kw)[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0)
            prod = (byte & 15).to(tl.float32) * x_even[None, :] + (byte >> 4).to(tl.float32) * x_odd[None, :]
            x_sum = tl.sum(tl.reshape(x_even + x_odd, (G, GROUP // 2)), axis=1)
            sc = tl.load(s_ptr + cols[:, None] * stride_sn + gs[None, :], mask=smask, other=0.0).to(tl.float32)
            zp = tl.load(z_ptr + cols[:, None] * stride_sn + gs[None, :], mask=smask, other=0.0).to(tl.float32)
            acc += tl.sum(tl.reshape(prod, (BLOCK_N, G, GROUP // 2)), axis=2) * sc + x_sum[None, :] * zp
        else:
            ks = k0 + kw
            k_ok = ks < K
            x = tl.load(x_row + ks, mask=k_ok, other=0.0).to(tl.float32)
            w = tl.load(q_cols + ks[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
            if FMT == INT8:
                acc += tl.sum(w * x[None, :], axis=1)[:, None]
            else:
                sc = tl.load(s_ptr + cols[:, None] * stride_sn + gs[None, :], mask=smask, other=0.0)
                acc += tl.sum(tl.reshape(w * x[None, :], (BLOCK_N, G, GROUP)), axis=2) * sc
    total = tl.sum(acc, axis=1)
    if FMT == INT8:
        total *= tl.load(s_ptr + cols, mask=n_ok, other=0.0).to(tl.float32)
    out = out_ptr + split * M * N + row * stride_om
    tl.store(out + cols, total.to(out_ptr.dtype.element_ty), mask=n_ok)


# ---- launchers ------------------------------------------------------------------------------
def _check_x(x: torch.Tensor, k: int, name: str) -> None:
    if x.dim() != 2 or x.shape[1] != k or x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"{name}: x must be a float [M, {k}] tensor, got {x.dtype} {tuple(x.shape)}")
    if x.stride(1) != 1:
        raise ValueError(f"{name}: x's last dim must be contiguous, strides {x.stride()}")
    if not HAS_TRITON:
        raise RuntimeError(f"{name}: triton is not installed")


GEMV_MAX_ROWS = 2  # rows up to which the kernels without a dot run (bench.quant_gpu)


def _block_m(m: int) -> int:
    return min(64, max(16, triton.next_power_of_2(m)))


def _split_k(tiles: int, k: int, block_k: int) -> tuple[int, int]:
    """How many slices K is cut into so that about ``_TARGET_PROGRAMS`` programs run, and the
    length of each (a multiple of ``block_k``)."""
    steps = triton.cdiv(k, block_k)
    split = max(1, min(steps, _TARGET_PROGRAMS // max(tiles, 1)))
    per = triton.cdiv(steps, split) * block_k
    return triton.cdiv(k, per), per


def _launch(kernel, x, n, grid_mn, args, strides, num_warps, **meta):
    """Run ``kernel`` over ``grid_mn`` tiles and the split count it picks; sum the splits."""
    m, k = x.shape
    split, per = _split_k(grid_mn[0] * grid_mn[1], k, meta["BLOCK_K"])
    if split == 1:
        out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    else:
        out = torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    if m and n:
        kernel[(*grid_mn, split)](x, *args, out, m, n, k, per, x.stride(0), *strides, n,
                                  num_warps=num_warps, **meta)
    if split == 1:
        return out
    # one reduction that sums in fp32 and writes x's dtype (sum then cast was two launches)
    return torch.sum(out, 0, out=torch.empty((m, n), dtype=x.dtype, device=x.device))


def _use_gemv(gemv: bool | None, m: int) -> bool:
    return m <= GEMV_MAX_ROWS if gemv is None else gemv


def int4_mm(x: torch.Tensor, packed: torch.Tensor, scale_zero: torch.Tensor, group: int,
            block_k: int | None = None, num_warps: int = 4) -> torch.Tensor:
    """``x`` [M, K] @ the int4 weight's transpose -> [M, N_pad] in x's dtype. On CUDA the engine
    reads int4 by rows instead (``int4_rows_mm``)."""
    k = packed.shape[1] * 2
    _check_x(x, k, "int4_mm")
    n = packed.shape[0]
    if packed.dtype != torch.uint8 or n % CPU_BLOCK or scale_zero.shape != (k // group, n, 2):
        raise ValueError(f"int4_mm: packed {packed.dtype} {tuple(packed.shape)} and scale_zero "
                         f"{tuple(scale_zero.shape)} do not form a group-{group} int4 weight")
    if k % group or group & (group - 1) or not packed.is_contiguous() or not scale_zero.is_contiguous():
        raise ValueError(f"int4_mm: contiguous packed weights whose in_features {k} are groups of "
                         f"{group}, a power of two")
    block_k = max(group, block_k or 64)
    block_m = _block_m(x.shape[0])
    grid = (triton.cdiv(x.shape[0], block_m), n // CPU_BLOCK)
    return _launch(_int4_kernel, x, n, grid, (packed, scale_zero), (), num_warps, GROUP=group,
                   BLOCK_M=block_m, BLOCK_K=block_k, IEEE=x.dtype == torch.float32)


def _rowwise(x, q, scale, zero, group, fmt, name, block_k, num_warps, gemv):
    n = q.shape[0]
    k = q.shape[1] * (2 if fmt == INT4 else 1)
    _check_x(x, k, name)
    if q.stride(1) != 1 or scale.stride(-1) != 1 or zero.stride(-1) != 1 or zero.stride(0) != scale.stride(0):
        raise ValueError(f"{name}: the weight's and scales' last dims must be contiguous")
    strides = (q.stride(0), scale.stride(0) if scale.dim() == 2 else 1)
    args = (q, scale, zero)
    if gemv:
        block_k = max(group, block_k or 256)
        return _launch(_rowwise_gemv_kernel, x, n, (x.shape[0], triton.cdiv(n, 32)), args, strides,
                       num_warps, GROUP=group, FMT=fmt, BLOCK_N=32, BLOCK_K=block_k)
    block_k = max(group, block_k or 128)
    block_m, block_n = _block_m(x.shape[0]), 64
    grid = (triton.cdiv(x.shape[0], block_m), triton.cdiv(n, block_n))
    return _launch(_rowwise_kernel, x, n, grid, args, strides, num_warps, GROUP=group, FMT=fmt,
                   BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, IEEE=x.dtype == torch.float32)


def int8_mm(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, block_k: int | None = None,
            num_warps: int = 4, gemv: bool | None = None) -> torch.Tensor:
    """``x`` [M, K] @ (``q`` int8 [N, K] times ``scale`` [N] per row)ᵀ -> [M, N]."""
    if q.dtype != torch.int8 or scale.shape != (q.shape[0],):
        raise ValueError(f"int8_mm: q {q.dtype} {tuple(q.shape)} with scale {tuple(scale.shape)}")
    return _rowwise(x, q, scale, scale, 16, INT8, "int8_mm", block_k, num_warps, bool(gemv))


def fp8_mm(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, block_k: int | None = None,
           num_warps: int = 4, gemv: bool | None = None) -> torch.Tensor:
    """``x`` [M, K] @ (``q`` float8 e4m3 [N, K] times ``scale`` [N, K / group] per group)ᵀ."""
    n, k = q.shape
    if q.dtype != torch.float8_e4m3fn or scale.dim() != 2 or scale.shape[0] != n or k % scale.shape[1]:
        raise ValueError(f"fp8_mm: q {q.dtype} {tuple(q.shape)} with scale {tuple(scale.shape)}")
    group = _group(k, scale.shape[1], "fp8_mm")
    return _rowwise(x, q, scale, scale, group, FP8, "fp8_mm", block_k, num_warps, _use_gemv(gemv, x.shape[0]))


def int4_rows_mm(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor,
                 block_k: int | None = None, num_warps: int = 4, gemv: bool | None = None) -> torch.Tensor:
    """``x`` [M, K] @ wᵀ for the int4 weight by rows (``int4_rows_layout``): ``q`` uint8
    [N, K / 2], ``scale`` and ``zero`` [N, K / group], ``w = q scale + zero`` per group."""
    n, k = q.shape[0], q.shape[1] * 2
    if q.dtype != torch.uint8 or scale.dim() != 2 or scale.shape != (n, scale.shape[1]) or zero.shape != scale.shape:
        raise ValueError(f"int4_rows_mm: q {q.dtype} {tuple(q.shape)} with scale {tuple(scale.shape)} "
                         f"and zero {tuple(zero.shape)}")
    group = _group(k, scale.shape[1], "int4_rows_mm")
    return _rowwise(x, q, scale, zero, group, INT4, "int4_rows_mm", block_k, num_warps,
                    _use_gemv(gemv, x.shape[0]))


def _group(k: int, groups: int, name: str) -> int:
    group = k // groups
    if group * groups != k or group & (group - 1) or group < 32:
        raise ValueError(f"{name}: group size {k}/{groups} must be a power of two of at least 32")
    return group


def int4_rows_layout(packed: torch.Tensor, scale_zero: torch.Tensor, group: int):
    """torch's CPU int4 layout (``int4_mm``) -> the layout by rows that ``int4_rows_mm`` reads:
    (q uint8 [N_pad, K / 2] with k = 2i in byte i's low nibble, scale and zero [N_pad, K / group]
    in scale_zero's dtype, ``w = q scale + zero``)."""
    q = cpu_layout_codes(packed)
    q = (q[:, 0::2] | (q[:, 1::2] << 4)).contiguous()
    s, z = scale_zero.unbind(-1)  # [K / group, N] each: w = (q - 8) s + z
    scale = s.t().contiguous()
    zero = (z.float() - 8 * s.float()).t().to(scale_zero.dtype).contiguous()
    return q, scale, zero
