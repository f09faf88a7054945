"""The body of a compile worker process: a GrammarCompiler over a pipe.

Started as ``python -m constraints.compile_worker FD`` on one end of a socket pair (a fresh
interpreter: nothing of the parent's ``__main__`` is re-run). The parent first sends the
pickled TokenizerInfo and options; the worker says ``("ready",)`` once its tables are built,
then takes ``(kind, spec)`` pairs; the
worker answers each with ``("ok", payload)`` (the CompiledGrammar pickled with its
TokenizerInfo left out, see ``dumps_grammar``) or ``("error", class name, message, limit)``.
It runs until the pipe closes; a parent that gives up on a compile kills the process.
"""

from __future__ import annotations

import gc
import io
import os
import pickle

from .compiler import GrammarCompiler
from .errors import ConstraintError
from .fsm import ByteDFA
from .grammar import CompiledGrammar
from .leaves import same_leaf, walk_marked_leaves, walked_whole
from .nfa import CALL_BASE
from .vocab import TokenizerInfo

_INFO_ID = "tokenizer-info"


def dumps_grammar(grammar: CompiledGrammar, info: TokenizerInfo) -> bytes:
    """``grammar`` pickled with ``info`` as a reference, so the vocabulary is not copied
    through the pipe and the parent's own TokenizerInfo (and what it caches) is reused;
    its leaf automata travel as their content (``leaves.same_leaf``)."""
    buf = io.BytesIO()
    _GrammarPickler(buf, info).dump(grammar)
    return buf.getvalue()


def loads_grammar(payload: bytes, info: TokenizerInfo) -> CompiledGrammar:
    """The grammar ``dumps_grammar`` sent, as this process uses it: each leaf automaton is
    the process's one object of that content, so the walks, distances and spellings cached
    per leaf (keyed by the object) for one grammar serve every later one, as they do where
    grammars compile in the process (unpickled apart, two grammars' string leaves would be
    two objects, and every grammar would walk the vocabulary for its leaves anew); the
    leaves marked to be walked whole (the any-value leaf) are walked here, once."""
    unpickler = pickle.Unpickler(io.BytesIO(payload))
    unpickler.persistent_load = lambda pid: info if pid == _INFO_ID else None
    grammar = unpickler.load()
    rules = getattr(grammar.automaton, "rules", None)
    if rules is not None:
        walk_marked_leaves(info, list(rules))
    return grammar


class _GrammarPickler(pickle.Pickler):
    def __init__(self, file, info: TokenizerInfo):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._info = info

    def persistent_id(self, obj):
        return _INFO_ID if obj is self._info else None

    def reducer_override(self, obj):
        if type(obj) is ByteDFA and obj.trans.shape[1] <= CALL_BASE:  # a leaf: no call columns
            return same_leaf, (obj.trans, obj.accept, walked_whole(obj))
        return NotImplemented


def serve(conn) -> None:
    """Compile what arrives on ``conn`` until it closes. The first message is the setup:
    (pickled TokenizerInfo, max_states, timeout_s, ConstraintLimits)."""
    if hasattr(os, "nice"):
        os.nice(10)  # on a busy CPU, serving (the parent) comes first
    try:
        info_bytes, max_states, timeout_s, limits = conn.recv()
        info: TokenizerInfo = pickle.loads(info_bytes)
        info.walks_leaves_whole = False  # the parent walks them, once, where it loads a grammar
        compiler = GrammarCompiler(info, max_states=max_states, compile_timeout_s=timeout_s, limits=limits)
        compiler.compile_regex("[a-z]")  # build the per-tokenizer tables before the first request
        # What is alive now (imports, the tokenizer's tables) is kept for good: frozen out of
        # the collector's reach, no full collection during a compile walks it again.
        gc.collect()
        gc.freeze()
        conn.send(("ready",))
        while True:
            kind, spec = conn.recv()
            conn.send(_compile(compiler, info, kind, spec))
    except (EOFError, OSError):  # the parent closed the pipe (shutdown) or went away
        return


def main(argv: list[str]) -> int:
    """``python -m constraints.compile_worker FD``: serve on the inherited socket FD."""
    from multiprocessing.connection import Connection

    serve(Connection(int(argv[0])))
    return 0


def _compile(compiler: GrammarCompiler, info: TokenizerInfo, kind: str, spec: str) -> tuple:
    try:
        if kind == "regex":
            grammar = compiler.compile_regex(spec)
        elif kind == "json_schema":
            grammar = compiler.compile_json_schema(spec)
        elif kind == "ebnf":
            grammar = compiler.compile_ebnf(spec)
        elif kind == "choices":
            grammar = compiler.compile_choices(spec)
        else:
            raise ConstraintError(f"unknown constraint kind {kind!r}")
        return "ok", dumps_grammar(grammar, info)
    except ConstraintError as e:
        facts = {k: getattr(e, k) for k in ("limit", "keyword", "pointer") if getattr(e, k, "")}
        return "error", type(e).__name__, str(e), facts
    except (RecursionError, MemoryError) as e:
        return "error", "GrammarTooComplexError", f"constraint too complex ({type(e).__name__})", {}
    except Exception as e:  # a compiler bug: the request fails, the worker lives on
        return "error", "InvalidConstraintError", f"{type(e).__name__}: {e}", {}


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
