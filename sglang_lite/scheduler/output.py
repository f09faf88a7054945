"""Post-processing of sampled tokens: finish conditions (EOS, stop tokens, stop strings,
length), incremental text, logprobs, and the chunks handed to each request's consumer."""

from __future__ import annotations

import time
from typing import Any

from sglang_lite.detokenizer import IncrementalDetokenizer
from sglang_lite.outputs import FinishReason, OutputChunk
from sglang_lite.request import Req
from sglang_lite.stop_regex import first_match, hold_from


class OutputProcessor:
    def __init__(self, tokenizer, eos_token_ids: tuple[int, ...], stream_interval: int = 1):
        self.tokenizer = tokenizer
        self.eos_token_ids = set(eos_token_ids)
        self.stream_interval = stream_interval

    def append_token(self, req: Req, token: int, logprob: float | None,
                     top: list[tuple[float, int]] | None, context_length: int) -> FinishReason | None:
        """Record ``token``; return a finish reason if the request is now done."""
        if req.out.first_token_time is None:
            req.out.first_token_time = time.monotonic()
        req.output_ids.append(token)
        if req.return_logprob:
            req.logprobs.output.append((logprob, token))
            if req.top_logprobs_num:
                req.logprobs.output_top.append(top or [])
        self._detokenize(req, [token])
        return self._finish_reason(req, token, context_length)

    def append_run(self, req: Req, tokens: list[int], context_length: int,
                   logprobs: tuple[list[float], list | None] | None = None) -> tuple[int, FinishReason | None]:
        """Record the tokens of a continuous decode run up to the first one that finishes the
        request -> (tokens taken, finish reason or None); ``logprobs`` = (the tokens' logprobs,
        their top logprobs or None) when the request wants them. The tokens are detokenized
        in one step; a request with stop strings takes them one at a time (a stop string may
        end inside the run, and its text decides where)."""
        lps, tops = logprobs if logprobs is not None else (None, None)
        if (req.sampling.stop or req.sampling.stop_regex) and self.tokenizer is not None:
            for n, token in enumerate(tokens, 1):
                reason = self.append_token(req, token, lps[n - 1] if lps else None,
                                           tops[n - 1] if tops else None, context_length)
                if reason is not None:
                    return n, reason
            return len(tokens), None
        if req.out.first_token_time is None:
            req.out.first_token_time = time.monotonic()
        start, reason = len(req.output_ids), None
        for token in tokens:
            req.output_ids.append(token)
            reason = self._finish_reason(req, token, context_length)
            if reason is not None:
                break
        taken = req.output_ids[start:]
        if req.return_logprob:
            req.logprobs.output.extend(zip(lps[: len(taken)], taken))
            if req.top_logprobs_num:
                req.logprobs.output_top.extend(tops[: len(taken)] if tops else [[]] * len(taken))
        self._detokenize(req, taken)
        return len(taken), reason

    def _finish_reason(self, req: Req, token: int, context_length: int) -> FinishReason | None:
        """Whether ``token``, just appended, finishes the request."""
        p = req.sampling
        n = len(req.output_ids)
        if n > p.min_new_tokens or n == p.max_new_tokens:
            if token in p.stop_token_ids or (not p.ignore_eos and token in self.eos_token_ids):
                return FinishReason.stop(token)
            matched = self._find_stop_string(req)
            if matched is not None:
                return FinishReason.stop(matched)
        if n >= p.max_new_tokens:
            return FinishReason.at_length(p.max_new_tokens)
        if req.seq_len >= context_length:
            return FinishReason.at_length(n)
        return None

    def _detokenize(self, req: Req, ids: list[int]) -> None:
        if self.tokenizer is None:
            return
        out = req.out
        if out.detok is None:
            out.detok = IncrementalDetokenizer(self.tokenizer, req.origin_input_ids,
                                               req.sampling.skip_special_tokens)
            if len(req.output_ids) > len(ids):  # recomputed after retraction: catch up
                ids = req.output_ids
        out.text += out.detok.step(ids)

    def _find_stop_string(self, req: Req) -> str | None:
        stops, patterns = req.sampling.stop, req.sampling.stop_regex
        if not (stops or patterns) or self.tokenizer is None:
            return None
        out, best = req.out, None
        if stops:
            # Only the tail can contain a new match: the last token added at most a few chars.
            window = max(len(s) for s in stops) + 16
            start = max(len(out.text) - window, 0)
            for s in stops:
                idx = out.text.find(s, start)
                if idx != -1 and (best is None or idx < best[0]):
                    best = (idx, s)
        if patterns:  # a regex match may span any length: search from what is not yet sent
            found = first_match(patterns, out.text, out.emitted_chars)
            if found is not None and (best is None or found[0] < best[0]):
                best = found
        if best is None:
            return None
        if not req.sampling.no_stop_trim:
            out.text = out.text[: best[0]]
        return best[1]

    # ---- emission -------------------------------------------------------------------------
    def maybe_emit(self, req: Req) -> None:
        """A streamed chunk once ``stream_interval`` tokens are new (a continuous decode run
        adds several at once: one chunk carries them all)."""
        if req.stream and len(req.output_ids) - req.out.emitted_ids >= self.stream_interval:
            self._emit(req, final=False)

    def finish(self, req: Req) -> None:
        out = req.out
        out.finish_time = time.monotonic()
        # A stop-string match already trimmed the text: nothing after it may be added.
        if out.detok is not None and not isinstance(req.finished_reason.matched, str):
            out.text += out.detok.flush()
        self._emit(req, final=True)

    def fail(self, req: Req) -> None:
        """The final chunk of a request whose normal finish raised: its reason and counts,
        nothing new to decode (the detokenizer may be what broke)."""
        req.out.finish_time = time.monotonic()
        req.on_output(OutputChunk("", [], self.meta_info(req), finished=True))

    def _emit(self, req: Req, final: bool) -> None:
        out = req.out
        text_end = len(out.text) if final else _sendable_end(req)
        chunk = OutputChunk(out.text[out.emitted_chars : text_end], req.output_ids[out.emitted_ids :],
                            self.meta_info(req), final)
        if req.return_logprob:
            chunk.meta_info.update(_output_logprobs(req))
        if final and req.logprob_start_len is not None:
            chunk.meta_info.update(_input_logprobs(req))
        out.emitted_chars = text_end
        out.emitted_ids = len(req.output_ids)
        req.on_output(chunk)

    @staticmethod
    def meta_info(req: Req) -> dict[str, Any]:
        info: dict[str, Any] = {
            "id": req.rid,
            "prompt_tokens": len(req.origin_input_ids),
            "completion_tokens": len(req.output_ids),
            "cached_tokens": req.cached_tokens,
            "finish_reason": req.finished_reason.to_dict() if req.finished_reason else None,
            "num_retractions": req.num_retractions,
        }
        if req.out.first_token_time is not None:
            info["ttft"] = req.out.first_token_time - req.arrival_time
        if req.out.finish_time is not None:
            info["e2e_latency"] = req.out.finish_time - req.arrival_time
        return info


