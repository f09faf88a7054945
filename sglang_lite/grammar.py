"""Constrained decoding in the engine: compile a request's regex / JSON schema / EBNF with
``constraints``, fill its bitmask row each step, and advance its matcher by the sampled
token. A matcher failure finishes only its own request."""

from __future__ import annotations

import threading

import torch

from sglang_lite.request import Req
from sglang_lite.sampling_params import SamplingParams


class GrammarBackend:
    def __init__(self, tokenizer, vocab_size: int, eos_token_ids: tuple[int, ...], jump_forward: bool):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids
        self.jump_forward_enabled = jump_forward
        self._compiler = None
        self._lock = threading.Lock()  # compile from caller threads, match on the scheduler's

    @property
    def compiler(self):
        with self._lock:
            if self._compiler is None:
                from constraints import GrammarCompiler, TokenizerInfo

                info = TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.vocab_size)
                self._compiler = GrammarCompiler(info)
            return self._compiler

    def compile(self, params: SamplingParams):
        """The compiled grammar for ``params``; ValueError naming the field if it cannot be."""
        from constraints import ConstraintError

        kind, spec = params.constraint
        try:
            if kind == "regex":
                return self.compiler.compile_regex(spec)
            if kind == "json_schema":
                return self.compiler.compile_json_schema(spec)
            return self.compiler.compile_ebnf(spec)
        except ConstraintError as e:
            raise ValueError(f"{kind}: {e}") from e

    def fill_bitmask(self, reqs: list[Req]) -> torch.Tensor | None:
        """[B, ceil(V/32)] int32 rows (all ones for unconstrained rows), or None."""
        if not any(r.sampling.constraint is not None for r in reqs):
            return None
        from constraints import bitmask_words

        # Pinned on CUDA machines: the sampler moves it to the device in one async copy.
        mask = torch.full((len(reqs), bitmask_words(self.vocab_size)), -1, dtype=torch.int32,
                          pin_memory=torch.cuda.is_available())
        for i, req in enumerate(reqs):
            if req.sampling.constraint is None:
                continue
            try:
                if req.grammar is None:
                    req.grammar = self.compile(req.sampling).matcher()
                req.grammar.fill_next_token_bitmask(mask, i)
            except Exception as e:  # fail this request alone, at its next accept
                req.grammar = _BrokenMatcher(f"constraint: {type(e).__name__}: {e}")
        return mask

    def jump_forward(self, req: Req, token: int, limit: int, retokenize: bool = True) -> list[int]:
        """The tokens to append after sampling ``token`` (already accepted): ``[token]``
        plus the text the grammar forces next, at most ``limit`` extra tokens, all accepted
        by the matcher. With ``retokenize``, the sampled token and the forced text are
        tokenized together, so the boundary gets the tokens a tokenizer would produce
        (``{"`` rather than ``{`` + ``"``)."""
        if not self.jump_forward_enabled or limit <= 0:
            return [token]
        forced = req.grammar.find_jump_forward_string()
        if not forced:
            return [token]
        if retokenize:
            head = self.tokenizer.decode([token])
            ids = self.tokenizer.encode(head + forced, add_special_tokens=False)[: limit + 1]
            req.grammar.rollback(1)
            if self._decodes_to(ids, head + forced) and self._accept_all(req.grammar, ids):
                return ids
            req.grammar.accept_token(token)  # undo the rollback, then the plain way
        ids = self.tokenizer.encode(forced, add_special_tokens=False)[:limit]
        return [token] + ids if self._accept_all(req.grammar, ids) else [token]

    def _decodes_to(self, ids: list[int], text: str) -> bool:
        # Only a lossless tokenization may replace the sampled token (e.g. no dropped spaces).
        return "\ufffd" not in text and self.tokenizer.decode(ids) == text

    @staticmethod
    def _accept_all(matcher, ids: list[int]) -> bool:
        """Accept ``ids`` one by one; on the first refusal undo them all and return False."""
        for n, t in enumerate(ids):
            if not matcher.accept_token(t):
                matcher.rollback(n)
                return False
        return True

    def accept(self, req: Req, token: int) -> dict | None:
        """Advance the matcher; a finish reason if the constraint is done or broken."""
        if req.grammar is None:
            return None
        if isinstance(req.grammar, _BrokenMatcher):
            return {"type": "abort", "message": req.grammar.message}
        try:
            accepted = req.grammar.accept_token(token)
        except Exception as e:
            return {"type": "abort", "message": f"constraint: {type(e).__name__}: {e}"}
        if not accepted:
            return {"type": "abort", "message": f"constraint: token {token} rejected by the grammar"}
        if req.grammar.is_terminated():
            return {"type": "stop", "matched": token}
        return None


class _BrokenMatcher:
    """Stands in for a matcher that failed; the request is aborted at its next token."""

    def __init__(self, message: str):
        self.message = message

    def fill_next_token_bitmask(self, mask, row) -> None:
        pass

    def find_jump_forward_string(self) -> str:
        return ""

    def is_terminated(self) -> bool:
        return False
