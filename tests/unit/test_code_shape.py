"""The shape of the code itself: importing it changes nothing, its modules import in one direction."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_packages_changes_no_environment_variable():
    code = (
        "import json, os; before = dict(os.environ); "
        "import kernels, kernels.sampling, kernels.decode_attention, sglang_lite, "
        "sglang_lite.engine, sglang_lite.server.app, constraints, frontend_dsl; "
        "after = dict(os.environ); "
        "print(json.dumps({k: v for k, v in after.items() if before.get(k) != v}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {}
