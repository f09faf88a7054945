"""The pushdown automaton's vocabulary walks in C (native.c), built on first use.

The C file is compiled once per source, compiler and Python into an extension module in a
cache folder (``$SGLANG_LITE_CACHE``, else ``$XDG_CACHE_HOME/sglang-lite``, else
``~/.cache/sglang-lite``) and imported from there. Without a compiler (``$CC``, else ``cc`` or
``gcc``) or Python's headers, where the build fails, or with ``SGLANG_LITE_NATIVE=0``,
``module()`` is None: callers walk in Python (the same tokens), and one log line says why.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import subprocess
import sysconfig
import tempfile
import threading
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("native.c")
_NAME = "_native"
_BUILD_TIMEOUT_S = 120.0
_lock = threading.Lock()
_loaded: list = []  # [module or None] once tried

# native.c's position flags
RETURNS, IN_COUNTED, CLOSES_COUNTED, BOUNDED = 1, 2, 4, 8


def module():
    """The built extension, or None where it cannot be built (callers walk in Python)."""
    return load_once(_loaded, _load)


def load_once(loaded: list, load):
    """``loaded[0]``, filled by ``load()`` the first time (one thread builds; others wait).
    The serving path's C extensions load through it too (sglang_lite/native.py)."""
    if loaded:
        return loaded[0]
    with _lock:
        if not loaded:
            loaded.append(load())
        return loaded[0]


def _load():
    if os.environ.get("SGLANG_LITE_NATIVE", "1") == "0":
        log.info("constraints: native walks off (SGLANG_LITE_NATIVE=0); token walks run in Python")
        return None
    try:
        return build_extension(_SOURCE, _NAME, _CFLAGS)
    except BuildUnavailable as e:
        log.warning("constraints: %s; token walks run in Python", e)
        return None


class BuildUnavailable(Exception):
    """No compiler or Python headers, or the build failed: the message says which."""


