"""The GPU benchmark (issue 5) is run blind on a lent device with a few minutes of budget:
its plumbing (phase subprocesses, this engine and both HF baselines on one workload, the
JSON and the table) is checked here on the CPU with the tiny dummy model (``--dry-run``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_gpu_bench_dry_run_writes_all_figures(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "sglang_lite.bench.gpu", "--dry-run", "--budget", "200"],
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_bench.json").read_text())
    phases = report["phases"]
    ours, hf = phases["engine:tiny"], phases["hf:tiny"]
    assert "error" not in ours and "error" not in hf, (ours.get("error"), hf.get("error"))
    n_tokens = ours["throughput"]["output_tokens"]
    # One workload for all three: the same output token count, every request done.
    assert n_tokens > 0 and hf["static"]["output_tokens"] == n_tokens
    assert hf["continuous"]["output_tokens"] == n_tokens and not hf["continuous"]["partial"]
    for figure in (ours["throughput"]["tok_per_s"], ours["throughput_one_step"]["tok_per_s"],
                   ours["batch1"]["ms_per_token"], hf["batch1"]["ms_per_token"]):
        assert figure > 0
    # Without CUDA the kernel phase fails alone, with its reason recorded.
    assert "CUDA" in phases["kernel"]["error"]
    table = (tmp_path / "gpu_bench.txt").read_text()
    assert "sglang-lite" in table and "target throughput" in table
