"""Quality guard for quantized weights, on the embedded SmolLM2-135M in fp32.

The reference ("none") is the embedded GGUF dequantized to fp32. "gguf" keeps the file's own
Q4_1 / Q8_0 blocks packed, so it holds the same weight values: its logits must match the
reference's up to summation order; so must "gguf+dense" (the blocks for steps of up to 8 rows,
their dequantized copy for bigger ones: the fastest setting measured for this model, what
Engine() picks for it on a CPU with native bf16; in fp32, these tests' dtype, it picks "none",
as torch's packed kernels are slow there). int8 / int4 / fp8 quantize those
fp32 weights again at load, so they lose some quality, bounded here by the perplexity of a fixed
paragraph (int8 within 1%, int4 within 5%: the seed document's figures) and by how often their
next-token argmax agrees with the reference's along it.

Measured here (perplexity of PARAGRAPH, argmax agreement over its 171 positions): none 31.93;
gguf 31.93, 100%; int8 31.72, 97.7%; int4 31.71, 97.1%; fp8 33.06, 91.8%. With
``int8_activations`` (the C kernel for every row, the prefill's too, its activations quantized
to int8 per group, as llama.cpp does; no dense copy): gguf 31.86, 96.5%; int4 31.96, 97.1%. The decoder's weights
are already Q4_1 (int4 on the same groups), so int4 loses little there; an int4 LM head (the
file's is Q8_0) gave 34.73 and 81.9%, which is why int4 keeps the head in int8.
"""

from __future__ import annotations

import math

import pytest
import torch

from sglang_lite import Engine, config
from sglang_lite.config import (
    DEFAULT_DENSE_ABOVE_C_KERNEL,
    DEFAULT_DENSE_ABOVE_C_KERNEL_NO_AMX,
    DEFAULT_DENSE_WEIGHTS_ABOVE,
    EngineConfig,
)
from sglang_lite.model.loader import embedded_gguf_path
from sglang_lite.quant import native_int4
from sglang_lite.quant.apply import resident_weight_bytes
from sglang_lite.quant.by_rows import ByRowsWeight
from sglang_lite.quant.int4 import Int4Weight
from sglang_lite.quant.modules import QuantLinear

PARAGRAPH = (
    "The old lighthouse stood at the end of a narrow spit of land, where the river met the sea. "
    "For more than a century its keepers had climbed the spiral stairs each evening to light the "
    "lamp, and each morning they had wiped the salt from the great glass lens. Ships coming home "
    "from long voyages watched for its beam long before they could see the coast, and the "
    "fishermen of the village said that they could tell the season by the color of the light on "
    "the water. When the last keeper retired, the town council voted to keep the lamp burning with "
    "an electric bulb and a timer. Children still walk out along the stones on summer afternoons "
    "to look at the rusted door and the names carved into the railing, and on clear nights the "
    "beam still turns slowly over the dark waves, as steady as it was when the first keeper lit it."
)
PROMPTS = ["The three primary colors are", "def fibonacci(n):", "Once upon a time"]
# 8 tokens: 7 decode steps through the packed kernels, each compared (a wrong kernel breaks the first)
GREEDY = {"max_new_tokens": 8, "temperature": 0}

# (max perplexity ratio to the reference, min argmax agreement with it)
BOUNDS = {"int8": (1.01, 0.95), "int4": (1.05, 0.93), "fp8": (1.05, 0.88),
          "gguf:int8": (1.01, 0.95), "int4:int8": (1.05, 0.93)}


@pytest.fixture(scope="module")
def engines(engine):
    made = {"none": engine}  # what Engine() picks for the embedded model in fp32

    def get(quantization: str) -> Engine:
        if quantization not in made:
            name, _, activations = quantization.partition(":")
            q, _, dense = name.partition("+")
            # ":int8": every row through the C kernel (no dense copy), the prefill too, so the
            # paragraph's every position is scored through it; else torch's kernel
            made[quantization] = Engine(quantization=q, kv_cache_memory="64MiB",
                                        dense_weights_above=DEFAULT_DENSE_WEIGHTS_ABOVE if dense else 0,
                                        int8_activations=activations == "int8")
        return made[quantization]

    yield get
    for eng in made.values():
        if eng is not engine:
            eng.shutdown()


def _score(eng: Engine) -> tuple[float, list[int], list[float]]:
    """(perplexity of PARAGRAPH, argmax token at each position, each token's logprob)."""
    out = eng.generate(PARAGRAPH, {"max_new_tokens": 1, "temperature": 0}, return_logprob=True,
                       logprob_start_len=0, top_logprobs_num=1)
    meta = out["meta_info"]
    logprobs = [row[0] for row in meta["input_token_logprobs"][1:]]  # the first token has none
    argmax = [row[0][1] for row in meta["input_top_logprobs"][1:]]
    return math.exp(-sum(logprobs) / len(logprobs)), argmax, logprobs


