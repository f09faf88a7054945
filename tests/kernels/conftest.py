"""Kernel tests: Triton's interpreter on CPU when there is no CUDA device.

TRITON_INTERPRET is read when a kernel is decorated (at import of its module), so it is set
here, at conftest import, and kernel modules imported earlier in the session are reloaded.
"""

import importlib
import os
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    for _name in [n for n in sys.modules if n.startswith("kernels.")]:
        importlib.reload(sys.modules[_name])

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@pytest.fixture
def device() -> str:
    """Small-shape tests run compiled on CUDA when there is one, interpreted on CPU otherwise."""
    return "cpu" if INTERPRET else "cuda"
