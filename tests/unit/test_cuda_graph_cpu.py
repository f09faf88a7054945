"""The CUDA-graph path's host logic on CPU: batch-size buckets, padded static inputs, and the
padded decode forward run eagerly (same buffers, same padding, no capture) against the
ordinary decode path. The captured graphs themselves are checked in tests/gpu."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sglang_lite import Engine
from sglang_lite.config import EngineConfig
from sglang_lite.cuda_graph import (
    INPUT_IDS,
    NUM_ROWS,
    OUT_CACHE_LOC,
    PAD_VALUES,
    POSITIONS,
    PREFIX_LENS,
    REQ_POOL_INDICES,
    SEQ_LENS,
    CudaGraphRunner,
    capture_batch_sizes,
    fill_decode_inputs,
    padded_batch_size,
)
from sglang_lite.scheduled_batch import ScheduledBatch


@pytest.mark.parametrize("max_bs, expected", [
    (1, [1]),
    (3, [1, 2, 3]),
    (8, [1, 2, 4, 8]),
    (20, [1, 2, 4, 8, 16, 20]),
    (64, [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]),
])
def test_capture_batch_sizes(max_bs, expected):
    assert capture_batch_sizes(max_bs) == expected


def test_capture_batch_sizes_default_cover_every_batch_with_little_padding():
    sizes = capture_batch_sizes(256)
    assert sizes[0] == 1 and sizes[-1] == 256 and len(sizes) == 35
    for bs in range(1, 257):
        padded = padded_batch_size(bs, sizes)
        assert padded >= bs and padded - bs < max(8, bs // 2)


def test_capture_batch_sizes_rejects_zero():
    with pytest.raises(ValueError, match="cuda_graph_max_bs"):
        capture_batch_sizes(0)


@pytest.mark.parametrize("bs, padded", [(1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (16, 16), (17, 24),
                                        (64, 64), (65, None)])
def test_padded_batch_size(bs, padded):
    assert padded_batch_size(bs, capture_batch_sizes(64)) == padded


def _fake_req(prompt, output, kv_len, row):
    return SimpleNamespace(origin_input_ids=prompt, output_ids=output, kv_len=kv_len, req_pool_idx=row)


def test_fill_decode_inputs_pads_into_reserved_slot_zero():
    reqs = [
        _fake_req([5, 6, 7], [8, 9], kv_len=4, row=3),  # computes position 4: output token 1
        _fake_req([11, 12], [], kv_len=1, row=0),  # last prompt token (a 1-token final chunk)
        _fake_req([21], [22, 23, 24], kv_len=3, row=7),
    ]
    batch = ScheduledBatch(reqs, [1, 1, 1], [torch.tensor([40]), torch.tensor([17]), torch.tensor([99])])
    host = torch.full((NUM_ROWS, 8), -7, dtype=torch.int64)
    fill_decode_inputs(host, batch, padded_bs=4)
    assert host[INPUT_IDS, :4].tolist() == [9, 12, 24, PAD_VALUES[INPUT_IDS]]
    assert host[POSITIONS, :4].tolist() == [4, 1, 3, 0]
    assert host[OUT_CACHE_LOC, :4].tolist() == [40, 17, 99, 0]
    assert host[REQ_POOL_INDICES, :4].tolist() == [3, 0, 7, 0]
    assert host[SEQ_LENS, :4].tolist() == [5, 2, 4, 1]
    assert host[PREFIX_LENS, :4].tolist() == [4, 1, 3, 0]
    assert (host[:, 4:] == -7).all()  # past the padded size: untouched


def test_engine_config_gpu_defaults_and_graph_limit():
    gpu = EngineConfig.create(device="cuda")
    assert (gpu.max_prefill_tokens, gpu.chunked_prefill_size) == (16384, 8192)
    assert gpu.attention_backend == "triton" and gpu.dtype == "bfloat16"
    assert gpu.cuda_graph_batch_limit == 256
    assert EngineConfig.create(device="cuda", max_running_requests=48).cuda_graph_batch_limit == 48
    assert EngineConfig.create(device="cuda", disable_cuda_graph=True).cuda_graph_batch_limit == 0
    assert EngineConfig.create(device="cuda", attention_backend="torch").cuda_graph_batch_limit == 0
    user = EngineConfig.create(device="cuda", max_prefill_tokens=4096)
    assert (user.max_prefill_tokens, user.chunked_prefill_size) == (4096, 4096)
    assert EngineConfig.create(device="cuda", chunked_prefill_size=512).chunked_prefill_size == 512
    cpu = EngineConfig.create(device="cpu")
    assert (cpu.max_prefill_tokens, cpu.chunked_prefill_size) == (4096, 1024)
    assert cpu.cuda_graph_batch_limit == 0
    assert (gpu.num_continuous_decode_steps, cpu.num_continuous_decode_steps) == (8, 1)
    assert EngineConfig.create(device="cpu", num_continuous_decode_steps=4).num_continuous_decode_steps == 4
    for bad in (0, 65):
        with pytest.raises(ValueError, match="num_continuous_decode_steps"):
            EngineConfig.create(device="cpu", num_continuous_decode_steps=bad)


def test_graph_runner_refuses_a_backend_it_cannot_capture():
    eng = Engine("dummy:tiny", max_total_tokens=256, max_running_requests=4)
    try:
        runner = eng.scheduler.runner
        assert runner.graph_runner is None  # CPU: no graphs
        with pytest.raises(ValueError, match="cannot be captured"):
            CudaGraphRunner(runner.model, runner.backend, runner.req_pool, runner.device, [1, 2])
    finally:
        eng.shutdown()


PROMPTS = [[3, 14, 15, 92, 65], [35, 89, 79, 32, 38, 46, 26, 43, 38, 32, 79, 50, 28, 84, 19, 71, 69],
           [39, 93], [75, 10, 58, 20, 97, 49, 44, 59, 23, 7, 81, 64], [6, 28, 62, 8, 99]]
MAX_NEW = [9, 4, 12, 7, 10]  # different finish times: the decode batch shrinks 5 -> 1


def _generate(eng):
    params = [{"temperature": 0, "max_new_tokens": m, "ignore_eos": True} for m in MAX_NEW]
    return [o["output_ids"] for o in eng.generate(input_ids=PROMPTS, sampling_params=params)]


def test_padded_decode_matches_plain_decode_end_to_end():
    """Decode batches of 5, 4, 3 (padded to 8, 4, 4) and 2, 1 through the static-buffer path
    give the same greedy tokens as the ordinary path; padding writes only slot 0."""
    plain = Engine("dummy:tiny", max_total_tokens=512, max_running_requests=8)
    padded = Engine("dummy:tiny", max_total_tokens=512, max_running_requests=8)
    try:
        runner = padded.scheduler.runner
        graph_runner = CudaGraphRunner(runner.model, runner.backend, runner.req_pool, runner.device,
                                       [1, 2, 4, 8], use_graphs=False)
        calls = []
        forward = graph_runner.forward
        graph_runner.forward = lambda b: calls.append(len(b.reqs)) or forward(b)
        runner.graph_runner = graph_runner
        expected, got = _generate(plain), _generate(padded)
        assert got == expected
        assert calls and max(calls) == 5 and min(calls) == 1
        # Pages other than the reserved page 0 hold the same k/v in both pools.
        page = padded.config.page_size
        for a, b in zip(plain.kv_pool.k_buffers, padded.kv_pool.k_buffers):
            torch.testing.assert_close(a[page:], b[page:], rtol=1e-5, atol=1e-5)
    finally:
        plain.shutdown()
        padded.shutdown()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_padded_decode_logits_match_unpadded_rows(backend):
    """A decode batch of 3 again through the padded path (k/v rewritten with equal values):
    real rows equal the ordinary path's logits; padding rows (seq_len 1, slot 0) are harmless.
    With the Triton backend (what graphs capture; interpreted on CPU) against the torch one."""
    from sglang_lite_kernels._triton import HAS_TRITON

    if backend == "triton" and not HAS_TRITON:
        pytest.skip("triton is not installed")
    eng = Engine("dummy:tiny", max_total_tokens=512, max_running_requests=8)
    try:
        runner = eng.scheduler.runner
        attention, sizes = runner.backend, [1, 4]
        if backend == "triton":
            from sglang_lite.attention.triton_backend import TritonAttentionBackend

            attention, sizes = TritonAttentionBackend(eng.kv_pool), [8]
            assert attention.decode_num_kv_splits(8, 2, torch.device("cpu")) in (2, 4, 8, 16, 32)
        graph_runner = CudaGraphRunner(runner.model, attention, runner.req_pool, runner.device, sizes,
                                       use_graphs=False)
        seen = {}
        original = runner.forward

        def spy(batch):
            logits = original(batch)
            if batch.is_decode and len(batch.reqs) == 3 and "plain" not in seen:
                seen["plain"], seen["padded"] = logits.clone(), graph_runner.forward(batch).clone()
            return logits

        runner.forward = spy
        params = [{"temperature": 0, "max_new_tokens": 5, "ignore_eos": True}] * 3
        eng.generate(input_ids=PROMPTS[:3], sampling_params=params)
        assert seen["padded"].shape == seen["plain"].shape == (3, eng.model_config.vocab_size)
        torch.testing.assert_close(seen["padded"], seen["plain"], rtol=1e-4, atol=1e-4)
    finally:
        eng.shutdown()


def _generate_sampled(eng):
    """Greedy and seeded-sampling rows together, finishing at different steps."""
    params = [{"temperature": 0.9 * (i % 2), "top_k": 50 if i % 2 else -1, "seed": 7 + i,
               "max_new_tokens": m, "ignore_eos": True} for i, m in enumerate(MAX_NEW)]
    return [o["output_ids"] for o in eng.generate(input_ids=PROMPTS, sampling_params=params)]


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_continuous_decode_through_padded_static_buffers_matches_one_step_at_a_time(backend):
    """Runs of 4 decode steps replay the padded path with inputs advanced on the device:
    the same tokens as one step at a time, greedy and seeded, as the batch shrinks 5 -> 1."""
    from sglang_lite_kernels._triton import HAS_TRITON

    if backend == "triton" and not HAS_TRITON:
        pytest.skip("triton is not installed")
    plain = Engine("dummy:tiny", max_total_tokens=512, max_running_requests=8)
    runs = Engine("dummy:tiny", max_total_tokens=512, max_running_requests=8, num_continuous_decode_steps=4)
    try:
        runner = runs.scheduler.runner
        attention = runner.backend
        if backend == "triton":  # everything a GPU decode runs but the capture: Triton attention and fused ops
            from sglang_lite.attention.triton_backend import TritonAttentionBackend

            attention = TritonAttentionBackend(runs.kv_pool)
            runs.model.use_fused_ops(True)
        graph_runner = CudaGraphRunner(runner.model, attention, runner.req_pool, runner.device,
                                       [1, 2, 4, 8], use_graphs=False)
        runner.graph_runner = graph_runner
        calls = []
        decode_steps = graph_runner.decode_steps
        graph_runner.decode_steps = lambda b, f: calls.append((len(b.reqs), b.num_steps)) or decode_steps(b, f)
        expected, got = _generate_sampled(plain), _generate_sampled(runs)
        assert got == expected
        assert (5, 4) in calls and all(n <= 4 for _, n in calls)
        assert runs.get_stats()["num_free_pages"] + runs.get_stats()["num_cached_pages"] == \
            runs.get_stats()["num_usable_pages"]
    finally:
        plain.shutdown()
        runs.shutdown()
