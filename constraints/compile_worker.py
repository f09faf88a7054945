"""The body of a compile worker process: a GrammarCompiler over a pipe.

The parent passes the pickled TokenizerInfo at start; the worker says ``("ready",)`` once
its tables are built, then takes ``(kind, spec)`` pairs; the
worker answers each with ``("ok", payload)`` (the CompiledGrammar pickled with its
TokenizerInfo left out, see ``dumps_grammar``) or ``("error", class name, message, limit)``.
It runs until the pipe closes; a parent that gives up on a compile kills the process.
"""

from __future__ import annotations

import io
import pickle

from .compiler import GrammarCompiler
from .errors import ConstraintError
from .grammar import CompiledGrammar
from .limits import ConstraintLimits
from .vocab import TokenizerInfo

_INFO_ID = "tokenizer-info"


def dumps_grammar(grammar: CompiledGrammar, info: TokenizerInfo) -> bytes:
    """``grammar`` pickled with ``info`` as a reference, so the vocabulary is not copied
    through the pipe and the parent's own TokenizerInfo (and what it caches) is reused."""
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.persistent_id = lambda obj: _INFO_ID if obj is info else None
    pickler.dump(grammar)
    return buf.getvalue()


def loads_grammar(payload: bytes, info: TokenizerInfo) -> CompiledGrammar:
    unpickler = pickle.Unpickler(io.BytesIO(payload))
    unpickler.persistent_load = lambda pid: info if pid == _INFO_ID else None
    return unpickler.load()


def serve(conn, info_bytes: bytes, max_states: int, timeout_s: float, limits: ConstraintLimits) -> None:
    """Process entry point (spawned): compile what arrives on ``conn`` until it closes."""
    info: TokenizerInfo = pickle.loads(info_bytes)
    compiler = GrammarCompiler(info, max_states=max_states, compile_timeout_s=timeout_s, limits=limits)
    compiler.compile_regex("[a-z]")  # build the per-tokenizer tables before the first request
    try:
        conn.send(("ready",))
        while True:
            kind, spec = conn.recv()
            conn.send(_compile(compiler, info, kind, spec))
    except (EOFError, OSError):  # the parent closed the pipe (shutdown) or went away
        return


def _compile(compiler: GrammarCompiler, info: TokenizerInfo, kind: str, spec: str) -> tuple:
    try:
        if kind == "regex":
            grammar = compiler.compile_regex(spec)
        elif kind == "json_schema":
            grammar = compiler.compile_json_schema(spec)
        elif kind == "ebnf":
            grammar = compiler.compile_ebnf(spec)
        else:
            raise ConstraintError(f"unknown constraint kind {kind!r}")
        return "ok", dumps_grammar(grammar, info)
    except ConstraintError as e:
        return "error", type(e).__name__, str(e), getattr(e, "limit", "")
    except (RecursionError, MemoryError) as e:
        return "error", "GrammarTooComplexError", f"constraint too complex ({type(e).__name__})", ""
    except Exception as e:  # a compiler bug: the request fails, the worker lives on
        return "error", "InvalidConstraintError", f"{type(e).__name__}: {e}", ""