def build_extension(source: Path, name: str, cflags: tuple[str, ...], tag: bytes = b""):
    """Import C file ``source`` as extension module ``name`` (``PyInit_<name>``), compiled with
    ``cflags`` once per source, flags, compiler and Python into the cache folder (module
    docstring); ``tag`` adds what else the built file depends on (say, the CPU it was built
    for). BuildUnavailable where it cannot be built or loaded."""
    compiler = _compiler()
    include = sysconfig.get_paths().get("include")
    if compiler is None or not include or not os.path.exists(os.path.join(include, "Python.h")):
        raise BuildUnavailable("no C compiler ($CC, cc, gcc) or no Python.h")
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    digest = hashlib.sha256(source.read_bytes() + compiler.encode() + include.encode() + suffix.encode()
                            + " ".join(cflags).encode() + tag).hexdigest()[:16]
    path = _cache_dir() / digest / f"{name}{suffix}"
    try:
        if not path.exists():
            _build(compiler, include, cflags, source, path)
        loader = importlib.machinery.ExtensionFileLoader(name, str(path))
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        return mod
    except (OSError, ImportError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", b"") or b""
        raise BuildUnavailable(f"building {source.name} with {compiler} failed ({e}"
                               f"{': ' + detail.decode(errors='replace')[-300:] if detail else ''})") from e


def _compiler() -> str | None:
    cc = os.environ.get("CC")
    if cc:
        return shutil.which(cc)
    return shutil.which("cc") or shutil.which("gcc")


def _cache_dir() -> Path:
    root = os.environ.get("SGLANG_LITE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sglang-lite")
    return Path(root) / "native"


# -O3: the table-stacking loop vectorizes there, not at -O2 (stacking 749 rows of 256 cells:
# 210 -> 41-50 us measured in a micro-benchmark).
# No -march=native: the built file is cached on disk and may outlive the CPU it was built on.
_CFLAGS = ("-O3",)


def _build(compiler: str, include: str, cflags: tuple[str, ...], source: Path, path: Path) -> None:
    """Compile to a temporary file beside ``path``, then rename: processes building at
    once each write their own and the last rename wins (the files are the same)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        subprocess.run([compiler, *cflags, "-shared", "-fPIC", f"-I{include}", "-o", tmp, str(source)],
                       check=True, capture_output=True, timeout=_BUILD_TIMEOUT_S)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


_vocab_tables: dict[int, tuple] = {}  # id(LexArrays) -> (it, its capsule)


def _vocab(mod, lex):
    """The capsule of a vocabulary's lexicographic arrays, made once per tokenizer."""
    hit = _vocab_tables.get(id(lex))
    if hit is None or hit[0] is not lex:
        if len(_vocab_tables) >= 16:
            _vocab_tables.clear()
        hit = _vocab_tables[id(lex)] = (lex, mod.vocab_tables(lex.data, lex.off, lex.lcp, lex.first, lex.ids))
    return hit[1]


class PdaWalker:
    """One pushdown automaton's tables laid out for native.c (once per automaton; the
    vocabulary's once per tokenizer). ``trie`` and ``tokens`` return None where the C walk
    gives up (a step past ``max_configs`` configurations, or its buffers full): the caller
    then walks in Python, which prunes as the automaton's own steps do."""

    def __init__(self, mod, trans: np.ndarray, call_counts: np.ndarray, calls: list, flags: np.ndarray,
                 count_lo: np.ndarray, count_cap: np.ndarray, inc: np.ndarray, lex, vocab_size: int,
                 max_configs: int):
        """``trans`` int32 [S, 256] (read in place), ``call_counts[g]`` calls at position g,
        ``calls`` their (callee start, return position, counted) in position order."""
        if trans.dtype != np.int32 or trans.shape[1] != 256 or not trans.flags.c_contiguous:
            raise ValueError(f"trans must be a C-contiguous int32 [S, 256] table, not {trans.dtype} {trans.shape}")
        self._mod, self._lex = mod, lex
        self._words = (vocab_size + 31) // 32
        self._pda = mod.pda_tables(
            trans,
            np.concatenate([[0], np.cumsum(call_counts)]).astype(np.int32),
            np.array([c[0] for c in calls] or [0], dtype=np.int32),
            np.array([c[1] for c in calls] or [0], dtype=np.int32),
            np.array([c[2] for c in calls] or [0], dtype=np.uint8),
            np.ascontiguousarray(flags, dtype=np.uint8),
            np.ascontiguousarray(count_lo, dtype=np.int32),
            np.ascontiguousarray(count_cap, dtype=np.int32),
            np.ascontiguousarray(inc).view(np.uint8), max_configs)
        self._vocab = _vocab(mod, lex)
        # trie_kept(configs, close_first, rows, r, most): trie's walk into ``rows[r]`` (zeroed
        # here) in one call with that row's live words: (the shallowest depth, native.sparse_row's
        # pairs or None past ``most`` live words), or -1 where the walk gives up (the row is
        # then not all written). Bound to the C function itself: a first visit's fill calls
        # it, and a Python method around it cost as much as a small walk's tail.
        self.trie_kept = functools.partial(mod.walk_trie_kept, self._pda, self._vocab)

    def trie(self, configs, close_first: bool) -> tuple[np.ndarray, int] | None:
        """The packed row of the tokens the configurations allow, walked as a trie, and the
        shallowest stack depth met. ``close_first`` False: the configurations read their
        first byte as they are (their calls are the caller's to walk)."""
        rows = np.empty((1, self._words), dtype=np.int32)  # zeroed by the walk
        found = self.trie_kept(configs, close_first, rows, 0, 0)
        return None if found == -1 else (rows[0], found[0])

    def token_ends(self, configs) -> tuple[list, np.ndarray, np.ndarray] | None:
        """The states tokens end in (frozensets of (stack, position): what the automaton's
        own steps reach), every token's id in lexicographic order, and the index of the
        state each ends in (-1 where it dies): no per-token lists are built."""
        row = np.zeros(self._words, dtype=np.int32)
        end = np.full(len(self._lex.ids), -1, dtype=np.int32)
        found = self._mod.walk_ends(self._pda, self._vocab, configs, row, end)
        if isinstance(found, int):
            return None
        return found[1], self._lex.ids, end

    def end_states(self, configs) -> list | None:
        """token_ends' distinct end states alone, without saying which token ends in which
        (no per-token array to fill, no row: a subtree taken whole costs one step)."""
        found = self._mod.walk_ends(self._pda, self._vocab, configs, None, None)
        return None if isinstance(found, int) else found[1]

    def advance(self, configs, data: bytes):
        """The state after ``data`` (a frozenset of (stack, position), as the automaton's own
        steps give it), None where ``data`` dies, False where the C walk gives up."""
        found = self._mod.advance_bytes(self._pda, configs, data)
        return False if isinstance(found, int) else found

    def segment(self, stack: tuple[int, ...], g: int, dist: np.ndarray, alphabet: np.ndarray,
                final: np.ndarray, steps: np.ndarray, limit: int):
        """pushdown._segment's descent from (stack, g) to its frame's return: (bytes, stack,
        position), or None where there is no way within ``limit`` steps. ``steps`` [2 S]
        keeps each position's next step (-2 until found), for every later descent."""
        return self._mod.segment(self._pda, stack, g, dist, alphabet, final, steps, limit)

    def tokens(self, configs, positions: np.ndarray, cols: np.ndarray, row: np.ndarray | None = None):
        """Layout positions ``positions``, each from byte ``cols[i]`` on, walked from the
        configurations: (packed row of the survivors, which survive, shallowest depth met).
        With ``row``, the survivors' bits are ORed into it (and it is the row returned)."""
        if row is None:
            row = np.zeros(self._words, dtype=np.int32)
        index = self._lex.lex_of_pos[positions]
        alive = np.zeros(len(index), dtype=bool)
        lowest = self._mod.walk_list(self._pda, self._vocab, configs, index,
                                     np.ascontiguousarray(cols, dtype=np.int64), alive, row)
        return None if lowest < 0 else (row, alive, lowest)


_scratch = threading.local()  # per thread: the C walks run without the GIL


def _leaf_buffers(lex) -> tuple:
    """Output buffers of the leaf walk for this thread, reused (allocating ~6 MB a call,
    pages mapped anew each time, cost more than the walk of a small leaf)."""
    key = (len(lex.ids), len(lex.data))
    buffers = getattr(_scratch, "leaf", None)
    if buffers is None or buffers[0] != key:
        n, cap = key  # a token leaves at most once per byte
        buffers = _scratch.leaf = (key, (np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
                                         np.empty(n, dtype=bool), np.empty(cap, dtype=np.int64),
                                         np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64)))
    return buffers[1]


