"""``enable_torch_compile``: decode steps through torch.compile give the eager path's greedy
tokens, compile before serving (no request waits on a compile), and fall back to eager with a
log line where inductor cannot build."""

from __future__ import annotations

import logging
import os
import shutil

import pytest

from sglang_lite import Engine

needs_cxx = pytest.mark.skipif(shutil.which(os.environ.get("CXX") or "g++") is None,
                               reason="inductor needs a C++ compiler")
PROMPTS = ["The capital of France is", "List three colors:", "def fibonacci(n):"]
GREEDY = {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True}


def _count_compiled_steps(eng: Engine) -> list[int]:
    compiled = eng.scheduler.runner.compiled
    calls = [0]
    real = compiled._compiled

    def counting(*args):
        calls[0] += 1
        return real(*args)

    compiled._compiled = counting
    return calls


@needs_cxx
def test_compiled_decode_gives_the_eager_greedy_tokens(engine):
    """The embedded model, one compiled graph (a row at a time); a batch of two runs eagerly."""
    eng = Engine(enable_torch_compile=True, torch_compile_max_bs=1)
    try:
        compiled = eng.scheduler.runner.compiled
        assert compiled is not None and compiled.failed is None
        calls = _count_compiled_steps(eng)
        alone = [eng.generate(p, GREEDY)["output_ids"] for p in PROMPTS]
        assert calls[0] >= 3 * (GREEDY["max_new_tokens"] - 1)  # every decode step compiled
        pair = [o["output_ids"] for o in eng.generate(PROMPTS[:2], GREEDY)]
        assert compiled.failed is None
    finally:
        eng.shutdown()
    eager = [engine.generate(p, GREEDY)["output_ids"] for p in PROMPTS]
    assert alone == eager
    assert pair == eager[:2]


@needs_cxx
def test_the_c_int4_kernel_runs_inside_the_compiled_graph(monkeypatch):
    """The embedded model with its GGUF blocks packed (a bf16 CPU's default), int8 activations:
    the C kernel is a custom op of the graph (no graph break), every linear of every compiled
    step calls it, and the output follows the eager path's. Not token for token: inductor's
    fused norms round differently, and a last-bit change can move an activation's int8 code,
    so a near tie may go the other way; the logprobs of the tokens both chose agree instead,
    within what int8 activations themselves move them (eager, against torch's kernel: up to
    0.17 measured on these prompts)."""
    import torch

    from sglang_lite.quant import native_int4

    if native_int4.module() is None:
        pytest.skip("the C int4 kernel does not build here")
    torch._dynamo.utils.counters.clear()
    greedy = {**GREEDY, "max_new_tokens": 12}
    eager_engine = Engine(quantization="gguf", kv_cache_memory="64MiB")
    try:
        eager = [eager_engine.generate(p, greedy, return_logprob=True) for p in PROMPTS]
    finally:
        eager_engine.shutdown()
    eng = Engine(quantization="gguf", kv_cache_memory="64MiB", enable_torch_compile=True, torch_compile_max_bs=1)
    try:
        compiled = eng.scheduler.runner.compiled
        assert compiled is not None and compiled.failed is None
        calls = _count_compiled_steps(eng)
        kernel_calls = [0]
        real_call = native_int4._call

        def counting_kernel(*args):
            kernel_calls[0] += 1
            return real_call(*args)

        monkeypatch.setattr(native_int4, "_call", counting_kernel)  # what the op's body calls
        got = [eng.generate(p, greedy, return_logprob=True) for p in PROMPTS]
        assert calls[0] >= 3 * (greedy["max_new_tokens"] - 1)  # every decode step compiled
        from sglang_lite.quant.int8 import Int8BlockWeight

        head = 1 if isinstance(eng.model.lm_head.weight_q, Int8BlockWeight) else 2  # byte codes, or two halves
        assert kernel_calls[0] >= calls[0] * (4 * len(eng.model.layers) + head)  # the linears and the head
        assert compiled.failed is None and not torch._dynamo.utils.counters["graph_break"]
    finally:
        eng.shutdown()
    for g, e in zip(got, eager):
        assert g["output_ids"][:4] == e["output_ids"][:4]
        same = 0
        while same < len(g["output_ids"]) and g["output_ids"][same] == e["output_ids"][same]:
            same += 1
        lps = [(a[0], b[0]) for a, b in zip(g["meta_info"]["output_token_logprobs"][:same],
                                            e["meta_info"]["output_token_logprobs"][:same])]
        assert max(abs(a - b) for a, b in lps) < 0.3  # int8 activations against none: up to 0.17 seen


@needs_cxx
def test_the_batch_graph_serves_every_batch_size_and_kv_length_without_compiling_again(model_dir):
    """Batch sizes 2-4 share one graph with symbolic sizes, compiled at start-up; sequences
    crossing many KV pages and batches of every size then compile nothing more."""
    from torch._dynamo.utils import counters

    opts = {"tokenizer": str(model_dir), "max_total_tokens": 4096, "max_running_requests": 4}
    eng = Engine("dummy:tiny", enable_torch_compile=True, torch_compile_max_bs=4, **opts)
    prompts = [f"{i} apples and {i * 3} pears" for i in range(4)]
    long = {**GREEDY, "max_new_tokens": 70}  # past four 16-token pages
    try:
        graphs = counters["stats"]["unique_graphs"]
        calls = _count_compiled_steps(eng)
        outs = [[o["output_ids"] for o in eng.generate(prompts[:n], long)] for n in (1, 2, 3, 4)]
        assert counters["stats"]["unique_graphs"] == graphs
        assert calls[0] >= 4 * (long["max_new_tokens"] - 1) and eng.scheduler.runner.compiled.failed is None
    finally:
        eng.shutdown()
    plain = Engine("dummy:tiny", **opts)
    try:
        assert outs == [[o["output_ids"] for o in plain.generate(prompts[:n], long)] for n in (1, 2, 3, 4)]
    finally:
        plain.shutdown()


def test_without_a_cxx_compiler_it_runs_eagerly_with_a_log_line(model_dir, monkeypatch, caplog):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with caplog.at_level(logging.WARNING, logger="sglang_lite.compiled_decode"):
        eng = Engine("dummy:tiny", tokenizer=str(model_dir), enable_torch_compile=True, torch_compile_max_bs=1)
    try:
        compiled = eng.scheduler.runner.compiled
        assert "no C++ compiler" in compiled.failed
        assert any("running eagerly" in r.getMessage() for r in caplog.records)
        calls = _count_compiled_steps(eng)
        out = eng.generate("Hello", {"max_new_tokens": 4, "ignore_eos": True, "temperature": 0})
        assert len(out["output_ids"]) == 4 and calls[0] == 0
    finally:
        eng.shutdown()


@pytest.mark.parametrize("options, field", [
    ({"torch_compile_max_bs": 0}, "torch_compile_max_bs"),
    ({"tp": 2}, "enable_torch_compile"),
    ({"deterministic": True}, "enable_torch_compile: needs attention_backend 'torch'"),
])
def test_bad_compile_options_name_the_field(options, field):
    with pytest.raises(ValueError, match=field):
        Engine("dummy:tiny", enable_torch_compile=True, **options)
