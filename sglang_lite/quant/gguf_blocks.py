"""GGUF tensors read straight from the file as codes and scales, without dequantizing.

Q4_0 (``w = (q - 8) d``), Q4_1 (``w = q d + m``) and Q8_0 (``w = q d``) blocks of 32 weights
become ``Codes``, which concatenate along rows (our merged q/k/v and gate/up) and turn into
``Int4Weight`` / ``GroupInt8Weight`` with the same values. F32 / F16 / BF16 tensors stay
plain; any other block type is dequantized by the gguf package (and says so in a log line).

llama.cpp's converter permutes the rows of Llama's q and k projections (its RoPE pairs
adjacent dims, Hugging Face's pairs halves); ``read_llama_tensors`` undoes that, as
transformers does when it loads a GGUF file.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sglang_lite.quant.gguf_file import GGUFTensor, read_gguf

log = logging.getLogger(__name__)

BLOCK = 32  # weights per Q4_0 / Q4_1 / Q8_0 block


@dataclass(frozen=True, slots=True)
class Codes:
    """A weight as its file stored it: ``kind`` "q4" (``w = q d + m``, q in 0..15), "q8"
    (``w = q d``, q int8) or "float" (``w`` itself). Rows are output features."""

    kind: str
    q: torch.Tensor  # [N, K]: codes, or the float weight
    d: torch.Tensor | None = None  # [N, K / 32]
    m: torch.Tensor | None = None  # [N, K / 32], q4 only

    @property
    def rows(self) -> int:
        return self.q.shape[0]

    def permute_rows(self, index: torch.Tensor) -> Codes:
        return Codes(self.kind, self.q[index], *(None if t is None else t[index] for t in (self.d, self.m)))

    def dequantize(self) -> torch.Tensor:
        if self.kind == "float":
            return self.q.float()
        w = self.q.float().view(self.rows, -1, BLOCK) * self.d.float()[..., None]
        if self.m is not None:
            w = w + self.m.float()[..., None]
        return w.view(self.rows, -1)


def concat_rows(parts: list[Codes]) -> Codes:
    kinds = {p.kind for p in parts}
    if len(kinds) > 1:  # e.g. q4 q/k with a q8 v: one format for the merged weight
        return Codes("float", torch.cat([p.dequantize() for p in parts]))
    if len(parts) == 1:
        return parts[0]
    cat = [torch.cat([getattr(p, f) for p in parts]) if getattr(parts[0], f) is not None else None
           for f in ("q", "d", "m")]
    return Codes(parts[0].kind, *cat)


def decode(tensor: GGUFTensor) -> Codes:
    """One tensor of the file -> ``Codes`` (copied out of the memory-mapped file)."""
    from gguf import GGMLQuantizationType as T
    from gguf import dequantize

    kind, shape, raw = T(tensor.type), list(tensor.shape), tensor.data
    if kind in (T.F32, T.F16):
        values = raw.view(np.float32 if kind == T.F32 else np.float16).astype(np.float32)
        return Codes("float", torch.from_numpy(values).reshape(shape))
    if kind == T.BF16:
        bits = torch.from_numpy(raw.view(np.int16).copy()).reshape(shape)
        return Codes("float", bits.view(torch.bfloat16).float())
    if kind in (T.Q4_0, T.Q4_1, T.Q8_0):
        return _decode_blocks(kind.name, raw.reshape(shape[0], -1))
    log.info("gguf: %s is %s, kept dequantized", tensor.name, kind.name)
    values = dequantize(raw.reshape(shape[0], -1), kind).astype(np.float32)
    return Codes("float", torch.from_numpy(values).reshape(shape))


def _decode_blocks(kind: str, raw: np.ndarray) -> Codes:
    scales = 2 if kind == "Q4_1" else 1
    width = 2 * scales + (BLOCK if kind == "Q8_0" else BLOCK // 2)  # bytes per block
    blocks = raw.reshape(raw.shape[0], -1, width)  # [N, K / 32, bytes]
    n, g = blocks.shape[:2]
    halves = np.ascontiguousarray(blocks[..., : 2 * scales]).view(np.float16)  # [N, G, 1 or 2]
    d = torch.from_numpy(halves[..., 0].astype(np.float32))
    body = blocks[..., 2 * scales :]
    if kind == "Q8_0":
        return Codes("q8", torch.from_numpy(np.ascontiguousarray(body).view(np.int8).reshape(n, g * BLOCK)), d)
    # qs[j] holds weight j in its low nibble and weight j + 16 in its high one
    q = np.concatenate([body & 15, body >> 4], axis=-1).reshape(n, g * BLOCK)
    m = halves[..., 1].astype(np.float32) if kind == "Q4_1" else -8 * halves[..., 0].astype(np.float32)
    return Codes("q4", torch.from_numpy(q.astype(np.uint8)), d, torch.from_numpy(m))


def read_llama_tensors(path: Path, num_heads: int, num_kv_heads: int) -> Iterator[tuple[str, Codes]]:
    """(Hugging Face name, Codes) for every tensor of a llama-architecture GGUF file."""
    file = read_gguf(path)
    if file.architecture != "llama":
        raise ValueError("quantization: keeping GGUF blocks supports llama-architecture files, "
                         f"not {file.architecture!r}")
    for tensor in file.tensors:
        name = _hf_name(tensor.name)
        if name is None:
            continue
        codes = decode(tensor)
        if name.endswith("self_attn.q_proj.weight"):
            codes = codes.permute_rows(_unpermute_index(codes.rows, num_heads))
        elif name.endswith("self_attn.k_proj.weight"):
            codes = codes.permute_rows(_unpermute_index(codes.rows, num_kv_heads))
        yield name, codes


def gguf_architecture(path: Path) -> str | None:
    return read_gguf(path).architecture


def _unpermute_index(rows: int, heads: int) -> torch.Tensor:
    """Row order that turns llama.cpp's interleaved rotary rows back into Hugging Face's."""
    # llama.cpp wrote hf.reshape(heads, 2, D/2, K).swapaxes(1, 2); undo it on row indices.
    idx = torch.arange(rows).view(heads, rows // heads // 2, 2).transpose(1, 2)
    return idx.reshape(rows)


_LAYER = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
          "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
          "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
          "ffn_down": "mlp.down_proj"}
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def _hf_name(name: str) -> str | None:
    base, _, suffix = name.rpartition(".")
    if base in _TOP:
        return f"{_TOP[base]}.{suffix}"
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)", base)
    if m and m.group(2) in _LAYER:
        return f"model.layers.{m.group(1)}.{_LAYER[m.group(2)]}.{suffix}"
    return None  # rope_freqs and the like: computed, not loaded