@pytest.mark.parametrize("variant", ["gguf", "gguf+dense"])
def test_gguf_blocks_give_the_dequantized_models_logits(engines, variant):
    ref, gguf = engines("none"), engines(variant)
    assert gguf.config.quantization == "gguf"
    if variant == "gguf":  # packed only
        assert resident_weight_bytes(gguf.model) <= 1.3 * embedded_gguf_path().stat().st_size
    else:  # with a dense copy: prefill and batches of more than 8 rows run the dense GEMM
        assert gguf.config.dense_weights_above == DEFAULT_DENSE_WEIGHTS_ABOVE
        assert resident_weight_bytes(gguf.model) > resident_weight_bytes(ref.model)
        # the copy is made from the blocks: exactly the dequantized checkpoint's weights
        copies = {n: m.weight_q for n, m in gguf.model.named_modules() if isinstance(m, QuantLinear)}
        assert len(copies) == 4 * len(gguf.model.layers) + 1
        for name, weight in copies.items():
            assert isinstance(weight, ByRowsWeight) and torch.equal(weight.dense, ref.model.get_submodule(name).weight)
    ref_ppl, ref_argmax, ref_lps = _score(ref)
    ppl, argmax, lps = _score(gguf)  # prefill: many rows, so dequantize (or the dense copy) + GEMM
    assert max(abs(a - b) for a, b in zip(lps, ref_lps)) < 1e-3
    assert argmax == ref_argmax
    # decode: a few rows a step, through torch's int4 kernel and the int4 halves of the Q8_0 head;
    # gguf+dense also decodes a batch of more rows than dense_weights_above, through its copy
    prompts = PROMPTS if variant == "gguf" else PROMPTS + [f"{i} + {i} =" for i in range(DEFAULT_DENSE_WEIGHTS_ABOVE)]
    ref_out = ref.generate(prompts, GREEDY, return_logprob=True)
    outs = gguf.generate(prompts, GREEDY, return_logprob=True)
    for got, want in zip(outs, ref_out):
        assert got["output_ids"] == want["output_ids"]
        diffs = [abs(a[0] - b[0]) for a, b in zip(got["meta_info"]["output_token_logprobs"],
                                                  want["meta_info"]["output_token_logprobs"])]
        assert max(diffs) < 1e-3


@pytest.mark.parametrize("quantization", ["int8", "int4", "fp8", "gguf:int8", "int4:int8"])
def test_quantized_perplexity_and_agreement_stay_within_bounds(engines, quantization):
    ref_ppl, ref_argmax, _ = _score(engines("none"))
    if quantization.endswith(":int8") and native_int4.module() is None:
        pytest.skip("the C int4 kernel does not build here")
    eng = engines(quantization)
    if quantization.endswith(":int8"):  # the weights the C kernel multiplies
        flagged = [m.weight_q for m in eng.model.modules()
                   if isinstance(m, QuantLinear) and isinstance(m.weight_q, Int4Weight)]
        assert flagged and all(w.int8_activations for w in flagged)
    ppl, argmax, _ = _score(eng)
    agreement = sum(a == b for a, b in zip(argmax, ref_argmax)) / len(ref_argmax)
    max_ratio, min_agreement = BOUNDS[quantization]
    print(f"{quantization}: perplexity {ppl:.2f} vs {ref_ppl:.2f} ({ppl / ref_ppl:.3f}x), "
          f"argmax agreement {agreement:.3f}, {resident_weight_bytes(eng.model) / 1e6:.1f} MB")
    assert ppl <= max_ratio * ref_ppl
    assert agreement >= min_agreement
    assert resident_weight_bytes(eng.model) < 0.6 * resident_weight_bytes(engines("none").model)


def test_quantization_option_is_validated():
    with pytest.raises(ValueError, match="quantization"):
        Engine("dummy:tiny", quantization="int3")
    with pytest.raises(ValueError, match="quantization: 'gguf'"):
        Engine("dummy:tiny", quantization="gguf")
    with pytest.raises(ValueError, match="dense_weights_above: needs packed weights"):
        Engine("dummy:tiny", quantization="none", dense_weights_above=8)
    with pytest.raises(ValueError, match="dense_weights_above: must be an integer"):
        EngineConfig.create(dense_weights_above=-1)