def leaf_walk(mod, trans: np.ndarray, accept: np.ndarray, starts: np.ndarray | None, lex, q: int):
    """native.c's walk from state ``q`` of a leaf DFA of every token whose first byte it
    allows: ((inside positions, characters, ends accepting), (exit positions, columns,
    characters before)), as leaves._walk gives them for those tokens (in another order);
    None where its buffers are too small."""
    if trans.dtype != np.int32 or not trans.flags.c_contiguous or trans.shape[1] < 256:
        raise ValueError(f"trans must be a C-contiguous int32 [S, >=256] table, not {trans.dtype} {trans.shape}")
    in_i, in_count, in_end, ex_i, ex_col, ex_count = _leaf_buffers(lex)
    found = mod.walk_leaf(trans, np.ascontiguousarray(accept, dtype=bool),
                          None if starts is None else np.ascontiguousarray(starts, dtype=np.uint8),
                          _vocab(mod, lex), q, in_i, in_count, in_end, ex_i, ex_col, ex_count, None, None)
    if found is None:
        return None
    n_in, n_ex = found
    return ((lex.pos[in_i[:n_in]], in_count[:n_in].copy(), in_end[:n_in].copy()),  # the buffers are reused
            (lex.pos[ex_i[:n_ex]], ex_col[:n_ex].copy(), ex_count[:n_ex].copy()))


