"""Kernel tests: Triton's interpreter on CPU when there is no CUDA device.

triton reads TRITON_INTERPRET once, when ``triton.language`` is first imported; this conftest
sets it before anything here imports triton (``kernels._triton`` does the same for sessions
where the engine imported the kernels first).
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@pytest.fixture
def device() -> str:
    """Small-shape tests run compiled on CUDA when there is one, interpreted on CPU otherwise."""
    return "cpu" if INTERPRET else "cuda"
