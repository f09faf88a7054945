"""The CPU decode step as direct C calls (sglang_lite/model/native_step.py) against the same
engine running its modules: the embedded model's GGUF blocks with int8 activations, greedy
ids and every logprob bitwise equal (the same kernels on the same values), in fp32 and bf16;
the plan taken only where it applies, and built again when a weight it read is replaced."""

from __future__ import annotations

import dataclasses
import math

import pytest

from sglang_lite import Engine
from sglang_lite.model import native_ops
from sglang_lite.model.native_step import NativeDecodeStep
from sglang_lite.quant import native_int4
from sglang_lite.quant.by_rows import ByRowsWeight
from sglang_lite.quant.modules import QuantLinear

pytestmark = pytest.mark.skipif(native_ops.module() is None or native_int4.module() is None,
                                reason="the C kernels do not build here")

PROMPTS = ["The three primary colors are", "def fibonacci(n):", "Once upon a time, in a small village by the sea,"]
GREEDY = {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}


# fp32 with the blocks alone; bf16 with a dense copy above 8 rows
@pytest.fixture(scope="module", params=[("float32", 0), ("bfloat16", 8)], ids=["fp32", "bf16+dense"])
def gguf_engine(request, model_dir):
    dtype, dense_above = request.param
    eng = Engine(quantization="gguf", int8_activations=True, dtype=dtype, dense_weights_above=dense_above,
                 kv_cache_memory="64MiB")
    yield eng
    eng.shutdown()


@pytest.fixture
def plan_runs(monkeypatch):
    """The rows of each step the plan ran; ``.builds`` counts the plans built."""
    runs = _Runs()
    run, build = NativeDecodeStep.run, NativeDecodeStep.build.__func__

    def counted(self, x, batch, backend):
        runs.append(x.shape[0])
        return run(self, x, batch, backend)

    def counted_build(cls, model):
        runs.builds += 1
        return build(cls, model)

    monkeypatch.setattr(NativeDecodeStep, "run", counted)
    monkeypatch.setattr(NativeDecodeStep, "build", classmethod(counted_build))
    return runs


class _Runs(list):
    builds = 0


def _generate(eng: Engine, plan: bool, prompts=PROMPTS, params=GREEDY) -> list[dict]:
    eng.model._native_plan = None if plan else False  # None: built on the next step
    eng.flush_cache()  # no prompt served from the other run's cache
    return eng.generate(prompts, params, return_logprob=True, top_logprobs_num=2)


def test_the_c_decode_step_gives_the_modules_logprobs_bitwise(gguf_engine, plan_runs):
    with_plan = _generate(gguf_engine, True)
    assert plan_runs and max(plan_runs) == len(PROMPTS)  # every decode step, all rows at once
    assert plan_runs.builds == 1  # built on the first step, then reused
    count = len(plan_runs)
    modules = _generate(gguf_engine, False)
    assert len(plan_runs) == count
    for a, b in zip(with_plan, modules):
        assert a["output_ids"] == b["output_ids"]
        assert a["meta_info"]["output_token_logprobs"] == b["meta_info"]["output_token_logprobs"]
        assert a["meta_info"]["output_top_logprobs"] == b["meta_info"]["output_top_logprobs"]


def test_many_rows_take_the_plan_with_the_dense_copies_or_the_int4_kernel(gguf_engine, plan_runs):
    """Above a dense copy's threshold the modules multiply the copies (F.linear): the plan does
    too (bf16 + dense); without copies (fp32, blocks alone) the int4 kernel takes every row,
    past one pass of its own (32 rows). Bitwise equal to the modules either way."""
    _generate(gguf_engine, True, PROMPTS[:1], {"max_new_tokens": 2, "temperature": 0})
    plan = gguf_engine.model._native_plan
    dense = isinstance(gguf_engine.model.layers[0].mlp.down_proj.weight_q, ByRowsWeight)
    assert plan.max_rows == (8 if dense else math.inf) and plan.dense == dense
    prompts = [f"Item {i}: the color of the sky is" for i in range(35)]
    params = {"max_new_tokens": 5, "temperature": 0, "ignore_eos": True}
    plan_runs.clear()
    with_plan = _generate(gguf_engine, True, prompts, params)
    assert max(plan_runs) == len(prompts)  # every row at once, past the dense copy's threshold
    modules = _generate(gguf_engine, False, prompts, params)
    for a, b in zip(with_plan, modules):
        assert a["output_ids"] == b["output_ids"]
        assert a["meta_info"]["output_token_logprobs"] == b["meta_info"]["output_token_logprobs"]
        assert a["meta_info"]["output_top_logprobs"] == b["meta_info"]["output_top_logprobs"]


def test_the_plan_is_built_again_when_a_weight_is_replaced(gguf_engine, plan_runs):
    _generate(gguf_engine, True, PROMPTS[:1])
    model = gguf_engine.model
    plan = model._native_plan
    assert isinstance(plan, NativeDecodeStep) and plan.current()
    down = model.layers[3].mlp.down_proj
    kept = down.weight_q
    # a weight set on a QuantLinear outside the plan (another model's): still current, checked once
    other = QuantLinear(kept)
    other.weight_q = kept
    assert plan.current() and plan._version == QuantLinear.weights_version
    try:
        down.weight_q = kept  # set again, the same object: still current
        assert plan.current()
        down.weight_q = dataclasses.replace(kept)  # the same values in a new object
        assert not plan.current()
        _generate(gguf_engine, False, PROMPTS[:1])  # (modules) then a step rebuilds it:
        model._native_plan = plan
        gguf_engine.generate(PROMPTS[0], {"max_new_tokens": 3, "temperature": 0})
        rebuilt = model._native_plan
        assert rebuilt is not plan and rebuilt.current()
        packed = kept.packed if isinstance(kept, ByRowsWeight) else kept
        down.weight_q = dataclasses.replace(packed, int8_activations=False)  # torch's kernel: no plan
        assert NativeDecodeStep.build(model) is None
    finally:
        down.weight_q = kept


def test_models_it_does_not_run_get_no_plan(gguf_engine):
    gguf_engine.model.use_fused_ops(False)  # the torch chains, asked for
    try:
        assert NativeDecodeStep.build(gguf_engine.model) is None
    finally:
        gguf_engine.model.use_fused_ops(None)
    assert NativeDecodeStep.build(gguf_engine.model) is not None
    dense = Engine("dummy:tiny", max_total_tokens=256, max_running_requests=2)
    try:
        assert NativeDecodeStep.build(dense.model) is None  # dense weights: the modules
    finally:
        dense.shutdown()


def test_an_8_bit_kv_pool_runs_the_modules(model_dir, plan_runs):
    """The C attention reads pools in the model's dtype; int8 codes with scales take the torch path."""
    eng = Engine(quantization="gguf", int8_activations=True, kv_cache_dtype="int8", kv_cache_memory="64MiB")
    try:
        out = eng.generate(PROMPTS[0], {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True})
        assert len(out["output_ids"]) == 6
        assert isinstance(eng.model._native_plan, NativeDecodeStep)  # built, never taken
        assert plan_runs == []
    finally:
        eng.shutdown()
