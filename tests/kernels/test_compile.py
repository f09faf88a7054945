"""Every kernel compiles for sm_90 on a machine without a GPU (see compile_sm90.py and
compile_jit_sm90.py)."""

import os
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(__file__)


def _run(script: str) -> subprocess.CompletedProcess:
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    proc = subprocess.run([sys.executable, os.path.join(HERE, script)], capture_output=True, text=True,
                          env=env, timeout=600)
    if proc.returncode != 0 and "ptxas" in proc.stderr and "No such file" in proc.stderr:
        pytest.skip("triton's bundled ptxas is not available here")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def test_kernels_compile_for_sm90():
    assert _run("compile_sm90.py").stdout.count("ok ") == 10


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU compiles the launchers for real in its tests")
def test_launchers_compile_for_sm90_through_the_jit():
    # The launchers' own calls, specialized by triton's binder as on a GPU (see the script).
    assert _run("compile_jit_sm90.py").stdout.count("ok ") == 12
