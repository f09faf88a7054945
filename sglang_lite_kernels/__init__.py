"""Triton kernels, each beside a plain-torch reference.

Never imports ``sglang_lite``. Importing a module here does not need triton: without it the
``*_ref`` functions still work and the Triton launchers raise a clear error. Importing this
package imports nothing else and changes nothing (``select_interpreter`` is an explicit call).
"""

from __future__ import annotations

import os
import sys


def select_interpreter() -> bool:
    """Run Triton kernels in Triton's interpreter (on CPU tensors, slowly: tests and debugging)
    when there is no CUDA device, unless the user chose (``TRITON_INTERPRET`` set).

    triton reads the variable once, when ``triton.language`` is first imported, so call this
    before anything imports triton (tests do it in their root conftest). Returns whether the
    interpreter is selected."""
    if "TRITON_INTERPRET" not in os.environ and "triton" not in sys.modules:
        import torch

        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"
    return os.environ.get("TRITON_INTERPRET") == "1"
