"""TokenizerInfo: the byte string of every token id, and which ids are EOS or special.

Byte-level BPE (GPT-2, SmolLM2, Llama-3) spells bytes through the GPT-2 byte-to-unicode map;
SentencePiece with byte fallback (Llama-2, Mistral) spells spaces as U+2581 and raw bytes as
`<0xAB>` tokens. Special tokens map to b"" and are never allowed; EOS is handled by the matcher.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_SPIECE_SPACE = "\u2581"
_FEW_FIRST_BYTES = 128  # above this many, starting_with scans the first byte column...
_FEW_TOKENS = 2048  # ...and above this many tokens (sorting the groups costs more)


@lru_cache(maxsize=1)
def gpt2_unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode table."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1))
    printable += list(range(0xAE, 0xFF + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


@dataclass(frozen=True, slots=True)
class LexArrays:
    """The vocabulary in lexicographic order as flat arrays: token i's bytes are
    ``data[off[i]:off[i + 1]]``, ``lcp[i]`` bytes in common with token i - 1, the tokens
    starting with byte b are ``first[b]:first[b + 1]``, ``ids[i]`` its id;
    ``pos[i]`` its layout position and ``lex_of_pos[p]`` the index of layout position p."""

    data: np.ndarray  # uint8
    off: np.ndarray  # [N + 1] int64
    lcp: np.ndarray  # [N] int32
    first: np.ndarray  # [257] int64
    ids: np.ndarray  # [N] int64
    pos: np.ndarray  # [N] int64: the layout position of each
    lex_of_pos: np.ndarray  # [N] int64


@dataclass(slots=True)
class VocabLayout:
    """Non-empty tokens sorted by byte length, as a column-major padded byte matrix."""

    token_ids: np.ndarray  # [N] int64, ascending byte length
    lengths: np.ndarray  # [N] int64
    columns: np.ndarray  # [max_len, N] uint8; columns[j, i] = byte j of token i (0 padded)
    by_first_byte: np.ndarray  # [N] positions grouped by first byte (ascending within a group)
    first_byte_starts: np.ndarray  # [257] group b is by_first_byte[starts[b]:starts[b + 1]]
    _lex: tuple | None = None
    _starts: dict[bytes, int] | None = None
    _lex_arrays: LexArrays | None = None

    @property
    def max_len(self) -> int:
        """The longest token's bytes (the layout ascends by length)."""
        return int(self.lengths[-1]) if len(self.lengths) else 0

    def lexicographic(self) -> tuple[list[bytes], np.ndarray, np.ndarray]:
        """(token bytes sorted, their token ids, their layout positions): the tokens with a
        given prefix are one contiguous run of the sorted list (a flattened token trie)."""
        if self._lex is None:
            texts = [self.columns[: int(n), i].tobytes() for i, n in enumerate(self.lengths)]
            order = sorted(range(len(texts)), key=texts.__getitem__)
            pos = np.array(order, dtype=np.int64)
            self._lex = ([texts[i] for i in order], self.token_ids[pos], pos)
        return self._lex

    def lexicographic_arrays(self) -> LexArrays:
        """lexicographic() as flat arrays, for walks outside Python (native.py)."""
        if self._lex_arrays is None:
            tokens, ids, pos = self.lexicographic()
            lengths = self.lengths[pos]
            off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            lcp = _common_prefixes(self.columns[:, pos], lengths)
            firsts = self.columns[0, pos].astype(np.int64)
            first = np.searchsorted(firsts, np.arange(257)).astype(np.int64)
            lex_of_pos = np.empty(len(pos), dtype=np.int64)
            lex_of_pos[pos] = np.arange(len(pos))
            self._lex_arrays = LexArrays(np.frombuffer(b"".join(tokens), dtype=np.uint8), off, lcp,
                                         first, np.ascontiguousarray(ids, dtype=np.int64), pos, lex_of_pos)
        return self._lex_arrays

    def prefix_starts(self) -> dict[bytes, int]:
        """Every prefix of a token -> the index in ``lexicographic()``'s sorted list of the
        first token that starts with it (a prefix no token has is absent): one dict lookup
        per byte where a bisection of the vocabulary would find the same run."""
        if self._starts is None:
            starts: dict[bytes, int] = {}
            for i, t in enumerate(self.lexicographic()[0]):
                for n in range(len(t), 0, -1):  # sorted: a known prefix's own prefixes are known
                    if t[:n] in starts:
                        break
                    starts[t[:n]] = i
            self._starts = starts
        return self._starts

    def starting_with(self, first_bytes: np.ndarray) -> np.ndarray:
        """Positions (ascending) of the tokens whose first byte is one of ``first_bytes``."""
        starts = self.first_byte_starts
        many = len(first_bytes) > _FEW_FIRST_BYTES or (
            len(first_bytes) > 1 and int((starts[first_bytes + 1] - starts[first_bytes]).sum()) > _FEW_TOKENS)
        if many:  # one pass over the first column, no sort
            wanted = np.zeros(256, dtype=bool)
            wanted[first_bytes] = True
            return np.nonzero(wanted[self.columns[0]])[0] if len(self.columns) else np.zeros(0, dtype=np.int64)
        parts = [self.by_first_byte[starts[b]:starts[b + 1]] for b in first_bytes.tolist()]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