def test_auto_packs_fp32_weights_where_the_c_kernel_builds(monkeypatch):
    """A CPU without native bf16 (auto dtype: fp32) packs the GGUF blocks when the C int4
    kernel builds (packs_in_fp32; the test session pins it off), with no dense copy (the fp32
    GEMM is slower than the kernel at every row count; bf16's from 16 rows on);
    a dtype asked for as float32, int8_activations off, or deterministic keep dense."""
    monkeypatch.setattr("sglang_lite.config.packs_in_fp32", lambda: True)
    cpu = EngineConfig.create(device="cpu")
    assert (cpu.dtype, cpu.quantization, cpu.dense_weights_above) == ("float32", "gguf", DEFAULT_DENSE_ABOVE_C_KERNEL_NO_AMX)
    assert DEFAULT_DENSE_ABOVE_C_KERNEL_NO_AMX == 0 < DEFAULT_DENSE_ABOVE_C_KERNEL
    for dense in ({"dtype": "float32"}, {"int8_activations": False}, {"deterministic": True}):
        assert EngineConfig.create(device="cpu", **dense).quantization == "none", dense
    monkeypatch.setattr("sglang_lite.config.packs_in_fp32", lambda: False)  # no compiler: torch's kernel is slow in fp32
    assert EngineConfig.create(device="cpu").quantization == "none"


def test_auto_quantization_and_the_dense_copy_default(engine, monkeypatch):
    cpu = EngineConfig.create(device="cpu", dtype="bfloat16")  # the embedded GGUF model
    assert (cpu.quantization, cpu.dense_weights_above) == ("gguf", DEFAULT_DENSE_WEIGHTS_ABOVE)
    with monkeypatch.context() as m:  # where our C int4 kernel builds, it takes steps of up to 16 rows
        m.setattr(config, "packs_in_fp32", lambda: True)  # with AMX, every step without
        m.setattr(config, "cpu_amx", lambda: True)
        assert EngineConfig.create(device="cpu", dtype="bfloat16").dense_weights_above == DEFAULT_DENSE_ABOVE_C_KERNEL
        m.setattr(config, "cpu_amx", lambda: False)
        m.setattr(config, "int4_kernel_vectorized", lambda: True)
        assert EngineConfig.create(device="cpu", dtype="bfloat16").dense_weights_above == \
            DEFAULT_DENSE_ABOVE_C_KERNEL_NO_AMX == 0
        m.setattr(config, "int4_kernel_vectorized", lambda: False)  # its plain-C build: the copy stays
        assert EngineConfig.create(device="cpu", dtype="bfloat16").dense_weights_above == DEFAULT_DENSE_ABOVE_C_KERNEL
        m.setattr(config, "cpu_amx", lambda: True)
        assert EngineConfig.create(device="cpu", dtype="bfloat16", int8_activations=False).dense_weights_above == \
            DEFAULT_DENSE_WEIGHTS_ABOVE  # torch's kernel: 8
    gguf = EngineConfig.create(device="cpu", dtype="bfloat16", model=str(embedded_gguf_path()))  # a llama GGUF file
    assert (gguf.quantization, gguf.dense_weights_above) == ("gguf", DEFAULT_DENSE_WEIGHTS_ABOVE)
    # fp32 (a CPU without native bf16, and these tests): torch's packed kernels are slower than
    # the fp32 GEMM there, so the weights stay dense
    for fp32 in (EngineConfig.create(device="cpu", dtype="float32"), EngineConfig.create(device="cpu"), engine.config):
        assert (fp32.dtype, fp32.quantization, fp32.dense_weights_above) == ("float32", "none", 0)
    for exact in ({"deterministic": True}, {"tp": 2}):  # the packed kernels are not batch-invariant, nor sharded
        assert EngineConfig.create(device="cpu", dtype="bfloat16", **exact).quantization == "none"
    packed_only = EngineConfig.create(device="cpu", quantization="gguf")
    assert packed_only.dense_weights_above == 0
    dense = EngineConfig.create(device="cpu", quantization="gguf", dense_weights_above=8)
    assert (dense.quantization, dense.dense_weights_above) == ("gguf", 8)
    asked = EngineConfig.create(device="cpu", quantization="int4")  # asked for: packed only, memory first
    assert (asked.quantization, asked.dense_weights_above) == ("int4", 0)
    gpu = EngineConfig.create(device="cuda")  # the packed path dequantizes on a GPU
    assert (gpu.quantization, gpu.dense_weights_above) == ("none", 0)
    assert EngineConfig.create(device="cpu", model="dummy:tiny").quantization == "none"