def _sendable_end(req: Req) -> int:
    """Where the text a streamed chunk may carry ends: what could still become a stop
    string (or the start of a stop pattern's match) is held back, so it is never streamed."""
    out, stop, patterns = req.out, req.sampling.stop, req.sampling.stop_regex
    end = len(out.text)
    if stop:
        end = max(out.emitted_chars, end - (max(len(s) for s in stop) - 1))
    if patterns:
        end = min(end, hold_from(patterns, out.text, out.emitted_chars))
    return end


def _output_logprobs(req: Req) -> dict[str, list]:
    """The logprobs of the output tokens not yet sent, as meta_info fields."""
    sent, rec = req.out.emitted_ids, req.logprobs
    fields = {"output_token_logprobs": [(lp, t, None) for lp, t in rec.output[sent:]]}
    if req.top_logprobs_num:
        fields["output_top_logprobs"] = [[(lp, t, None) for lp, t in row] for row in rec.output_top[sent:]]
    return fields


def _input_logprobs(req: Req) -> dict[str, list]:
    """The prompt's logprobs from logprob_start_len on, as the final chunk's meta_info
    fields (position 0 has no logprob: nothing scores the first token)."""
    rec = req.logprobs
    first = [(None, req.origin_input_ids[0], None)] if req.logprob_start_len == 0 else []
    fields = {"input_token_logprobs": first + [(lp, t, None) for lp, t in rec.input]}
    if req.top_logprobs_num:
        fields["input_top_logprobs"] = [None] * len(first) + [
            [(lp, t, None) for lp, t in row] for row in rec.input_top]
    return fields
