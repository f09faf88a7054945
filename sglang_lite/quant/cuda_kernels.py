"""When a packed weight multiplies through its Triton kernel (``sglang_lite_kernels.quant_mm``)
on CUDA: steps of up to ``CUDA_KERNEL_MAX_ROWS`` rows. The kernels re-read the weight for
every 64 rows, so their time grows with the rows while dequantize + GEMM costs about the same
at any decode size: on an H200 the kernels still won at 256 rows on every shape measured
(``bench.quant_gpu``), so prefill chunks above that take the dense GEMM."""

from __future__ import annotations

import torch

from sglang_lite_kernels._triton import HAS_TRITON

CUDA_KERNEL_MAX_ROWS = 256


def on_cuda_kernel(x: torch.Tensor) -> bool:
    return x.is_cuda and HAS_TRITON and x.shape[0] <= CUDA_KERNEL_MAX_ROWS
