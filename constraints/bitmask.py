"""Packed token bitmasks: int32 words, bit i%32 of word i//32 = token i allowed (xgrammar/SGLang)."""

from __future__ import annotations

import numpy as np
import torch


def bitmask_words(vocab_size: int) -> int:
    return (vocab_size + 31) // 32


def allocate_token_bitmask(batch_size: int, vocab_size: int) -> torch.Tensor:
    """All-allowed masks (-1 = every bit set), one row per request."""
    return torch.full((batch_size, bitmask_words(vocab_size)), -1, dtype=torch.int32)


_FEW_IDS = 24  # below this many ids, bits are set one by one (numpy's packing costs more)


def pack_token_ids(token_ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """Allowed token ids -> one packed int32 row."""
    if len(token_ids) < _FEW_IDS:  # bytes set in a bytearray: no numpy scalar per id
        packed = bytearray(bitmask_words(vocab_size) * 4)
        for t in np.asarray(token_ids).tolist():
            packed[t >> 3] |= 1 << (t & 7)
        return np.frombuffer(packed, dtype="<i4").astype(np.int32, copy=False)
    bits = np.zeros(bitmask_words(vocab_size) * 32, dtype=bool)
    bits[token_ids] = True
    # Little-endian bit order within bytes and bytes within the int32 words.
    return np.packbits(bits, bitorder="little").view("<i4").astype(np.int32)


def unpack_bitmask(row: torch.Tensor | np.ndarray, vocab_size: int) -> np.ndarray:
    """Packed int32 row -> bool [vocab_size] (tests and debugging)."""
    arr = row.numpy() if isinstance(row, torch.Tensor) else row
    bits = np.unpackbits(arr.astype("<i4").view(np.uint8), bitorder="little")
    return bits[:vocab_size].astype(bool)


def apply_token_bitmask_inplace(logits: torch.Tensor, bitmask: torch.Tensor,
                                rows: torch.Tensor | None = None) -> None:
    """Set disallowed logits to -inf (torch reference of the sampling kernel's mask step).

    logits [B, V] float; bitmask [B or len(rows), W] int32; rows: which logits rows to mask
    (bitmask row k applies to logits row rows[k]); None = bitmask row i -> logits row i.
    """
    vocab = logits.shape[-1]
    bit = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    # [R, W, 32] -> [R, W*32]
    allowed = ((bitmask.unsqueeze(-1) >> bit) & 1).bool().flatten(1)
    width = min(vocab, allowed.shape[1])
    if rows is None:
        rows = torch.arange(bitmask.shape[0], device=logits.device)
    sub = logits[rows]
    sub[:, :width].masked_fill_(~allowed[: len(rows), :width].to(logits.device), float("-inf"))
    if vocab > width:
        sub[:, width:] = float("-inf")
    logits[rows] = sub
