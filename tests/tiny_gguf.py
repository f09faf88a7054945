"""A tiny Llama GGUF file written with the `gguf` package: Q4_1 / Q8_0 blocks and a byte-level
BPE tokenizer of 259 tokens, so a conversion test reads a real GGUF file in seconds instead of
dequantizing the embedded 135M model (about 25 s)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 64, 128, 2, 4, 2, 16
MERGES = ["Ġ t", "h e"]


def _byte_level_alphabet() -> list[str]:
    """GPT-2's printable stand-in for each of the 256 bytes, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(shifted)) for b in range(256)]


def tiny_vocab() -> list[str]:
    return _byte_level_alphabet() + [a + b for a, b in (m.split(" ") for m in MERGES)] + ["<|endoftext|>"]


def write_tiny_gguf(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Write the file; return each quantized tensor's dequantized values (GGUF names, [out, in])."""
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import dequantize, quantize

    tokens = tiny_vocab()
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * (len(tokens) - 1) + [3])  # normal tokens, then one control token
    w.add_token_merges(MERGES)
    w.add_bos_token_id(len(tokens) - 1)
    w.add_eos_token_id(len(tokens) - 1)
    rng = np.random.default_rng(seed)
    values: dict[str, np.ndarray] = {}

    def packed(name: str, shape: tuple[int, int], qtype=GGMLQuantizationType.Q4_1) -> None:
        blocks = quantize(rng.normal(0.0, 0.02, size=shape).astype(np.float32), qtype)
        values[name] = dequantize(blocks, qtype)
        w.add_tensor(name, blocks, raw_dtype=qtype)

    packed("token_embd.weight", (len(tokens), HIDDEN), GGMLQuantizationType.Q8_0)
    for i in range(LAYERS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        for part, shape in (("attn_q", (HIDDEN, HIDDEN)), ("attn_k", (KV_HEADS * HEAD_DIM, HIDDEN)),
                            ("attn_v", (KV_HEADS * HEAD_DIM, HIDDEN)), ("attn_output", (HIDDEN, HIDDEN)),
                            ("ffn_gate", (FFN, HIDDEN)), ("ffn_up", (FFN, HIDDEN)), ("ffn_down", (HIDDEN, FFN))):
            packed(f"blk.{i}.{part}.weight", shape)
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return values
