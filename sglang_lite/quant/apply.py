"""Putting packed weights into a built model: quantizing its float weights at load
(``--quantization int8|int4|fp8``) or filling it from a GGUF file's own blocks ("gguf").

The linears replaced are the decoder's ``qkv_proj``, ``o_proj``, ``gate_up_proj``,
``down_proj`` and the LM head; a tied embedding shares the LM head's packed weight. Norms stay
in the model's dtype. With int4 the LM head is int8: an int4 head cost SmolLM2-135M 8.8%
perplexity on the quality test's paragraph (int4 everywhere else adds much less), and at one
row torch's int8 kernel reads it about as fast.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import torch
from torch import nn

from sglang_lite.model.llama import map_hf_name
from sglang_lite.quant import native_int4
from sglang_lite.quant.by_rows import ByRowsWeight
from sglang_lite.quant.fp8 import Fp8Weight
from sglang_lite.quant.gguf_blocks import Codes, concat_rows, read_llama_tensors
from sglang_lite.quant.int4 import Int4Weight
from sglang_lite.quant.int8 import GroupInt8Weight, Int8Weight
from sglang_lite.quant.modules import QuantEmbedding, QuantLinear, packed_to

log = logging.getLogger(__name__)

GROUP = 32  # int4 / fp8 group size (GGUF's block; torch's int4 kernel takes 32..256)
_LINEARS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head")


def quantize_weight(w: torch.Tensor, method: str, dtype: torch.dtype):
    """A float weight [N, K] packed as ``method`` ("int8", "int4", "fp8")."""
    if method == "int8":
        return Int8Weight.quantize(w)
    if method == "int4":
        return Int4Weight.quantize(w, GROUP, dtype)
    if method == "fp8":
        return Fp8Weight.quantize(w, GROUP)
    raise ValueError(f"quantization: unknown method {method!r} (int8, int4, fp8)")


def quantize_model(model: nn.Module, method: str) -> nn.Module:
    """Replace the model's linears (loaded in float) by ``method``-packed ones, in place."""
    dtype, device = model.embed_tokens.weight.dtype, model.embed_tokens.weight.device
    tied = model.config.tie_word_embeddings
    for name, linear in _target_linears(model):
        if linear.in_features % GROUP and method != "int8":
            log.info("quantization: %s kept in %s (in_features %d)", name, dtype, linear.in_features)
            continue
        how = "int8" if name == "lm_head" and method == "int4" else method
        packed = packed_to(quantize_weight(linear.weight.detach().cpu(), how, dtype), device)
        model.set_submodule(name, QuantLinear(packed, _bias(linear)))
        if name == "lm_head" and tied:
            model.embed_tokens = QuantEmbedding(packed, dtype)
    return model


def load_gguf_blocks(model: nn.Module, path: Path, dense_weights_above: int = 0) -> nn.Module:
    """Fill ``model`` (built on the meta device) from GGUF file ``path``, keeping its Q4_0 /
    Q4_1 / Q8_0 blocks packed; plain tensors fill the remaining parameters.
    ``dense_weights_above`` > 0 gives each packed weight a dense copy for steps of more rows
    (``ByRowsWeight``), dequantized from the same codes: ``q d (+ m)`` in fp32, the values of
    the file's dequantized checkpoint exactly (as the gguf package computes them), at the cost
    of one multiply-add a weight instead of reading and converting that checkpoint."""
    cfg = model.config
    dtype = model.norm.weight.dtype
    merged: dict[str, list[tuple[int, Codes]]] = {}
    for hf_name, codes in read_llama_tensors(path, cfg.num_heads, cfg.num_kv_heads):
        target, offset = map_hf_name(hf_name, cfg)
        if target is not None:  # None: a tied model's copy of the LM head
            merged.setdefault(target, []).append((offset or 0, codes))
    if "lm_head.weight" not in merged:  # tied: the LM head is the embedding, packed once
        merged["lm_head.weight"] = merged["embed_tokens.weight"]
    device = model.norm.weight.device
    floats: dict[str, torch.Tensor] = {}
    shared: dict[int, object] = {}
    for target, parts in merged.items():
        codes = concat_rows([c for _, c in sorted(parts, key=lambda p: p[0])])
        module = target.removesuffix(".weight")
        if module.split(".")[-1] in _LINEARS + ("embed_tokens",) and codes.kind != "float":
            key = id(parts[0][1])
            packed = shared.get(key) or _packed_weight(codes, dtype, device, dense_weights_above)
            shared[key] = packed
            is_embed = module == "embed_tokens"
            model.set_submodule(module, QuantEmbedding(packed, dtype) if is_embed else QuantLinear(packed))
        else:
            floats[target] = codes.dequantize()
    _fill_floats(model, floats)
    return model