@dataclass(slots=True)
class TokenizerInfo:
    token_bytes: list[bytes]  # len == vocab_size; b"" = never allowed
    eos_token_ids: tuple[int, ...]
    special_token_ids: frozenset[int] = frozenset()
    _layout: VocabLayout | None = field(default=None, init=False, repr=False)
    # Token walks through shared leaf automata, reused by every grammar of this tokenizer
    # (see pushdown.LeafWalks); keyed by the leaf's ByteDFA object and state.
    leaf_walks: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # (right_hash of a leaf state, counted) -> (dfa, (its tables, state)) walked: another leaf's state
    # of the same language takes that walk (leaves._same_language_walk).
    leaf_languages: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # The vocabulary grouped by what a leaf DFA sees of each token (leaves._Spellings).
    leaf_spellings: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # Fewest bytes to finish from each state of a shared leaf (completion.GrammarDistances).
    leaf_distances: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # Whether leaves marked walk_whole are walked here (leaves.walk_marked_leaves): not in a
    # compile worker, whose walks never reach the process that fills the masks.
    walks_leaves_whole: bool = field(default=True, init=False, repr=False, compare=False)
    # Per-token features the uniqueItems check reads (unique_items._token_features).
    unique_item_features: tuple | None = field(default=None, init=False, repr=False, compare=False)
    _ids_by_bytes: dict[bytes, int] | None = field(default=None, init=False, repr=False, compare=False)
    _single_bytes: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    _eos_row: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def vocab_size(self) -> int:
        return len(self.token_bytes)

    @property
    def single_byte_tokens(self) -> np.ndarray:
        """[256] bool: the bytes that are tokens by themselves (built once, read-only)."""
        if self._single_bytes is None:
            out = np.zeros(256, dtype=bool)
            out[[b[0] for b in self.ids_by_bytes if len(b) == 1]] = True
            out.flags.writeable = False
            self._single_bytes = out
        return self._single_bytes

    @property
    def eos_row(self) -> np.ndarray:
        """The EOS tokens as a packed int32 row (built once, read-only)."""
        if self._eos_row is None:
            from .bitmask import pack_token_ids

            row = pack_token_ids(np.array(self.eos_token_ids, dtype=np.int64), self.vocab_size)
            row.flags.writeable = False
            self._eos_row = row
        return self._eos_row

    @property
    def ids_by_bytes(self) -> dict[bytes, int]:
        """Each non-empty token spelling -> its (last) id; built once, shared by every grammar."""
        if self._ids_by_bytes is None:
            self._ids_by_bytes = {b: t for t, b in enumerate(self.token_bytes) if b}
        return self._ids_by_bytes

    @property
    def layout(self) -> VocabLayout:
        if self._layout is None:
            self._layout = _build_layout(self.token_bytes)
        return self._layout

    @classmethod
    def from_huggingface(cls, tokenizer, vocab_size: int | None = None) -> TokenizerInfo:
        """vocab_size is the model's logits width; ids past the tokenizer are never allowed."""
        vocab: dict[str, int] = tokenizer.get_vocab()
        size = max(vocab_size or 0, max(vocab.values()) + 1)
        added = {i: t.content for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        special |= {i for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items() if t.special}
        decode = _spiece_bytes if _is_byte_fallback(vocab) else _byte_level_bytes
        token_bytes = [b""] * size
        for text, i in vocab.items():
            if i in special or i >= size:
                continue
            token_bytes[i] = added[i].encode() if i in added else decode(text)
        eos = tokenizer.eos_token_id
        eos_ids = tuple(sorted({eos} if isinstance(eos, int) else set(eos or [])))
        return cls(token_bytes, eos_ids, frozenset(special))


def _common_prefixes(columns: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """[N] int32: bytes each token (a column of ``columns``, [max_len, N], zero padded) has
    in common with the one before it (0 for the first)."""
    out = np.zeros(len(lengths), dtype=np.int32)
    if len(lengths) < 2:
        return out
    differ = columns[:, 1:] != columns[:, :-1]  # [max_len, N - 1]
    first = np.where(differ.any(axis=0), differ.argmax(axis=0), columns.shape[0])
    out[1:] = np.minimum(first, np.minimum(lengths[1:], lengths[:-1]))
    return out


def _is_byte_fallback(vocab: dict[str, int]) -> bool:
    return "<0x0A>" in vocab and "<0xFF>" in vocab


def _byte_level_bytes(text: str) -> bytes:
    table = gpt2_unicode_to_byte()
    try:
        return bytes(table[c] for c in text)
    except KeyError:
        return text.encode()


def _spiece_bytes(text: str) -> bytes:
    m = _BYTE_FALLBACK.match(text)
    if m:
        return bytes([int(m.group(1), 16)])
    return text.replace(_SPIECE_SPACE, " ").encode()


def _build_layout(token_bytes: list[bytes]) -> VocabLayout:
    ids = [i for i, b in enumerate(token_bytes) if b]
    ids.sort(key=lambda i: len(token_bytes[i]))
    lengths = np.array([len(token_bytes[i]) for i in ids], dtype=np.int64)
    max_len = int(lengths.max()) if len(ids) else 0
    columns = np.zeros((max_len, len(ids)), dtype=np.uint8)
    for k, i in enumerate(ids):
        b = token_bytes[i]
        columns[: len(b), k] = np.frombuffer(b, dtype=np.uint8)
    first = columns[0].astype(np.int64) if max_len else np.zeros(0, dtype=np.int64)
    order = np.argsort(first, kind="stable")
    starts = np.searchsorted(first[order], np.arange(257))
    return VocabLayout(np.array(ids, dtype=np.int64), lengths, columns, order, starts)