def leaf_rows_by_count(mod, trans: np.ndarray, accept: np.ndarray, starts: np.ndarray, lex, q: int,
                       vocab_size: int) -> tuple[np.ndarray, np.ndarray, int] | None:
    """The tokens that stay inside a counted leaf from state ``q`` as cumulative packed rows
    by the characters each starts (row c: at most c), those that leave the leaf open and
    those that close it, and the most characters any starts: a row walk writes each inside
    token's count (whole subtrees too, where their run rises alike; ~0.1 ms for a string's
    body where listing the ~48k tokens took ~0.8 ms), bucketed in C. None where a count
    passes 127 or the exit buffers are too small."""
    in_i, in_count, in_end, ex_i, ex_col, ex_count = _leaf_buffers(lex)
    vocab, words = _vocab(mod, lex), (vocab_size + 31) // 32
    counts = np.full(len(lex.ids), 0xFF, dtype=np.uint8)
    found = mod.walk_leaf(trans, np.ascontiguousarray(accept, dtype=bool), np.ascontiguousarray(starts, dtype=np.uint8),
                          vocab, q, in_i, in_count, in_end, ex_i, ex_col, ex_count, np.zeros(words, dtype=np.int32),
                          counts)
    if found is None:
        return None
    inside = counts[counts != 0xFF] & 0x7F
    most = int(inside.max()) if len(inside) else 0
    rows = np.zeros((2, most + 1, words), dtype=np.int32)
    mod.bucket_rows(vocab, counts, rows[0], rows[1], words)
    return rows[0], rows[1], most


def spell_after(mod, lex, data: bytes, cost: np.ndarray, step: np.ndarray, last: bytes,
                last_cost: np.ndarray, last_step: np.ndarray) -> int:
    """The fewest tokens spelling each suffix of ``data`` (cost, inf where none do) and the end
    of one such spelling's first token (step), into the unfilled arrays; the suffix
    it shares with ``last`` (spelled before: ``last_cost``, ``last_step``) copied from those
    (its steps shifted to data's positions); the shared length."""
    return mod.spell_after(_vocab(mod, lex), data, cost, step, last, last_cost, last_step)


def leaf_row(mod, trans: np.ndarray, accept: np.ndarray, lex, q: int, vocab_size: int,
             starts: np.ndarray | None = None):
    """leaf_walk with the inside tokens as a packed row (no per-token lists to build): (row,
    (exit positions, columns, characters before each: 0 without ``starts``)); None where the
    exit buffers are full."""
    if trans.dtype != np.int32 or not trans.flags.c_contiguous or trans.shape[1] < 256:
        raise ValueError(f"trans must be a C-contiguous int32 [S, >=256] table, not {trans.dtype} {trans.shape}")
    in_i, in_count, in_end, ex_i, ex_col, ex_count = _leaf_buffers(lex)
    row = np.zeros((vocab_size + 31) // 32, dtype=np.int32)
    rises = None if starts is None else np.ascontiguousarray(starts, dtype=np.uint8)
    found = mod.walk_leaf(trans, np.ascontiguousarray(accept, dtype=bool), rises, _vocab(mod, lex), q,
                          in_i, in_count, in_end, ex_i, ex_col, ex_count, row, None)
    if found is None:
        return None
    n_ex = found[1]
    counts = ex_count[:n_ex].copy() if starts is not None else np.zeros(n_ex, dtype=np.int64)
    return row, (lex.pos[ex_i[:n_ex]], ex_col[:n_ex].copy(), counts)