def keep_dense_copies(model: nn.Module, max_rows: int) -> nn.Module:
    """Give every packed weight a dense copy in the model's dtype (the packed weight
    dequantized), used by steps of more than ``max_rows`` rows (``ByRowsWeight``); a tied
    embedding and LM head still share one."""
    dtype = model.norm.weight.dtype
    made: dict[int, ByRowsWeight] = {}
    for module in model.modules():
        if isinstance(module, (QuantLinear, QuantEmbedding)):
            packed = module.weight_q
            if id(packed) not in made:
                made[id(packed)] = ByRowsWeight.of(packed, dtype, max_rows)
            module.weight_q = made[id(packed)]
    return model


def use_cpu_kernels(model: nn.Module, quantization: str, dtype: torch.dtype, int8_activations: bool) -> None:
    """A CPU model's packed int4 weights through the C kernel where asked (``int8_activations``);
    a warning where torch's packed kernels would run in fp32 (10-100x slower than in bf16)."""
    if quantization == "none":
        return
    if int8_activations:
        use_int8_activations(model)
    c_kernel = int8_activations and native_int4.module() is not None and quantization in ("int4", "gguf")
    if dtype == torch.float32 and quantization in ("int8", "int4", "gguf") and not c_kernel:
        log.warning("quantization %s in float32 on CPU: torch's packed kernels are 10-100x slower in fp32 "
                    "than in bf16 (config.py); --dtype bfloat16 or --quantization none is faster", quantization)


def use_int8_activations(model: nn.Module) -> nn.Module:
    """Let every packed int4 weight of a CPU model (Q8_0's too: as byte codes where the kernel
    takes them, else its int4 halves) multiply its steps (up to a dense copy's rows, where it
    has one) through the C kernel, the activations quantized to int8 per group, its scales in
    the kernel's block layout (``Int4Weight.for_c_kernel``, ``GroupInt8Weight.for_c_kernel``);
    builds the kernel now, not on the first step (nor while torch.compile traces, which never
    builds it). A shared weight stays shared."""
    if native_int4.module() is None:
        return model
    made: dict[int, tuple[object, object]] = {}  # id -> (the weight, kept alive: no id reused; its copy)

    def flagged(weight):
        if id(weight) not in made:
            if isinstance(weight, Int4Weight):
                copy = weight.for_c_kernel()
            elif isinstance(weight, GroupInt8Weight):  # one weight of byte codes, or its flagged halves
                copy = weight.for_c_kernel()
            elif isinstance(weight, ByRowsWeight):
                copy = dataclasses.replace(weight, packed=flagged(weight.packed))
            else:
                copy = weight
            made[id(weight)] = (weight, copy)
        return made[id(weight)][1]

    for module in model.modules():
        if isinstance(module, (QuantLinear, QuantEmbedding)):
            module.weight_q = flagged(module.weight_q)
    return model


def _packed_weight(codes: Codes, dtype: torch.dtype, device: torch.device, dense_weights_above: int):
    packed = packed_to(_pack_codes(codes, dtype), device)
    if not dense_weights_above:
        return packed
    dense = codes.dequantize().to(device=device, dtype=dtype).contiguous()  # [N, K]
    return ByRowsWeight(packed, dense, dense_weights_above)


def _pack_codes(codes: Codes, dtype: torch.dtype):
    if codes.kind == "q4":
        return Int4Weight.from_codes(codes.q, codes.d, codes.m, dtype)
    return GroupInt8Weight.from_codes(codes.q, codes.d, dtype)


def _fill_floats(model: nn.Module, floats: dict[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(floats))
    if missing:
        raise ValueError(f"weights: missing tensors {missing[:5]}")
    with torch.no_grad():
        for name, tensor in floats.items():
            if name not in params:  # a float LM head whose module is tied to the embedding
                continue
            params[name].copy_(tensor.to(params[name].dtype))


def _target_linears(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, nn.Linear) and n.split(".")[-1] in _LINEARS]


def _bias(linear: nn.Linear) -> torch.Tensor | None:
    return None if linear.bias is None else linear.bias.detach().clone()


def resident_weight_bytes(model: nn.Module) -> int:
    """Bytes of the weights as they sit in memory: packed weights (each once) and parameters."""
    seen: dict[int, int] = {}
    for m in model.modules():
        packed = getattr(m, "weight_q", None)
        if packed is not None:
            seen[id(packed)] = packed.nbytes
    params = {p.data_ptr(): p.nbytes for p in model.parameters()}
    return sum(seen.values()) + sum(params.values())
