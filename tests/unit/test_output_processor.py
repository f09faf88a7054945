"""OutputProcessor on its own: the embedded model's real tokenizer, requests fed tokens as the
scheduler feeds them, chunks collected from on_output; no engine, no scheduler thread."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from sglang_lite.outputs import FinishReason, OutputAccumulator, OutputChunk
from sglang_lite.request import Req
from sglang_lite.sampling_params import SamplingParams
from sglang_lite.scheduler.output import OutputProcessor

CONTEXT = 4096


@pytest.fixture(scope="module")
def tok(model_dir):
    return AutoTokenizer.from_pretrained(str(model_dir))


@pytest.fixture(scope="module")
def eos(tok) -> int:
    return tok.eos_token_id


def _req(tok, chunks: list, stream: bool = False, return_logprob: bool = False, **params) -> Req:
    prompt = tok.encode("Say something:", add_special_tokens=False)
    return Req("r", prompt, SamplingParams.from_dict(params), seed=0, on_output=chunks.append,
               stream=stream, return_logprob=return_logprob)


def _feed(proc: OutputProcessor, req: Req, ids: list[int], context: int = CONTEXT) -> FinishReason | None:
    for t in ids:
        reason = proc.append_token(req, t, -0.5, None, context)
        if reason is not None:
            req.finished_reason = reason
            return reason
        proc.maybe_emit(req)
    return None


def test_finish_reasons_eos_stop_token_length_context(tok, eos):
    proc = OutputProcessor(tok, (eos,))
    words = tok.encode(" one two three four", add_special_tokens=False)
    assert _feed(proc, _req(tok, []), [*words[:2], eos]) == FinishReason.stop(eos)
    assert _feed(proc, _req(tok, [], ignore_eos=True, max_new_tokens=3), [eos, eos, eos]) == FinishReason.at_length(3)
    held = _req(tok, [], min_new_tokens=2)  # EOS counts only after min_new_tokens
    assert _feed(proc, held, [eos, eos, eos, words[0]]) == FinishReason.stop(eos) and len(held.output_ids) == 3
    assert _feed(proc, _req(tok, [], stop_token_ids=[words[1]]), words) == FinishReason.stop(words[1])
    req = _req(tok, [])
    assert _feed(proc, req, words, context=len(req.origin_input_ids) + 2) == FinishReason.at_length(2)


def test_a_stop_string_trims_the_text_and_is_never_streamed(tok, eos):
    proc = OutputProcessor(tok, (eos,))
    chunks: list[OutputChunk] = []
    req = _req(tok, chunks, stream=True, stop=[" three"])
    ids = tok.encode(" one two three four", add_special_tokens=False)
    reason = _feed(proc, req, ids)
    assert reason == FinishReason.stop(" three")
    proc.finish(req)
    streamed = "".join(c.text for c in chunks)
    assert streamed == " one two" and req.out.text == " one two"
    assert chunks[-1].finished and not any(c.finished for c in chunks[:-1])
    assert chunks[-1].meta_info["finish_reason"] == {"type": "stop", "matched": " three"}


def test_chunks_carry_new_ids_text_and_logprobs_and_add_up(tok, eos):
    proc = OutputProcessor(tok, (eos,), stream_interval=2)
    chunks: list[OutputChunk] = []
    req = _req(tok, chunks, stream=True, return_logprob=True, max_new_tokens=5)
    ids = tok.encode(" café au lait, please", add_special_tokens=False)[:5]
    reason = _feed(proc, req, ids)
    proc.finish(req)
    assert reason == FinishReason.at_length(5)
    assert [len(c.output_ids) for c in chunks] == [2, 2, 1]  # every 2 tokens, then the rest
    acc = OutputAccumulator()
    for c in chunks:
        acc.add(c.to_dict())
    result = acc.result()
    assert result["output_ids"] == ids and result["text"] == tok.decode(ids)
    assert result["meta_info"]["output_token_logprobs"] == [(-0.5, t, None) for t in ids]
    assert result["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    assert result["meta_info"]["completion_tokens"] == 5


def test_a_continuous_run_stops_at_the_first_finishing_token(tok, eos):
    proc = OutputProcessor(tok, (eos,))
    req = _req(tok, [])
    words = tok.encode(" a b c", add_special_tokens=False)
    taken, reason = proc.append_run(req, [*words[:2], eos, words[2]], CONTEXT)
    assert (taken, reason) == (3, FinishReason.stop(eos))
    assert req.output_ids == [*words[:2], eos]


def test_a_failed_finish_still_ends_the_request_with_one_chunk(tok, eos):
    proc = OutputProcessor(tok, (eos,))
    chunks: list[OutputChunk] = []
    req = _req(tok, chunks)
    req.finished_reason = FinishReason.abort("engine error: boom")
    proc.fail(req)
    assert len(chunks) == 1 and chunks[0].finished and chunks[0].output_ids == []
    assert chunks[0].meta_info["finish_reason"] == {"type": "abort", "message": "engine error: boom"}
