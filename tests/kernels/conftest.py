"""Kernel tests: Triton's interpreter on CPU when there is no CUDA device.

triton reads TRITON_INTERPRET once, when ``triton.language`` is first imported; the root
conftest calls ``sglang_lite_kernels.select_interpreter()`` before anything imports triton.
"""

import pytest

import sglang_lite_kernels

INTERPRET = sglang_lite_kernels.select_interpreter()


@pytest.fixture
def device() -> str:
    """Small-shape tests run compiled on CUDA when there is one, interpreted on CPU otherwise."""
    return "cpu" if INTERPRET else "cuda"
