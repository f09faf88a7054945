"""Kernel tests: Triton's interpreter on CPU when there is no CUDA device.

triton reads TRITON_INTERPRET once, when ``triton.language`` is first imported; the root
conftest calls ``kernels.select_interpreter()`` before anything imports triton.
"""

import pytest

import kernels

INTERPRET = kernels.select_interpreter()


@pytest.fixture
def device() -> str:
    """Small-shape tests run compiled on CUDA when there is one, interpreted on CPU otherwise."""
    return "cpu" if INTERPRET else "cuda"
