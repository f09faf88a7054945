"""JSON-schema constraint engines behind one small interface: ours, xgrammar, llguidance.

Each engine: `compile(schema_text)` (raises on a schema it refuses; the exception type is the
error recorded) and `matcher(compiled)` -> a WalkMatcher over a preallocated packed int32 row.
Peers are optional imports (`pip install sglang-lite[peers]`); settings are their defaults:
- xgrammar 0.2.9: GrammarCompiler(max_threads=1), compile_json_schema(schema) with its defaults
  (strict_mode=True, any_whitespace=True), GrammarMatcher, fill_next_token_bitmask.
- llguidance 1.9.1: grammar_from("json_schema", schema) with default options; "compile" is the
  LLMatcher construction (where it builds its grammar), a matcher in error state is a refusal.
All engines get the same tokenizer, vocabulary size and EOS ids.
"""

from __future__ import annotations

import importlib.util

from constraints import (
    GrammarCompiler,
    InvalidConstraintError,
    TokenizerInfo,
    allocate_token_bitmask,
)
from sglang_lite.bench.schema_walk import MAX_TOKENS

PEERS = ("xgrammar", "llguidance")


class PeerRefusal(Exception):
    """A peer reported an error without raising (llguidance's error state)."""

    def __init__(self, message: str):
        super().__init__(message)
        # The message's head names the cause ("Unimplemented keys: [\"not\"]"): tally by it.
        self.kind = message.split("\n", 1)[0].split(". ", 1)[0][:48]


class _TorchRowMatcher:
    """Adapter for matchers that fill a torch [1, W] int32 bitmask (ours, xgrammar)."""

    def __init__(self, matcher, bitmask, budgeted: bool = False):
        self._m, self._bitmask, self._budgeted = matcher, bitmask, budgeted
        self.row = bitmask[0].numpy()

    def fill(self, tokens_left: int) -> None:
        if self._budgeted:  # ours closes within the tokens left, as the engine runs it
            self._m.fill_next_token_bitmask(self._bitmask, 0, max_tokens=tokens_left)
        else:
            self._m.fill_next_token_bitmask(self._bitmask, 0)

    def accept(self, token_id: int) -> bool:
        return bool(self._m.accept_token(token_id))

    def is_terminated(self) -> bool:
        return bool(self._m.is_terminated())


class OursEngine:
    name = "ours"

    def __init__(self, info: TokenizerInfo, compile_timeout_s: float = 10.0):
        self.info = info
        self.compiler = GrammarCompiler(info, compile_timeout_s=compile_timeout_s)

    def compile(self, schema_text: str):
        """As the engine admits a request: compile, then its max_tokens check (the walk's
        MAX_TOKENS: ``GrammarBackend.admit``)."""
        compiled = self.compiler.compile_json_schema(schema_text)
        if compiled.admits_nothing:
            raise InvalidConstraintError("no output satisfies this constraint")  # admit's 400
        compiled.matcher().finishes_within(MAX_TOKENS)
        return compiled

    def matcher(self, compiled) -> _TorchRowMatcher:
        return _TorchRowMatcher(compiled.matcher(), allocate_token_bitmask(1, self.info.vocab_size),
                                budgeted=True)


class XGrammarEngine:
    name = "xgrammar"

    def __init__(self, hf_tokenizer, info: TokenizerInfo):
        import xgrammar

        self._xgr = xgrammar
        self.vocab_size = info.vocab_size
        xinfo = xgrammar.TokenizerInfo.from_huggingface(
            hf_tokenizer, vocab_size=info.vocab_size, stop_token_ids=list(info.eos_token_ids))
        self.compiler = xgrammar.GrammarCompiler(xinfo, max_threads=1)

    def compile(self, schema_text: str):
        return self.compiler.compile_json_schema(schema_text)

    def matcher(self, compiled) -> _TorchRowMatcher:
        bitmask = self._xgr.allocate_token_bitmask(1, self.vocab_size)
        return _TorchRowMatcher(self._xgr.GrammarMatcher(compiled), bitmask)


class _LLGuidanceMatcher:
    def __init__(self, matcher, vocab_size: int):
        import llguidance.numpy as llnp

        self._m, self._llnp = matcher, llnp
        self._bitmask = llnp.allocate_token_bitmask(1, vocab_size)
        self.row = self._bitmask[0]

    def fill(self, tokens_left: int) -> None:
        self._llnp.fill_next_token_bitmask(self._m, self._bitmask, 0)

    def accept(self, token_id: int) -> bool:
        return bool(self._m.consume_token(token_id))

    def is_terminated(self) -> bool:
        return bool(self._m.is_stopped())


class LLGuidanceEngine:
    name = "llguidance"

    def __init__(self, hf_tokenizer, info: TokenizerInfo):
        import llguidance
        import llguidance.hf

        self._llg = llguidance
        self.vocab_size = info.vocab_size
        self.tokenizer = llguidance.hf.from_tokenizer(
            hf_tokenizer, n_vocab=info.vocab_size, eos_token=list(info.eos_token_ids))

    def compile(self, schema_text: str):
        grammar = self._llg.grammar_from("json_schema", schema_text)
        matcher = self._llg.LLMatcher(self.tokenizer, grammar)
        if matcher.is_error():
            raise PeerRefusal(matcher.get_error())
        return matcher  # one walk per schema: the compiled matcher is the walk's matcher

    def matcher(self, compiled) -> _LLGuidanceMatcher:
        return _LLGuidanceMatcher(compiled, self.vocab_size)


def peer_installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def make_engine(name: str, hf_tokenizer, info: TokenizerInfo, compile_timeout_s: float = 10.0):
    if name == "ours":
        return OursEngine(info, compile_timeout_s)
    if name == "xgrammar":
        return XGrammarEngine(hf_tokenizer, info)
    if name == "llguidance":
        return LLGuidanceEngine(hf_tokenizer, info)
    raise ValueError(f"unknown engine {name!r}: expected ours, {', '.join(PEERS)}")

