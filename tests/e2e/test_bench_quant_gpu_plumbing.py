"""bench.quant_gpu runs blind on a lent GPU with minutes of budget: its engine phase (each
quantization in turn, the figures and the table) is checked here on the CPU with the tiny
dummy model; the kernel phases need CUDA (triton.testing.do_bench)."""

from __future__ import annotations

from sglang_lite.bench import quant_gpu


def test_engine_phase_measures_every_quantization_and_renders_it():
    rows = quant_gpu.phase_engine("dummy:tiny", 4)
    by = {r["quantization"]: r for r in rows}
    assert list(by) == quant_gpu.QUANTIZATIONS
    assert by["none"]["greedy_agreement"] == 1.0  # the reference agrees with itself
    # packed weights are smaller than the model's own (bf16: the phase asks for it)
    assert by["int4"]["weight_mb"] < by["int8"]["weight_mb"] < by["none"]["weight_mb"]
    assert by["fp8"]["weight_mb"] < by["none"]["weight_mb"]
    for r in rows:
        assert r["batch1_ms_per_token"] > 0 and r["batch32_tok_per_s"] > 0
    table = quant_gpu.render({"engine": rows})
    assert table.count("\n| ") == 1 + len(rows)  # the header and one line a quantization
    assert "| int4 |" in table
